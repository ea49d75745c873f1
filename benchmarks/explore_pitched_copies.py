"""Pitched column-chunk copies (a C-ordered 16384 x 16384 FP64 A's columns, pinned) alone and beside
device-memory load (device-to-device copies, or a kernel reading a C-ordered chunk's columns like
the sketch does): one pitched DMA, the chunk's row blocks as 2 or 4 DMAs on as many streams, and
a zero-copy kernel that reads the pinned memory directly (session 25, issue 18;
results/h100/session25-pitched-copies-*). Writes $OUT/pitched-copies.json."""
import statistics, threading, time, os
import numpy as np, cupy as cp, cupyx
rt = cp.cuda.runtime
n = 16384
A = cupyx.empty_pinned((n, n), np.float64); A[...] = 1.5
dst = cp.empty(n * 4096, np.float64)
streams = [cp.cuda.Stream(non_blocking=True) for _ in range(4)]
busy = cp.cuda.Stream(non_blocking=True)
X = cp.ones(1 << 28, np.float64); Y = cp.empty_like(X)
fused_like = cp.RawKernel(r'''
extern "C" __global__ void strided(const double* a, double* out, long long rows, long long cols) {
  // each block reads one column of a C-ordered (rows x cols) array: stride cols (like a sketch of A's column)
  long long k = blockIdx.x % cols; double s = 0;
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) s += a[r * cols + k];
  if (s == 12345.0) out[k] = s;
}''', "strided")
Z = cp.ones((n, 4096), np.float64); Zo = cp.empty(4096, np.float64)
KS = r'''
extern "C" __global__ void zc(const double2* __restrict__ src, long long sp2, double2* __restrict__ dst,
                              long long w2, long long rows) {
  long long total = w2 * rows, stride = (long long)gridDim.x * blockDim.x * 4;
  for (long long i = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x; i < total; i += stride) {
    double2 v[4];
    #pragma unroll
    for (int u = 0; u < 4; u++) { long long j = i + (long long)u * blockDim.x;
      if (j < total) { long long r = j / w2, c = j - r * w2; v[u] = src[r * sp2 + c]; } }
    #pragma unroll
    for (int u = 0; u < 4; u++) { long long j = i + (long long)u * blockDim.x; if (j < total) dst[j] = v[u]; }
  }
}'''
zc = cp.RawKernel(KS, "zc")
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
def zcopy(w, g):
    with streams[0]:
        zc((sms * g,), (256,), (cp.uint64(A.ctypes.data + (n - w) * 8), cp.int64(n // 2), dst, cp.int64(w // 2), cp.int64(n)))
    streams[0].synchronize()
def gbs(fn, w, x, reps=5):
    """GB/s of fn(w, x) moving a chunk of w columns (median of reps after one warm-up)."""
    fn(w, x); ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(w, x); ts.append(time.perf_counter() - t)
    return n * w * 8 / statistics.median(ts) / 1e9
def copy(w, parts):
    rows = n // parts
    for p in range(parts):
        st = streams[p]
        rt.memcpy2DAsync(dst.data.ptr + p * rows * w * 8, w * 8, A.ctypes.data + (p * rows * n + n - w) * 8, n * 8,
                         w * 8, rows, rt.memcpyHostToDevice, st.ptr)
    for p in range(parts): streams[p].synchronize()
def bg(kind, stop):
    with busy:
        while not stop.is_set():
            for _ in range(10):
                if kind == "d2d": cp.copyto(Y, X)
                else: fused_like((4096 * 4,), (256,), (Z, Zo, cp.int64(n), cp.int64(4096)))
            busy.synchronize()
out = []
for kind in (None, "d2d", "strided reads"):
    stop = threading.Event(); th = None
    if kind:
        th = threading.Thread(target=bg, args=(kind, stop)); th.start(); time.sleep(0.2)
    for w in (4096, 2048, 1024):
        r = {f"dma x{p}": gbs(copy, w, p) for p in (1, 2, 4)}
        r.update({f"zero-copy {g}/SM": gbs(zcopy, w, g) for g in (1, 2, 4)})
        out.append(dict(bg=kind, cols=w, gbs=r))
        print(f"beside {kind}: {w * 8 >> 10} KiB rows: " + ", ".join(f"{p} {g:.1f} GB/s" for p, g in r.items()), flush=True)
    stop.set()
    if th: th.join()
from fwht_gpu import provenance  # noqa: E402
provenance.write(provenance.record("pitched-copies-explore", out, {"n": n, "widths_cols": [4096, 2048, 1024]}, device="gpu"),
                 os.path.join(os.environ.get("OUT", "."), "pitched-copies.json"))
