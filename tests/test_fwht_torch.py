"""PyTorch: tensors given to fwht_gpu.fwht (DLPack, zero-copy, the caller's type back) and the
custom operator of fwht_gpu.torch (autograd with the adjoint, fake kernel, torch.compile).
Skipped where PyTorch is not installed; ``import fwht_gpu`` never imports it."""
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import scipy.linalg as sl

import fwht_gpu as F
from fwht_gpu import gpu

torch = pytest.importorskip("torch")
FT = pytest.importorskip("fwht_gpu.torch")

DTYPES = [(torch.float64, np.float64), (torch.float32, np.float32), (torch.float16, np.float16),
          (torch.bfloat16, ml_dtypes.bfloat16)]


def _np(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def test_importing_fwht_gpu_does_not_import_torch():
    code = "import sys, fwht_gpu, pagh_mm; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("tdt,ndt", DTYPES)
def test_tensors_through_dlpack_give_the_engine_bits(tdt, ndt):
    x = torch.randn(3, 5, 96, dtype=torch.float64).to(tdt)
    want = F.fwht(_np(x))
    got = F.fwht(x)
    assert isinstance(got, torch.Tensor) and got.dtype == tdt and got.shape == x.shape
    assert np.array_equal(_np(got).view(np.uint8), want.view(np.uint8))
    sub = x[:, 1:3, :64]                                   # a strided view, zero-copy in
    assert np.array_equal(_np(F.fwht(sub, axis=1)).view(np.uint8),
                          F.fwht(_np(sub), axis=1).view(np.uint8))
    out = torch.empty_like(x)
    assert F.ifwht(x, out=out) is out
    assert np.array_equal(_np(out).view(np.uint8), F.ifwht(_np(x)).view(np.uint8))
    t = F.FWHT(64, ndt)
    assert isinstance(t(x[..., :64], order="dyadic"), torch.Tensor)


def test_autograd_state_is_respected():
    """fwht_gpu.fwht records no autograd history: tensors that need it are refused, writes
    through out= bump the version counter (autograd notices), lazy negation is applied."""
    g = torch.randn(2, 16, requires_grad=True)
    with pytest.raises(TypeError, match="fwht_gpu.torch"):
        F.fwht(g)
    with torch.no_grad():
        assert torch.equal(F.fwht(g), FT.fwht(g.detach()))
    a = torch.randn(4, requires_grad=True)
    out = torch.ones(4)
    y = (a * out).sum()
    v = out._version
    F.fwht(torch.arange(4.0), out=out)
    assert out._version > v
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    with pytest.raises(TypeError, match="out requires grad"):
        F.fwht(torch.ones(4), out=torch.ones(4, requires_grad=True))
    w = torch.randn(8, dtype=torch.complex128).conj().imag       # a lazily negated view
    assert torch.equal(F.fwht(w), FT.fwht(w.clone()))
    x = torch.randn(3, 32)
    keep = x.clone()
    F.FWHT(32, np.float32)(x, overwrite_x=True)
    assert torch.equal(x, keep)                                   # never written through


def test_the_operator_matches_the_engine_and_the_definition():
    x = torch.randn(4, 20 * 8, dtype=torch.float64)
    for norm in ("backward", "ortho", "forward"):
        for fn, ref in ((FT.fwht, F.fwht), (FT.ifwht, F.ifwht)):
            assert np.array_equal(fn(x, norm=norm).numpy(), ref(x.numpy(), norm=norm))
    y = torch.randn(6, 32, 2, dtype=torch.float64)
    assert np.array_equal(FT.fwht(y, dim=1, order="sequency").numpy(),
                          F.fwht(y.numpy(), axis=1, order="sequency"))
    # fast-hadamard-transform's hadamard_transform: zero-padded to a power of two, truncated
    z = torch.randn(3, 100, dtype=torch.float64)
    H = torch.tensor(sl.hadamard(128), dtype=torch.float64)
    want = (torch.nn.functional.pad(z, (0, 28)) @ H.T * 0.25)[:, :100]
    assert torch.allclose(FT.hadamard_transform(z, scale=0.25), want)
    assert torch.equal(FT.hadamard_transform(z[:, :64], 1.0), FT.fwht(z[:, :64]))


@pytest.mark.parametrize("n,order", [(16, "natural"), (16, "sequency"), (32, "dyadic"),
                                     (12 * 4, "natural"), (20 * 2, "natural"), (28, "natural")])
def test_gradients_are_the_adjoint(n, order):
    x = torch.randn(3, n, dtype=torch.float64, requires_grad=True)
    for fn in (FT.fwht, FT.ifwht):
        for norm in ("backward", "ortho"):
            assert torch.autograd.gradcheck(lambda v: fn(v, norm=norm, order=order), (x,))
    # the Paley I matrices are not symmetric: the gradient of H x is H^T g, not H g
    if n == 48:
        g = torch.randn(3, n, dtype=torch.float64)
        y = FT.fwht(x)
        (gx,) = torch.autograd.grad(y, x, g)
        D = np.kron(F.hadamard.matrix(12).astype(float), sl.hadamard(4))
        assert np.allclose(gx.numpy(), g.numpy() @ D)
        assert not np.allclose(gx.numpy(), g.numpy() @ D.T)


def test_opcheck_and_torch_compile():
    op = torch.ops.fwht_gpu.transform.default
    for args in ((torch.randn(4, 24), 0.5, False, "natural"),
                 (torch.randn(2, 3, 16, dtype=torch.float64, requires_grad=True), 1.0, True,
                  "dyadic")):
        torch.library.opcheck(op, args)
    f = torch.compile(lambda v: FT.fwht(v * 2, dim=0, norm="ortho") + 1, fullgraph=True)
    v = torch.randn(64, 5)
    assert torch.equal(f(v), FT.fwht(v * 2, dim=0, norm="ortho") + 1)


def test_bad_arguments():
    with pytest.raises(TypeError, match="torch.Tensor"):
        FT.fwht(np.ones(8))
    with pytest.raises(TypeError, match="int64"):
        FT.fwht(torch.ones(8, dtype=torch.int64))
    with pytest.raises(ValueError, match="pad to 16"):
        FT.fwht(torch.ones(13))
    with pytest.raises(ValueError, match="dim=2"):
        FT.fwht(torch.ones(2, 8), dim=2)
    with pytest.raises(ValueError, match="natural order only"):
        FT.fwht(torch.ones(24), order="dyadic")
    with pytest.raises(TypeError, match="unsupported dtype"):
        F.fwht(torch.ones(8, dtype=torch.int32))


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available() or not torch.cuda.is_available(),
                    reason="needs CuPy, a GPU and a CUDA build of PyTorch")
def test_cuda_tensors_on_the_current_stream():
    cp = gpu.cupy()
    for tdt, _ in DTYPES:
        x = torch.randn(8, 1024, device="cuda").to(tdt)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            y = F.fwht(x)
            z = FT.fwht(x, norm="ortho")
        s.synchronize()
        assert y.is_cuda and y.dtype == tdt
        want = F.fwht(cp.from_dlpack(x.view(torch.int16)).view(ml_dtypes.bfloat16)
                      if tdt == torch.bfloat16 else cp.from_dlpack(x))
        got = cp.from_dlpack(y.view(torch.int16) if tdt == torch.bfloat16 else y)
        assert cp.array_equal(got.view(cp.uint8), want.view(cp.uint8))
        assert z.is_cuda
    g = torch.randn(2, 48, device="cuda", dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: FT.fwht(v, norm="ortho"), (g,))


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available() or not torch.cuda.is_available(),
                    reason="needs CuPy, a GPU and a CUDA build of PyTorch")
def test_results_in_pytorchs_allocator_and_cuda_graphs_under_errstate_ignore():
    """A CUDA tensor's result comes from PyTorch's caching allocator (not CuPy's pool), and
    under errstate(overflow="ignore") (no flag read, no synchronisation) the transform of a
    contiguous tensor is captured in a CUDA graph: replays give the eager bits, for
    power-of-two and K * 2**k lengths, the operator and the plain call."""
    cp = gpu.cupy()
    kept = []
    for n in (1024, 12 * 1024):
        x = torch.randn(64, n, device="cuda")
        F.fwht(x)
        pool = cp.get_default_memory_pool().used_bytes()
        before = torch.cuda.memory_allocated()
        kept.append(F.fwht(x))                               # (nothing freed meanwhile)
        assert torch.cuda.memory_allocated() - before >= x.numel() * 4
        assert cp.get_default_memory_pool().used_bytes() == pool
        with F.errstate(overflow="ignore"):
            static = x.clone()
            for fn in (F.fwht, lambda t: FT.fwht(t, norm="ortho")):
                fn(static)                                   # warm: plans, kernels, buffers
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = fn(static)
                for _ in range(2):
                    static.copy_(torch.randn_like(static))
                    graph.replay()
                    torch.cuda.synchronize()
                    assert torch.equal(out, fn(static))


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available() or not torch.cuda.is_available(),
                    reason="needs CuPy, a GPU and a CUDA build of PyTorch")
def test_torch_compile_reduce_overhead_under_errstate_ignore():
    """torch.compile(mode="reduce-overhead") (the compiler's CUDA graphs) around the operator,
    with errstate(overflow="ignore"): the graphs are not skipped, and the compiled function
    gives the eager bits, call after call on new inputs."""
    from torch._dynamo.utils import counters
    counters.clear()
    f = torch.compile(lambda v: FT.fwht(v * 2, norm="ortho") + 1, mode="reduce-overhead",
                      fullgraph=True)
    with F.errstate(overflow="ignore"):
        for n in (1024, 12 * 1024):
            for _ in range(4):
                v = torch.randn(32, n, device="cuda")
                want = FT.fwht(v * 2, norm="ortho") + 1
                assert torch.equal(f(v).clone(), want)
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
