"""Variant timings under tuning knobs (environment variables read at import), one
configuration per process so the plan and launcher constants take effect.

    python benchmarks/explore_variants.py --dtype fp32 --dtype fp16 --sizes 20,24,27,30 \
        --env "" --env FWHT_LOG_E=3 --json out.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import click


@click.command()
@click.option("--dtype", "dtypes", multiple=True, default=("fp32", "fp16"), show_default=True)
@click.option("--sizes", default="20,24,27,30", show_default=True, help="log2 sizes, comma-separated")
@click.option("--env", "envs", multiple=True, default=("",), help="KEY=VALUE[,KEY=VALUE] per run")
@click.option("--variant", "only", multiple=True, help="variant names to keep (default: all)")
@click.option("--per-pass", is_flag=True, help="also time each pass alone")
@click.option("--json", "out_json", default=None, type=click.Path(dir_okay=False))
@click.option("--child", is_flag=True, hidden=True)
def main(dtypes, sizes, envs, only, per_pass, out_json, child):
    if child:
        from fwht_gpu import bench
        from fwht_gpu.cuda import launch
        rows = bench.bench_variants(launch.cupy(), dtypes, [int(s) for s in sizes.split(",")],
                                    echo=lambda s: print(s, file=sys.stderr), only=only or None,
                                    per_pass=per_pass)
        print(json.dumps(rows))
        return
    results = []
    for env in envs:
        extra = dict(kv.split("=", 1) for kv in env.split(",") if kv)
        click.echo(f"== {env or 'defaults'}")
        cmd = [sys.executable, __file__, "--child", "--sizes", sizes]
        for d in dtypes:
            cmd += ["--dtype", d]
        for v in only:
            cmd += ["--variant", v]
        if per_pass:
            cmd.append("--per-pass")
        r = subprocess.run(cmd, env={**os.environ, **extra}, capture_output=True, text=True)
        click.echo(r.stderr)
        if r.returncode:
            raise SystemExit(r.returncode)
        results.append({"env": extra, "rows": json.loads(r.stdout)})
    if out_json:
        with open(out_json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
