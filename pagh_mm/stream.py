"""Compression on one or several GPUs of factors that stay where they are: host arrays,
memory-mapped ``.npy`` files and SciPy sparse matrices larger than a device's memory.

``pagh_mm.compress(A, B, devices=[0, 1])`` (this module's :func:`compress`) splits the inner
dimension into chunks of one power of two (:mod:`pagh_mm.chunks`), gives each device a
contiguous run of them, and streams the chunks to it. A reader thread per device copies chunk
i + 1 from the source into pinned host memory (several threads for one copy) and starts its
transfer on a copy stream, while chunk i is compressed on a compute stream. Before chunk i's
launches, the device's thread makes on a third stream the reads that decide its compression
(the finiteness check, the statistics, the routes and memory plan:
:func:`pagh_mm.chunks.chunk_prepare`): they wait for chunk i's copy and their own kernels, not
for chunk i - 1's compression nor for chunk i + 1's copy. The
launches that follow read nothing on the sparse pair route and on dense chunks of the fused
kernel (after each worker's first chunk), so there the compute stream's queue is not drained
between chunks and the GPU does not idle while the host prepares one (other routes still
read per block: the transforms' overflow checks, 16-bit sketches, sparse chunks with empty
inner indices). With SLOTS buffers the reader need not wait for chunk i - 1's compression
to end. Each device adds its chunks' sums in
the pairwise tree of :mod:`pagh_mm.reduction`; the devices' partial trees are then merged on
the first device in chunk order. So the sketch has the bits of
``pagh_mm.compress`` of the whole arrays on one GPU, and on the CPU, for the same seed, buckets
and repetitions, whatever the devices, their number and the chunk size.

Each factor is read once but in two cases: a first pass (the chunks' statistics) is made for
automatic buckets sized for a stated query (``k`` or ``threshold``), and a second sums pass
for sparse factors whose pairs, added where each chunk allowed them, the whole forbids
(values not all integers in some chunk while others added pairs, or sums that could reach
2**53: :func:`pagh_mm.chunks.compress`). ``devices`` may also name the host (``"cpu"``,
several for several threads): the same chunked flow without transfers.
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np

import fwht_gpu.gpu
from fwht_gpu import memory

from . import auto, certificate, chunks, exact, hashing, matmul
from . import backend as _be
from . import decode as _decode
from .compressed import CompressedProduct
from .reduction import PairwiseSum, _plus

#: Target bytes of one chunk of the factors (A's columns and B's rows of its inner indices).
CHUNK_BYTES = 1 << 30
#: The target for factors in page-locked memory (no staging copy; wider rows copy faster:
#: H100, n = 32768 FP64, 1.38x the transfer time with 1 GiB chunks, 1.19x with 4 GiB), at
#: most an eighth of the first device's free memory.
PINNED_CHUNK_BYTES = 4 << 30
#: Chunks per device at least, where the inner dimension allows (transfer overlaps compute).
CHUNKS_PER_DEVICE = 4
#: The workers of the latest call (their ``times``: where a run went; for benchmarks).
last_workers: list = []
#: Chunk buffers per worker (host and device): the reader fills one while the others wait for
#: their chunks' compression (H100s, sparse 2^20 x 64 on two: 3 took each worker's waits for
#: chunks from 0.03-0.05 s to 0.016 s).
SLOTS = 3
#: Halvings of each worker's last chunk in the sums pass of dense factors (:func:`_runs`'
#: ``tail``): the smaller last pieces shorten the compression after the last copy; each piece
#: costs a chunk's fixed work. Two H200s, n = 16384 FP64 pinned on one GPU, chunks of 4096:
#: 1.27x the transfer time with 0, 1.22x with 1, 1.13-1.23x with 2 (four runs); n = 32768 on
#: two GPUs 1.22x -> 1.12x. Not for sparse factors (2^22 x 64 on two GPUs: 1.82x one GPU
#: with 0, 1.63x with 2; 2^20 1.71x and 1.65x): their chunks' host work is the larger cost.
TAIL_SPLITS = 2
#: Threads of one host-to-pinned copy (a memory-mapped source reads from disk with them), each
#: copying a band of at least BAND_BYTES (two H100s, sparse 2^20 x 64: the 1-d ranges of the
#: sparse arrays in 16 bands each on both workers took 10% longer than in 8).
COPY_THREADS = min(16, os.cpu_count() or 1)
BAND_BYTES = 8 << 20


def check_devices(devices) -> list:
    """The devices as a list: GPU ordinals (an int n: GPUs 0 .. n - 1) or "cpu" entries. A
    device named twice runs two workers (one's transfers overlap the other's compute)."""
    if isinstance(devices, (bool, np.bool_)):
        raise TypeError(f"devices={devices!r}: pass GPU ordinals ([0, 1]), a count (2) or 'cpu'")
    if isinstance(devices, (int, np.integer)):
        if devices < 1:
            raise ValueError(f"devices={devices}: the number of GPUs must be at least 1")
        devices = list(range(int(devices)))
    elif isinstance(devices, str):
        devices = [devices]
    else:
        devices = list(devices)
    if not devices:
        raise ValueError("devices is empty: name at least one GPU ordinal or 'cpu'")
    cpu = [d for d in devices if isinstance(d, str)]
    if any(d != "cpu" for d in cpu):
        raise ValueError(f"devices={devices!r}: entries are GPU ordinals (0, 1, ...) or 'cpu'")
    if cpu and len(cpu) != len(devices):
        raise ValueError(f"devices={devices!r}: use GPUs or the host ('cpu'), not both")
    gpus = [d for d in devices if not isinstance(d, str)]
    if any(not isinstance(d, (int, np.integer)) or isinstance(d, (bool, np.bool_)) or d < 0
           for d in gpus):
        raise ValueError(f"devices={devices!r}: GPU ordinals are non-negative integers")
    if gpus:
        count = fwht_gpu.gpu.cupy().cuda.runtime.getDeviceCount()
        bad = [d for d in gpus if d >= count]
        if bad:
            raise ValueError(f"devices={devices!r}: GPU {bad[0]} does not exist (this machine "
                             f"has {count}: 0 .. {count - 1})")
        gpus = [int(d) for d in gpus]
        return gpus
    return devices


class _Source:
    """One factor held where it was given (host array, memory map, SciPy sparse, CuPy): its
    slab of the inner indices k0 .. k1 - 1 (``which`` 1: columns of A; 2: rows of B)."""

    def __init__(self, M, which: int):
        self.M, self.which = M, which
        self.sparse = _be.is_sparse(M)
        self.gpu = _be.on_gpu(M)
        self.dtype = np.dtype(M.dtype)
        #: the dtype a sparse factor's values go to the GPU in: cupyx holds bool, float32 and
        #: float64 values only, so integer counts go as float64 (the specification's
        #: conversion: every value becomes float64 before it is sketched) and float16 as float32
        self.values_dtype = self.dtype if not self.sparse or self.dtype.kind == "b" or \
            self.dtype in (np.float32, np.float64) else \
            np.dtype(np.float32 if self.dtype == np.float16 else np.float64)
        self.other = M.shape[0] if which == 1 else M.shape[1]   # the axis kept whole
        self.pinned = False                 # page-locked host memory: copied without staging

    def check_pinned(self) -> None:
        """Whether a host array lives in page-locked memory (``cupyx.empty_pinned``, or
        registered with ``cupy.cuda.runtime.hostRegister``): its slabs then go to the device
        by DMA, without the copy into a staging buffer."""
        if self.sparse or self.gpu or not isinstance(self.M, np.ndarray) or self.M.size == 0:
            return
        rt = fwht_gpu.gpu.cupy().cuda.runtime
        try:
            self.pinned = rt.pointerGetAttributes(self.M.ctypes.data).type == 1  # host, locked
        except Exception:                   # pageable memory on older drivers raises
            self.pinned = False

    def slab(self, k0: int, k1: int):
        return self.M[:, k0:k1] if self.which == 1 else self.M[k0:k1, :]

    def shape(self, k0: int, k1: int) -> tuple:
        return (self.other, k1 - k0) if self.which == 1 else (k1 - k0, self.other)

    def nbytes(self, k0: int, k1: int) -> int:
        if not self.sparse:
            return self.other * (k1 - k0) * self.dtype.itemsize
        ptr = self.M.indptr
        nnz = int(ptr[k1]) - int(ptr[k0])
        return nnz * (self.dtype.itemsize + self.M.indices.dtype.itemsize) + \
            (k1 - k0 + 1) * ptr.dtype.itemsize

    def staged(self, c: int) -> list:
        """[(dtype, length)] of the host buffers that hold one chunk of c inner indices on
        its way to a device: the dense slab, or the three arrays' ranges of a SciPy sparse
        factor (at most the largest chunk's non-zeros); [] for factors on a GPU."""
        if self.gpu:
            return []
        n = self.M.shape[1] if self.which == 1 else self.M.shape[0]
        c = min(c, n)                           # (a chunk larger than the inner dimension)
        if not self.sparse:
            return [(self.dtype, math.prod(self.shape(0, c)))]
        ptr = np.asarray(self.M.indptr)
        k0 = np.arange(0, n, max(c, 1))
        nnz = int((ptr[np.minimum(k0 + c, n)] - ptr[k0]).max()) if n else 0
        idx = self.M.indices.dtype
        return [(self.values_dtype, nnz), (idx, nnz), (idx, c + 1)]

    def per_index(self) -> float:
        """Mean bytes of one inner index."""
        n = self.M.shape[1] if self.which == 1 else self.M.shape[0]
        return self.nbytes(0, n) / max(n, 1)


def chunk_size(sources, n: int, workers: int, chunk, target: int = CHUNK_BYTES) -> int:
    """The inner chunk: ``chunk`` (a power of two) or the largest power of two whose slabs
    stay within ``target`` bytes, at most n / (CHUNKS_PER_DEVICE workers)."""
    if chunk is not None:
        if isinstance(chunk, (bool, np.bool_)) or not isinstance(chunk, (int, np.integer)) or \
                chunk < 1 or chunk & (chunk - 1):
            raise ValueError(f"chunk={chunk!r} must be a power of two >= 1 (inner indices per "
                             "chunk), or None for automatic")
        return int(chunk)
    per = max(1.0, sum(s.per_index() for s in sources))
    c = 1 << max(0, int(target // per).bit_length() - 1)
    most = max(1, n // (CHUNKS_PER_DEVICE * workers))
    return max(1, min(c, 1 << (most.bit_length() - 1)))


def _move(x, device):
    """``x`` (a CuPy array, or anything else: unchanged) on GPU ``device``."""
    if device is None or getattr(x, "device", None) is None or not hasattr(x, "data") or \
            not hasattr(x.data, "ptr") or x.device.id == device:
        return x
    cp = fwht_gpu.gpu.cupy()
    with cp.cuda.Device(x.device.id):
        x = cp.ascontiguousarray(x)
        x.device.synchronize()
    with cp.cuda.Device(device):
        out = cp.empty(x.shape, dtype=x.dtype)
        # CuPy enables peer access between the two GPUs first (once), so the copy is direct
        # (NVLink or PCIe; through host memory it took 4.5 ms for a 168 MB partial table on two
        # H100s, 0.7 ms direct); waited for here: the caller's streams are not ordered after it
        stream = cp.cuda.get_current_stream()
        out.data.copy_from_device_async(x.data, x.nbytes, stream)
        stream.synchronize()
    return out


def _move_all(value, device):
    if isinstance(value, tuple):
        return tuple(_move_all(v, device) for v in value)
    return _move(value, device)


def _copy_into(dst, src, pool) -> None:
    """dst[...] = src, by bands of rows (of columns where dst is F-ordered) on the pool's
    threads (NumPy releases the GIL)."""
    if dst.ndim == 2 and dst.flags.f_contiguous and not dst.flags.c_contiguous:
        dst, src = dst.T, src.T
    rows = dst.shape[0]
    bands = max(1, min(COPY_THREADS, dst.nbytes // BAND_BYTES))
    step = max(1, -(-rows // bands))
    list(pool.map(lambda r0: np.copyto(dst[r0:r0 + step], src[r0:r0 + step]),
                  range(0, rows, step)))


def _sparse_slab(csp, src: "_Source", k0: int, k1: int, host, dev, stream, pool):
    """The inner indices k0 .. k1 - 1 of the source's canonical SciPy CSC (A) or CSR (B)
    matrix on the current GPU: ranges of its three arrays (canonical too), copied by the
    pool's threads into the page-locked buffers ``host`` (data, indices, indptr), then by
    DMA on ``stream`` into the device buffers ``dev``."""
    rt = fwht_gpu.gpu.cupy().cuda.runtime
    M = src.M
    lo, hi = int(M.indptr[k0]), int(M.indptr[k1])
    nnz, rows = hi - lo, k1 - k0 + 1
    _copy_into(host[0][:nnz], M.data[lo:hi], pool)
    _copy_into(host[1][:nnz], M.indices[lo:hi], pool)
    np.subtract(M.indptr[k0:k1 + 1], lo, out=host[2][:rows], casting="unsafe")
    for h, d, count in zip(host, dev, (nnz, nnz, rows)):
        if count:
            rt.memcpyAsync(d.data.ptr, h.ctypes.data, count * h.itemsize,
                           rt.memcpyHostToDevice, stream.ptr)
    cls = csp.csc_matrix if src.which == 1 else csp.csr_matrix
    parts = (dev[0][:nnz], dev[1][:nnz], dev[2][:rows])
    try:                                    # no checks of the contents: no synchronisation
        return cls._from_parts(*parts, src.shape(k0, k1), has_canonical_format=True,
                               has_sorted_indices=True)
    except (AttributeError, TypeError):     # (a private constructor: older CuPy lack it)
        pass
    out = cls(parts, shape=src.shape(k0, k1))
    out._has_canonical_format = True        # a range of a canonical matrix: skip the checks
    out._has_sorted_indices = True
    return out


def _staging_order(slab) -> str:
    """The layout of a dense slab's page-locked copy: the slab's own, so the host copies
    runs of contiguous memory ("F" where its columns are contiguous: an F-ordered A's chunk of
    columns, an F-ordered B's pitched chunk of rows; copied into a C-ordered buffer they were
    transposed, 9 GB/s against 36 with 16 threads, session 38)."""
    return "F" if slab.ndim == 2 and min(slab.shape) > 1 and \
        abs(slab.strides[0]) < abs(slab.strides[1]) else "C"


def _dma(buf, slab, stream):
    """Start copying the host array ``slab`` (page-locked memory) into the flat device buffer
    ``buf`` on ``stream``; returns the device view with ``slab``'s shape, or None when its
    layout takes more than one 2-d copy (then it is staged)."""
    cp = fwht_gpu.gpu.cupy()
    rt = cp.cuda.runtime
    it, (rows, cols) = slab.itemsize, slab.shape
    n = rows * cols
    dst = buf[:n]
    if slab.flags.c_contiguous or slab.flags.f_contiguous:
        rt.memcpyAsync(dst.data.ptr, slab.ctypes.data, n * it, rt.memcpyHostToDevice, stream.ptr)
        return dst.reshape(slab.shape, order="C" if slab.flags.c_contiguous else "F")
    if slab.strides[1] == it and slab.strides[0] >= cols * it:     # rows contiguous, pitched
        rt.memcpy2DAsync(dst.data.ptr, cols * it, slab.ctypes.data, slab.strides[0], cols * it,
                         rows, rt.memcpyHostToDevice, stream.ptr)
        return dst.reshape(rows, cols)
    if slab.strides[0] == it and slab.strides[1] >= rows * it:     # columns contiguous, pitched
        rt.memcpy2DAsync(dst.data.ptr, rows * it, slab.ctypes.data, slab.strides[1], rows * it,
                         cols, rt.memcpyHostToDevice, stream.ptr)
        return dst.reshape(cols, rows).T
    return None


class _Worker:
    """One device's run of chunks (GPU ordinal, or None for the host)."""

    def __init__(self, device, sources, c: int, n: int):
        self.device, self.sources, self.c, self.n = device, sources, c, n
        #: seconds spent waiting for chunks, compressing them (from the wait's end, without
        #: the prepare), copying pageable slabs into pinned buffers (the reader thread) and
        #: preparing the chunks' work (:func:`pagh_mm.chunks.chunk_prepare`, on its own
        #: stream, including its wait for the chunk's copy): where a run went
        self.times = {"wait": 0.0, "compute": 0.0, "host_copy": 0.0, "prepare": 0.0}
        #: per chunk of a GPU run, over the passes of the latest call: (first inner index,
        #: seconds waited for it, seconds from then until its compression was queued)
        self.chunks: list[tuple] = []

    def staging_bytes(self) -> int:
        """Bytes of this worker's SLOTS chunk buffers of its host factors on its device (and as
        many of pinned host memory, for those not page-locked already)."""
        return SLOTS * sum(np.dtype(dt).itemsize * size for s in self.sources
                       for dt, size in s.staged(self.c))

    def run(self, fn, spans, each, report, prepare=None) -> None:
        """each(span, fn(*slabs of the span's chunk)) for the chunks' spans (first inner index,
        end, tree node size: :func:`_runs`), in order; with ``prepare``,
        each(span, fn(prepare(*slabs))), prepare made on a GPU on its own stream once the chunk's
        copy is queued (its reads of the device wait for that copy, not for the compute stream's
        work nor for the next chunk's copy), fn on the compute stream."""
        if self.device is None:
            for span in spans:
                k0, k1, _ = span
                slabs = [s.slab(k0, k1) for s in self.sources]
                each(span, fn(*slabs) if prepare is None else fn(prepare(*slabs)))
                report(sum(s.nbytes(k0, k1) for s in self.sources))
            return
        self._run_gpu(fn, spans, each, report, prepare)

    def _run_gpu(self, fn, spans, each, report, prepare) -> None:
        cp = fwht_gpu.gpu.cupy()
        import cupyx
        import cupyx.scipy.sparse as csp
        dev = self.device
        with cp.cuda.Device(dev):
            copy = cp.cuda.Stream(non_blocking=True)
            ahead_stream = cp.cuda.Stream(non_blocking=True)     # prepare's work and reads
            compute = cp.cuda.Stream(non_blocking=True)
            dense = [i for i, s in enumerate(self.sources) if not s.sparse and not s.gpu]
            staged = {i: s.staged(self.c) for i, s in enumerate(self.sources) if not s.gpu}
            pinned = {}

            def staging(i, slot):               # page-locked slots, made on first need (none
                if i not in pinned:             # for page-locked slabs that go by DMA)
                    pinned[i] = [[cupyx.empty_pinned(size, dt) for dt, size in staged[i]]
                                 for _ in range(SLOTS)]
                return pinned[i][slot]
            buffers = {i: [[cp.empty(size, dtype=dt) for dt, size in parts]
                           for _ in range(SLOTS)] for i, parts in staged.items()}
            free = [None] * SLOTS
            # what a slot's chunk made on the copy and prepare streams (copied slabs, prepare's
            # arrays), kept until that chunk's compression is done: freed earlier, the memory
            # pool would give their memory to those streams' next allocations while the compute
            # stream reads them
            held = [None] * SLOTS
            copier = ThreadPoolExecutor(COPY_THREADS)
            def load(j):
                slot = j % SLOTS
                k0, k1, _ = spans[j]
                if free[slot] is not None:
                    free[slot].synchronize()          # the slot's last chunk is compressed
                held[slot] = None
                out = []
                with cp.cuda.Device(dev), copy:
                    for i, s in enumerate(self.sources):
                        slab = s.slab(k0, k1) if not s.sparse or s.gpu else None
                        if i in dense:
                            buf = buffers[i][slot][0]
                            view = _dma(buf, slab, copy) if s.pinned else None
                            if view is None:          # staged: a parallel copy, then DMA
                                host = staging(i, slot)[0][:math.prod(slab.shape)].reshape(
                                    slab.shape, order=_staging_order(slab))
                                t0 = time.perf_counter()
                                _copy_into(host, slab, copier)
                                self.times["host_copy"] += time.perf_counter() - t0
                                view = _dma(buf, host, copy)
                            out.append(view)
                        elif s.gpu and not s.sparse:  # on a GPU already: this one, or copied
                            out.append(_move(slab, dev))
                        elif s.gpu and slab.data.device.id == dev:
                            out.append(slab)
                        elif s.gpu:                   # another GPU's sparse slab: via the host
                            out.append((csp.csc_matrix if s.which == 1 else
                                        csp.csr_matrix)(slab.get()))
                        else:                         # SciPy sparse: its arrays' ranges
                            t0 = time.perf_counter()
                            out.append(_sparse_slab(csp, s, k0, k1, staging(i, slot),
                                                    buffers[i][slot], copy, copier))
                            self.times["host_copy"] += time.perf_counter() - t0
                    held[slot] = out              # (slabs copied from another GPU too)
                    ready = copy.record()
                return out, ready, sum(s.nbytes(k0, k1) for s in self.sources)

            try:
                with ThreadPoolExecutor(1) as reader:
                    ahead = reader.submit(load, 0) if spans else None
                    for j, span in enumerate(spans):
                        k0 = span[0]
                        t0 = time.perf_counter()
                        slabs, ready, nbytes = ahead.result()
                        waited = time.perf_counter() - t0
                        self.times["wait"] += waited
                        if j + 1 < len(spans):        # the next copy queues at once
                            ahead = reader.submit(load, j + 1)
                        made = 0.0
                        if prepare is not None:       # its reads wait for this chunk's copy
                            t1 = time.perf_counter()  # and its own kernels only
                            with ahead_stream:
                                ahead_stream.wait_event(ready)
                                slabs = [prepare(*slabs)]
                                held[j % SLOTS] = [held[j % SLOTS], slabs]
                                ready = ahead_stream.record()
                            made = time.perf_counter() - t1
                            self.times["prepare"] += made
                        with compute:                 # (each() adds on this stream too)
                            compute.wait_event(ready)
                            result = fn(*slabs)
                            del slabs
                            each(span, result)
                            free[j % SLOTS] = compute.record()
                        took = time.perf_counter() - t0 - waited - made
                        self.times["compute"] += took
                        self.chunks.append((k0, round(waited, 4), round(took + made, 4)))
                        report(nbytes)
                    compute.synchronize()
            finally:
                copier.shutdown()
                for st in (copy, ahead_stream, compute):   # (after an error: nothing queued
                    try:                                   # outlives the buffers it uses)
                        st.synchronize()
                    except Exception:
                        pass


def _workers_for(devices, sources, c: int, n: int):
    return [_Worker(None if d == "cpu" else d, sources, c, n) for d in devices]


def _runs(n: int, c: int, count: int, tail: int | None = None):
    """The chunks of each of ``count`` workers, contiguous runs as equal as can be: spans
    (first inner index, end, size of its node in the summation tree: ``c``, more than the span
    for the last chunk of a partial end). ``tail`` (default :data:`TAIL_SPLITS`): a run's
    last whole chunk goes as aligned pieces of c/2, c/4, ..., c/2**tail, c/2**tail (nodes of
    the same tree, so the same bits), so that less compression follows the run's last copy."""
    tail = TAIL_SPLITS if tail is None else tail
    starts = list(range(0, n, c))
    g = len(starts)
    runs = []
    for w in range(count):
        run = [(k0, min(n, k0 + c), c) for k0 in starts[w * g // count:(w + 1) * g // count]]
        if run and tail and run[-1][1] - run[-1][0] == c and c >> tail:
            k0 = run.pop()[0]
            sizes = [c >> i for i in range(1, tail + 1)] + [c >> tail]
            for size in sizes:
                run.append((k0, k0 + size, size))
                k0 += size
        runs.append(run)
    return runs


def _together(workers, runs, task) -> None:
    """task(worker, run) on a thread per worker (the first error raised here)."""
    if len(workers) == 1:
        task(workers[0], runs[0])
        return
    with ThreadPoolExecutor(len(workers)) as pool:
        for f in [pool.submit(task, w, r) for w, r in zip(workers, runs)]:
            f.result()


def compress(A, B, *, devices, chunk: int | None = None, buckets: int | str = auto.AUTO,
             reps: int | str = auto.AUTO, seed: int | None = None, k: int | None = None,
             threshold: float | None = None,
             failure_probability: float = certificate.DEFAULT_FAILURE_PROBABILITY,
             method: str = "fwht", dtype=None, algorithm: str = "folklore",
             stabilizer: str | None = None, hash: str | None = None, gram: bool | None = None,
             check_finite: bool = True, memory_budget: int | None = None,
             decode: bool | str = "auto", progress=None) -> CompressedProduct:
    """:func:`pagh_mm.compress` of A (m x n) and B (n x p) on ``devices``, the factors
    streamed a chunk of inner indices at a time (see the module docstring).

    ``devices``: GPU ordinals ([0, 1]), a number of GPUs (2: GPUs 0 and 1), or "cpu" (a list
    of several: that many host threads). A and B: NumPy arrays (memory maps included: they are
    read a chunk at a time), SciPy sparse matrices, or CuPy arrays. ``chunk``: inner indices
    per chunk, a power of two (None: slabs of about CHUNK_BYTES, at least CHUNKS_PER_DEVICE
    chunks per device). ``memory_budget``: per chunk's compression. ``progress(stage, done,
    total)``: stage "bytes", the bytes of the factors read so far. The other options are
    :func:`pagh_mm.compress`'s; the sketch lives on the first device and verifies candidates
    from the factors where they are."""
    devices = check_devices(devices)
    gram = matmul._detect_gram(A, B, gram, method, hash)
    if hash is None:
        hash = "polynomial" if gram else hashing.DEFAULT_FAMILY
    A, B, _, dt, _, reps, memory_budget = matmul._validate(
        A, B, buckets, reps, method, dtype, algorithm, stabilizer, hash, False, memory_budget)
    seed = hashing.check_seed(seed)
    matmul._check_query_hint(k, threshold, failure_probability)
    decode = _decode.check(decode)
    n = A.shape[1]
    sources = [_Source(B, 2)] if gram else [_Source(A, 1), _Source(B, 2)]
    gpus = devices[0] != "cpu"
    if not gpus and any(s.gpu for s in sources):
        raise ValueError("devices='cpu' compresses host arrays, and A and B are on a GPU: pass "
                         "GPU ordinals (devices=[0]) or the host copies (A.get(), B.get())")
    target = CHUNK_BYTES
    if gpus:
        for s in sources:
            s.check_pinned()
        staged = [s for s in sources if not s.sparse and not s.gpu]
        if staged and all(s.pinned for s in staged):
            with fwht_gpu.gpu.cupy().cuda.Device(devices[0]):
                free = memory.available("gpu") or 0
            target = max(CHUNK_BYTES, min(PINNED_CHUNK_BYTES, free // 8))
    c = chunk_size(sources, n, len(devices), chunk, target)
    workers = _workers_for(devices, sources, c, n)
    # the last chunk in pieces for dense factors only: a sparse chunk's fixed host work costs
    # more than the compression the pieces move ahead of the last copy
    runs = _runs(n, c, len(workers), tail=None if not any(s.sparse for s in sources) else 0)
    global last_workers
    last_workers = workers
    home = workers[0].device
    if gpus:
        memory.check(sum(w.staging_bytes() for w in workers),
                     f"pinned buffers for chunks of {c} inner indices on {len(workers)} GPU(s)",
                     "pass a smaller chunk", device="cpu")
        cp = fwht_gpu.gpu.cupy()
        with cp.cuda.Device(home):
            be = _be.gpu()
    else:
        be = _be.cpu()
    total_bytes = sum(s.nbytes(0, n) for s in sources)
    lock = threading.Lock()
    done = [0]

    def report(nbytes):
        with lock:
            done[0] += nbytes
            if progress:
                progress("bytes", done[0], total_bytes)

    def begin():
        done[0] = 0
        if progress:
            progress("bytes", 0, total_bytes)

    def gram_fn(fn):                    # a Gram chunk is X's rows: fn(x, None)
        return (lambda x: fn(x, None)) if gram else fn

    def stats(fn):
        begin()
        out = {}

        def task(worker, run):
            _check_room(worker, 0)
            worker.run(gram_fn(fn), run,
                       lambda span, r: out.__setitem__(span[0], _move_all(r, home)), report)
        _together(workers, _runs(n, c, len(workers), tail=0), task)   # (the shares are summed
        return [out[k0] for k0 in sorted(out)]                       # chunk by chunk: whole ones)

    def sums(plan, pairs):
        begin()
        node = plan.every * (1 << plan.log2b) * 8
        parts = [None] * len(workers)
        seen = {}                       # chunk start: its statistics (plan.stats)

        def task(worker, run):
            levels = max(1, len(run)).bit_length() + 1
            _check_room(worker, levels * node + node)
            start = run[0][0] if run else 0
            tot, diag = PairwiseSum(be.xp, c, start), PairwiseSum(be.xp, c, start)
            direct = [None]
            cache: dict = {}

            def each(span, r):
                k0, _, size = span
                t, d, g, s = r
                seen[k0] = s
                tot.add_node(k0, t, size)
                diag.add_node(k0, g, size)
                if d is not direct[0]:          # (a chunk may add into the worker's table)
                    direct[0] = _plus(direct[0], d)
            worker.run(partial(chunks.chunk_launch, plan=plan, pairs=pairs, cache=cache), run,
                       each, report,
                       gram_fn(partial(chunks.chunk_prepare, plan=plan, pairs=pairs, cache=cache)))
            if run:
                tot.skip_to(min(n, run[-1][0] + run[-1][2]))
                diag.skip_to(min(n, run[-1][0] + run[-1][2]))
            parts[workers.index(worker)] = (tot, diag, direct[0])

        _together(workers, runs, task)
        parts = [p for p, r in zip(parts, runs) if r]
        if not parts:
            return None, None, None, None
        stats = [x for k0 in sorted(seen) for x in seen[k0]] if plan.stats else None
        ctx = fwht_gpu.gpu.cupy().cuda.Device(home) if gpus else contextlib.nullcontext()
        with ctx:
            tot, diag, direct = parts[0]
            for t, g, d in parts[1:]:
                tot.merge(t, partial(_move, device=home))
                diag.merge(g, partial(_move, device=home))
                direct = _plus(direct, _move(d, home))
            return tot.total(), direct, diag.total(), stats

    ctx = fwht_gpu.gpu.cupy().cuda.Device(home) if gpus else contextlib.nullcontext()
    with ctx:
        sk = chunks.compress(
            A, B, be, sparse=all(s.sparse for s in sources), gram=gram, buckets=buckets,
            reps=reps, seed=seed, k=k, threshold=threshold,
            failure_probability=failure_probability, method=method, dt=dt,
            algorithm=algorithm, stabilizer=stabilizer, hash=hash, check_finite=check_finite,
            memory_budget=memory_budget, decode=decode, stats=stats, sums=sums,
            exact_of=lambda r, cc: exact.exact_pair(be, A, B, r, cc), dtype=dtype)
    sk.recompress = partial(compress, devices=devices, chunk=chunk, memory_budget=memory_budget)
    return sk


def _check_room(worker, extra: int) -> None:
    """Check that a GPU worker's chunk buffers and ``extra`` bytes (its partial tree) fit."""
    if worker.device is None:
        return
    cp = fwht_gpu.gpu.cupy()
    with cp.cuda.Device(worker.device):
        memory.check(worker.staging_bytes() + extra,
                     f"chunks of {worker.c} inner indices and the partial sums on GPU "
                     f"{worker.device}", "pass a smaller chunk, or lower buckets or reps",
                     device="gpu")

