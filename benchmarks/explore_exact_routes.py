"""How fast the exact routes' pieces can be (issue 16: is pagh-mm bench's baseline the
strongest?): the FP16 conversion, the GEMM through CuPy and torch (FP16, TF32, FP32), and the
selection of the largest by CuPy's argpartition and torch.topk, beside the bench's own routes.

    PYTHONPATH=. python3 benchmarks/explore_exact_routes.py OUT.json [M ...]

A dense 16384 x 16384 FP64 product, then a covariance screen of 2^20 x M FP32 samples for
each M given (e.g. 8192 16384).  Needs CuPy and torch.  Session 44: the bench's routes took
3-4x these pieces' sum (CuPy's argpartition sorts; a second timed run tiled the product
because the pool's cached blocks were not counted as free memory).
"""
import json
import sys
import time
import cupy as cp
import torch
from fwht_gpu import provenance
from pagh_mm import bench, backend

def wall(f, r=3):
    f(); cp.cuda.Device().synchronize()
    ts = []
    for _ in range(r):
        cp.cuda.Device().synchronize(); t0 = time.perf_counter(); f(); cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    return min(ts)

res = {}
be = backend.gpu()
def case(name, A, B, pool, gram):
    out = {}
    flops = 2 * A.shape[0] * A.shape[1] * B.shape[1]
    out['bench_fp16_topk'] = wall(lambda: bench._tiled_largest(be, A, B, pool, cp.float16, gram), 2)
    out['bench_screen'] = wall(lambda: bench._screen_topk(be, A, B, pool // 4, gram), 2)
    cp.get_default_memory_pool().free_all_blocks()
    if gram:
        B16 = B.astype(cp.float16); A16 = B16.T
        out['convert'] = wall(lambda: B.astype(cp.float16))
    else:
        A16 = A.astype(cp.float16); B16 = B.astype(cp.float16)
        out['convert'] = wall(lambda: (A.astype(cp.float16), B.astype(cp.float16)))
    cp.get_default_memory_pool().free_all_blocks()
    out['cupy_matmul_f16'] = wall(lambda: A16 @ B16)
    tB = torch.from_dlpack(B16); tA = tB.T if gram else torch.from_dlpack(A16)
    out['torch_matmul_f16'] = wall(lambda: tA @ tB)
    out['torch_matmul_f16_out32'] = wall(lambda: torch.matmul(tA, tB, out=None).float())
    if A.dtype == cp.float32:
        tB32 = torch.from_dlpack(B); tA32 = tB32.T if gram else torch.from_dlpack(A)
        torch.backends.cuda.matmul.allow_tf32 = True
        out['torch_matmul_tf32'] = wall(lambda: tA32 @ tB32)
        torch.backends.cuda.matmul.allow_tf32 = False
        out['torch_matmul_fp32'] = wall(lambda: tA32 @ tB32)
    C = A16 @ B16
    out['C_inf'] = int(cp.isinf(C).sum())
    out['cupy_abs_argpartition'] = wall(lambda: cp.argpartition(-cp.abs(C.ravel()), pool - 1)[:pool])
    tC = torch.from_dlpack(C)
    out['torch_topk'] = wall(lambda: torch.topk(tC.view(-1).abs(), pool))
    for k in ('cupy_matmul_f16', 'torch_matmul_f16'):
        out['tflops_' + k] = flops / out[k] / 1e12
    print(name, json.dumps(out), flush=True)
    res[name] = out
    cp.get_default_memory_pool().free_all_blocks()

rng = cp.random.default_rng(1)
n = 16384
A = rng.standard_normal((n, n)); B = rng.standard_normal((n, n))
case('dense16384_fp64', A, B, 1200, False)
del A, B; cp.get_default_memory_pool().free_all_blocks()
for M in [int(m) for m in sys.argv[2:]]:
    X = rng.standard_normal((1 << 20, M), dtype=cp.float32)
    case(f'gram_2^20x{M}_fp32', X.T, X, 400, True)
    del X; cp.get_default_memory_pool().free_all_blocks()
provenance.write(provenance.record("exact-routes", [dict(case=k, **v) for k, v in res.items()],
                                  {"repeats": "min of 3 after a warm-up (bench_*: min of 2)"},
                                  device="gpu"), sys.argv[1])
