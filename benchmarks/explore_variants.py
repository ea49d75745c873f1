"""Variant timings under tuning settings, swept in one process (each run plans with its own
``fwht_gpu.Tuning``):

    python benchmarks/explore_variants.py --dtype fp32 --dtype fp16 --sizes 20,24,27,30 \
        --env "" --env FWHT_LOG_E=3 --json out.json

``--env`` (alias ``--tuning``) gives one run's settings as ``KEY=VALUE[,KEY=VALUE]`` with
the ``FWHT_<FIELD>`` names of ``Tuning.from_env`` (``FWHT_LOG_E=3``) or the field names
(``log_e=3``), on top of any ``FWHT_*`` variables of the environment. ``--json`` writes a
result record (fwht_gpu.provenance, kind ``fwht-variants``); each row carries its run's
settings (``env``) and their effect (``tuning``: the fields that differ from the defaults).
"""
from __future__ import annotations

import dataclasses
import os

import click

from fwht_gpu import Tuning, gpu, provenance
from fwht_gpu import bench as fbench

FIELDS = {f.name for f in dataclasses.fields(Tuning)}


def parse_env(spec: str) -> dict:
    """``"FWHT_LOG_E=3,tile_bytes=32768"`` -> ``{"FWHT_LOG_E": "3", "FWHT_TILE_BYTES": "32768"}``."""
    out = {}
    for kv in filter(None, (s.strip() for s in spec.split(","))):
        key, sep, value = kv.partition("=")
        if not sep:
            raise click.BadParameter(f"{kv!r}: expected KEY=VALUE", param_hint="--env")
        key = key.strip().upper()
        key = key if key.startswith("FWHT_") else "FWHT_" + key
        if key[5:].lower() not in FIELDS:
            raise click.BadParameter(f"{key}: not a Tuning setting (FWHT_<FIELD> of "
                                     f"{', '.join(sorted(FIELDS))})", param_hint="--env")
        out[key] = value.strip()
    return out


def tuning_for(extra: dict) -> Tuning:
    """The Tuning of one run: the environment's FWHT_* settings overridden by ``extra``."""
    try:
        return Tuning.from_env({**os.environ, **extra})
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--env") from None


@click.command()
@click.option("--dtype", "dtypes", multiple=True, default=("fp32", "fp16"), show_default=True)
@click.option("--sizes", default="20,24,27,30", show_default=True, help="log2 sizes, comma-separated")
@click.option("--env", "--tuning", "envs", multiple=True, default=("",),
              help="KEY=VALUE[,KEY=VALUE] per run (FWHT_<FIELD> or field names of fwht_gpu.Tuning)")
@click.option("--variant", "only", multiple=True, help="variant names to keep (default: all)")
@click.option("--per-pass", is_flag=True, help="also time each pass alone")
@click.option("--json", "out_json", default=None, type=click.Path(dir_okay=False))
def main(dtypes, sizes, envs, only, per_pass, out_json) -> None:
    """Time every variant against Folklore under each run's settings."""
    runs = [(env, parse_env(env)) for env in envs]
    tunings = [tuning_for(extra) for _, extra in runs]    # every setting checked before timing
    if not gpu.available():
        raise click.UsageError(f"needs a GPU: {gpu.status()}")
    cp = gpu.cupy()
    log2 = [int(s) for s in sizes.split(",")]
    rows = []
    for i, ((env, extra), t) in enumerate(zip(runs, tunings)):
        click.echo(f"== {env or 'defaults'}")
        for row in fbench.bench_variants(cp, dtypes, log2, echo=click.echo, only=only or None,
                                         per_pass=per_pass, tuning=t):
            rows.append({**row, "run": i, "env": extra, "tuning": t.changes()})
    if out_json:
        settings = {"tuning": tuning_for({}), "dtypes": list(dtypes), "sizes": log2,
                    "runs": [extra for _, extra in runs], "only": list(only), "per_pass": per_pass}
        rec = provenance.record("fwht-variants", rows, settings, device="gpu")
        provenance.write(rec, out_json)
        click.echo(f"wrote {out_json} (results folder: benchmarks/results/"
                   f"{provenance.device_folder(rec)}/)")


if __name__ == "__main__":
    main()
