"""The numba kernels of :mod:`fwht_gpu.compiled` (module-level functions, so that numba's
on-disk cache finds them again in the next process; imported on first use).

Work arrays are float32 or float64.  ``mode`` is the per-operation rounding of a work
array: 0 none (the work dtype's own IEEE arithmetic), 1 / 2 every sum and difference
rounded to FP16 / BF16 (float32 work arrays of 16-bit data).  The butterflies go through
the SIMD intrinsics of :mod:`fwht_gpu._cpu_simd` where whole vectors take part, and through
scalar loops otherwise (rows shorter than a vector); both do the NumPy engine's operations
in its order per element, so every path gives the same bits.
"""
import numba
import numpy as np
from numba import types
from numba.extending import intrinsic, overload

from ._cpu_simd import (HARDWARE_HALF, LOW, VECTOR_BYTES, half_bits, half_value, low_run,
                        pair_run, quad_run)

#: Elements per parallel task of the row kernels (rows of up to this many go together).
TASK = 1 << 15


# --- per-operation rounding to a 16-bit storage dtype (FP16/BF16 plans computed in them) ----

@intrinsic
def _bits(typingctx, x):
    """The bit pattern of a float32 (a register bitcast: no memory, so no aliasing)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.uint32))
    return types.uint32(types.float32), codegen


@intrinsic
def _float(typingctx, x):
    """The float32 of a bit pattern (the inverse of :func:`_bits`)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return types.float32(types.uint32), codegen


@numba.njit(nogil=True, cache=True, inline="always")
def _round(v, mode):
    """float32 ``v`` rounded to FP16 (mode 1) or BF16 (mode 2), ties to even, as float32:
    the bits of NumPy's / ml_dtypes' round trip through the 16-bit format
    (:mod:`fwht_gpu.rounding` for FP16); a NaN stays a NaN of the same sign.  FP16 through
    the hardware's conversion where there is one (``HARDWARE_HALF``); mode 3: FP16 by
    integer operations always (the fallback, reachable for tests)."""
    bits = _bits(v)
    sign = bits & numba.uint32(0x80000000)
    mag = bits & numba.uint32(0x7FFFFFFF)
    if mode == 2:
        if mag > numba.uint32(0x7F800000):                  # NaN: quiet, top payload bits
            return _float((bits | numba.uint32(0x00400000)) & numba.uint32(0xFFFF0000))
        lsb = (bits >> numba.uint32(16)) & numba.uint32(1)
        return _float((bits + numba.uint32(0x7FFF) + lsb) & numba.uint32(0xFFFF0000))
    if mode == 1 and HARDWARE_HALF:
        return half_value(half_bits(v))
    # FP16, branch-free (selects, so that loops of it vectorize): normal values drop 13
    # bits; below 2^-14, adding and removing 0.5 rounds to a multiple of 2^-24 (float32's
    # spacing in [0.5, 1), ties to even); 65520 and up is infinity; NaN keeps 10 payload bits
    lsb = (mag >> numba.uint32(13)) & numba.uint32(1)
    r = (mag + numba.uint32(0xFFF) + lsb) & numba.uint32(0xFFFFE000)
    small = _bits((_float(mag) + numba.float32(0.5)) - numba.float32(0.5))
    r = small if mag < numba.uint32(0x38800000) else r
    r = numba.uint32(0x7F800000) if mag >= numba.uint32(0x477FF000) else r
    payload = mag & numba.uint32(0x007FE000)
    payload = numba.uint32(0x2000) if payload == 0 else payload
    r = (numba.uint32(0x7F800000) | payload) if mag > numba.uint32(0x7F800000) else r
    return _float(sign | r)


def _rround(v, mode):
    """``v`` rounded per ``mode`` (float32) or as it is (float64 work: mode is always 0)."""


@overload(_rround)
def _rround_impl(v, mode):
    if v == types.float32:
        def impl(v, mode):
            if mode == 0:
                return v
            return _round(v, mode)
        return impl
    return lambda v, mode: v


# --- 16-bit storage <-> float32 work values, float32 <-> float64 ----------------------------

@numba.njit(nogil=True, cache=True, inline="always")
def _half_value_int(v):
    """The float32 value of the FP16 bit pattern ``v`` by integer operations (normal
    numbers: the exponent rebiased by 112; subnormals: m 2^-24; no float32 subnormal on
    either path, they are slow on x86)."""
    h = numba.uint32(v)
    mag = h & numba.uint32(0x7FFF)
    r = (mag + numba.uint32(112 << 10)) << numba.uint32(13)
    r = _bits(numba.float32(mag) * numba.float32(2.0 ** -24)) if mag < numba.uint32(0x400) else r
    r = (numba.uint32(0x7F800000) | ((mag & numba.uint32(0x3FF)) << numba.uint32(13))) \
        if mag >= numba.uint32(0x7C00) else r
    return _float(r | ((h & numba.uint32(0x8000)) << numba.uint32(16)))


@numba.njit(nogil=True, cache=True, inline="always")
def _half_bits_int(v):
    """The FP16 bit pattern of the float32 ``v``, which must be an FP16 value (or inf/NaN),
    by integer operations."""
    b = _bits(v)
    mag = b & numba.uint32(0x7FFFFFFF)
    r = (mag - numba.uint32(112 << 23)) >> numba.uint32(13)
    r = numba.uint32(_float(mag) * numba.float32(2.0 ** 24)) if mag < numba.uint32(0x38800000) \
        else r
    r = (numba.uint32(0x7C00) | ((mag >> numba.uint32(13)) & numba.uint32(0x3FF))) \
        if mag >= numba.uint32(0x47800000) else r
    return numba.uint16(r | ((b >> numba.uint32(16)) & numba.uint32(0x8000)))


def _load(src, o, w, fmt):
    """w[:] := src[o:o + w.size] as work values: FP16 (fmt 1; fmt 3: by integer operations,
    the fallback where the hardware does not convert) / BF16 (fmt 2) bit patterns as
    float32, float32 as float64; returns whether they are all finite."""


@overload(_load)
def _load_impl(src, o, w, fmt):
    if src.dtype == types.uint16:
        def impl(src, o, w, fmt):
            ok = True
            src = src[o:o + w.size]             # indexed from 0: the loops vectorize
            if fmt == 2:
                for i in range(w.size):
                    a = _float(numba.uint32(src[i]) << numba.uint32(16))
                    w[i] = a
                    ok &= abs(a) < np.inf
            elif fmt == 1 and HARDWARE_HALF:
                for i in range(w.size):
                    a = half_value(src[i])
                    w[i] = a
                    ok &= abs(a) < np.inf
            else:
                for i in range(w.size):
                    a = _half_value_int(src[i])
                    w[i] = a
                    ok &= abs(a) < np.inf
            return ok
        return impl

    def impl(src, o, w, fmt):
        ok = True
        src = src[o:o + w.size]
        for i in range(w.size):
            a = src[i]
            w[i] = a
            ok &= abs(a) < np.inf
        return ok
    return impl


def _store(w, dst, o, fmt):
    """dst[o:o + w.size] := the work values w (representable in the storage format)."""


@overload(_store)
def _store_impl(w, dst, o, fmt):
    if dst.dtype == types.uint16:
        def impl(w, dst, o, fmt):
            dst = dst[o:o + w.size]             # indexed from 0: the loops vectorize
            if fmt == 2:
                for i in range(w.size):
                    dst[i] = numba.uint16(_bits(w[i]) >> numba.uint32(16))
            elif fmt == 1 and HARDWARE_HALF:
                for i in range(w.size):
                    dst[i] = half_bits(w[i])
            else:
                for i in range(w.size):
                    dst[i] = _half_bits_int(w[i])
        return impl

    def impl(w, dst, o, fmt):
        dst = dst[o:o + w.size]
        for i in range(w.size):
            dst[i] = w[i]
    return impl


def _to_storage(w, mode):
    """Round the work row ``w`` in place to the storage dtype where a pass writes back:
    FP16 / BF16 (mode 1 / 2, float32 work) or float32 (float64 work)."""


@overload(_to_storage)
def _to_storage_impl(w, mode):
    if w.dtype == types.float32:
        def impl(w, mode):
            for i in range(w.size):
                w[i] = _round(w[i], mode)
        return impl

    def impl(w, mode):
        for i in range(w.size):
            w[i] = numba.float64(numba.float32(w[i]))
    return impl


@numba.njit(nogil=True, cache=True, inline="always")
def _finite(w):
    """Whether every value of the work row ``w`` is finite (a branch-free AND that
    vectorizes)."""
    ok = True
    for i in range(w.size):
        ok &= abs(w[i]) < np.inf
    return ok


# --- butterflies -----------------------------------------------------------------------------

@numba.njit(nogil=True, cache=True, inline="always")
def _scalar_stage(x, base, n, bit, mode):
    """The butterflies (i, i + 2^bit) on n elements from base, one element at a time (rows
    shorter than a vector)."""
    h = 1 << bit
    for start in range(base, base + n, 2 * h):
        for i in range(start, start + h):
            a = x[i]
            b = x[i + h]
            x[i] = _rround(a + b, mode)
            x[i + h] = _rround(a - b, mode)


@numba.njit(nogil=True, cache=True, inline="always")
def _run(x, base, n, bits, s, e, mode):
    """Stages ``bits[s:e]`` (each 2^bit < n), in order, on the n elements of x from base:
    the lowest four in registers, then two at a time on whole vectors."""
    v = VECTOR_BYTES // x.itemsize            # elements of a pair/quad vector
    t = s
    if n >= LOW and t < e and bits[t] == 0:
        nb = 1
        while (1 << nb) < LOW and t + nb < e and bits[t + nb] == nb:
            nb += 1
        low_run(x, base, n, nb, mode)
        t += nb
    while t < e:
        h = 1 << bits[t]
        if h >= v and t + 1 < e and bits[t + 1] == bits[t] + 1:
            for start in range(base, base + n, 4 * h):
                quad_run(x, start, h, h, mode)
            t += 2
        elif h >= v:
            for start in range(base, base + n, 2 * h):
                pair_run(x, start, h, h, mode)
            t += 1
        else:
            _scalar_stage(x, base, n, bits[t], mode)
            t += 1


@numba.njit(nogil=True, cache=True, inline="always")
def _block_run(bits, s, block_bits):
    """The end of the run of stages from s whose bits are all below block_bits."""
    e = s
    while e < bits.size and bits[e] < block_bits:
        e += 1
    return e


@numba.njit(nogil=True, cache=True, inline="always")
def _row(x, o, n, bits, s, e, block_bits, mode):
    """Stages ``bits[s:e]`` on the row x[o:o + n] in the calling thread: runs of stages
    below ``block_bits`` on each block of 2^block_bits (it stays in the L1 cache), higher
    stages over the row."""
    block = 1 << block_bits
    while s < e:
        if bits[s] < block_bits:
            r = min(_block_run(bits, s, block_bits), e)
            for b0 in range(o, o + n, block):
                _run(x, b0, block, bits, s, r, mode)
            s = r
        else:
            r = s + 1
            while r < e and bits[r] >= block_bits:
                r += 1
            _run(x, o, n, bits, s, r, mode)
            s = r


@numba.njit(nogil=True, cache=True)
def serial(x, n, bits, block_bits):
    """The stages ``bits`` on each row of length n of the flat array x in the calling
    thread, row by row (a row of up to a few 2^14 elements stays in the L2 cache): the
    same butterflies in the same order per element as the NumPy engine, for callers that
    transform their own small buffers inside a parallel kernel."""
    for o in range(0, x.size, n):
        _row(x, o, n, bits, 0, bits.size, block_bits, 0)


# --- whole transforms --------------------------------------------------------------------------

@numba.njit(nogil=True, cache=True, parallel=True)
def rows_direct(src, dst, n, bits, block_bits, copy, fin):
    """FP32/FP64 rows transformed in their own dtype, one row per thread at a time: each
    row of ``src`` is copied into ``dst`` (unless ``copy`` is False: src is dst) and
    transformed there while it is in the cache.  ``fin[r]``: bit 0 the input row is finite,
    bit 1 the output row is."""
    nrows = src.size // n
    per = max(1, TASK // n)
    for c in numba.prange((nrows + per - 1) // per):
        for r in range(c * per, min(nrows, (c + 1) * per)):
            o = r * n
            w = dst[o:o + n]
            fi = _load(src, o, w, 0) if copy else _finite(w)
            _row(dst, o, n, bits, 0, bits.size, block_bits, 0)
            fin[r] = numba.uint8(fi) | (numba.uint8(_finite(w)) << numba.uint8(1))


@numba.njit(nogil=True, cache=True, parallel=True)
def rows_work(src, dst, proto, n, bits, ends, block_bits, op_mode, pass_mode, fmt, fin):
    """Rows through a work row of ``proto``'s dtype, one row per thread at a time: load
    (FP16 / BF16 bits as float32 for fmt 1 / 2, float32 as float64), the stages of each pass
    ``bits[ends[p - 1]:ends[p]]`` with every result rounded per ``op_mode``, the work row
    rounded to storage where each pass writes back (``pass_mode`` non-zero), store.
    ``fin`` as in :func:`rows_direct`."""
    nrows = src.size // n
    per = max(1, TASK // n)
    for c in numba.prange((nrows + per - 1) // per):
        w = np.empty(n, proto.dtype)
        for r in range(c * per, min(nrows, (c + 1) * per)):
            o = r * n
            fi = _load(src, o, w, fmt)
            s = 0
            for e in ends:
                _row(w, 0, n, bits, s, e, block_bits, op_mode)
                if pass_mode:
                    _to_storage(w, pass_mode)
                s = e
            fin[r] = numba.uint8(fi) | (numba.uint8(_finite(w)) << numba.uint8(1))
            _store(w, dst, o, fmt)


@numba.njit(nogil=True, cache=True, parallel=True)
def blocked(x, bits, s, e, block_bits, mode):
    """Stages ``bits[s:e]`` (all below block_bits) on every block of 2^block_bits of the flat
    work array x, blocks in parallel."""
    block = 1 << block_bits
    for k in numba.prange(x.size // block):
        _run(x, k * block, block, bits, s, e, mode)


@numba.njit(nogil=True, cache=True, parallel=True)
def wide(x, bit, two, mode):
    """One stage at ``bit`` >= log2(LOW) (two stages, bit and bit + 1, with ``two``) over
    the whole flat work array, in chunks of pairs (quads) in parallel."""
    h = 1 << bit
    span = 4 * h if two else 2 * h
    chunk = min(h, 1 << 11)
    per = h // chunk
    for q in numba.prange(x.size // span * per):
        start = q // per * span + q % per * chunk
        if two:
            quad_run(x, start, chunk, h, mode)
        else:
            pair_run(x, start, chunk, h, mode)


@numba.njit(nogil=True, cache=True, parallel=True)
def widen(src, w, fmt):
    """The flat storage array ``src`` into the flat work array ``w`` (see :func:`_load`)."""
    step = 1 << 14
    for k in numba.prange((src.size + step - 1) // step):
        _load(src, k * step, w[k * step:min(w.size, (k + 1) * step)], fmt)


@numba.njit(nogil=True, cache=True, parallel=True)
def narrow(w, dst, fmt):
    """The flat work array ``w`` (representable in storage) into ``dst`` (see _store)."""
    step = 1 << 14
    for k in numba.prange((w.size + step - 1) // step):
        _store(w[k * step:min(w.size, (k + 1) * step)], dst, k * step, fmt)


@numba.njit(nogil=True, cache=True, parallel=True)
def round_storage(f, mode):
    """Round the flat work array f in place to storage where a pass writes back: FP16 /
    BF16 (mode 1 / 2, float32) or float32 (float64 work)."""
    step = 1 << 14
    for k in numba.prange((f.size + step - 1) // step):
        _to_storage(f[k * step:min(f.size, (k + 1) * step)], mode)


@numba.njit(nogil=True, cache=True, parallel=True)
def row_finite(w, n, fin, shift):
    """``fin[r] |= finite(row r of the flat work array w) << shift``."""
    for r in numba.prange(w.size // n):
        fin[r] |= numba.uint8(_finite(w[r * n:(r + 1) * n])) << numba.uint8(shift)


@numba.njit(nogil=True, cache=True)
def k_stage(w, signs, mode, out, t0, t1):
    """The K-point stage of :func:`fwht_gpu.hadamard.k_stage` on (rows, K, M) work values,
    for the tasks (row, output block) t0 .. t1 - 1 (t = r K + i; serial: the caller's threads
    share the tasks, and a serial kernel compiles in seconds): in the groups of four blocks
    c0 .. c0 + 3 (values a, b, c, d; s_k = H[i, c0 + k] H[i, c0]), p = a + s_1 b, q = c +
    s_2 s_3 d, e = p + s_2 q; out = H[i, c0] e for the first group, then out + H[i, c0] e
    group after group; every sum an addition or a subtraction rounded per ``mode``."""
    K, M = w.shape[1], w.shape[2]
    for t in range(t0, t1):
        r, i = t // K, t % K
        for g in range(K // 4):
            c0 = 4 * g
            neg = signs[i, c0] < 0
            n1 = (signs[i, c0 + 1] < 0) != neg
            n2 = (signs[i, c0 + 2] < 0) != neg
            nq = ((signs[i, c0 + 3] < 0) != neg) != n2
            for j in range(M):
                a, b = w[r, c0, j], w[r, c0 + 1, j]
                c, d = w[r, c0 + 2, j], w[r, c0 + 3, j]
                p = _rround(a - b, mode) if n1 else _rround(a + b, mode)
                q = _rround(c - d, mode) if nq else _rround(c + d, mode)
                e = _rround(p - q, mode) if n2 else _rround(p + q, mode)
                if g == 0:
                    out[r, i, j] = -e if neg else e
                elif neg:
                    out[r, i, j] = _rround(out[r, i, j] - e, mode)
                else:
                    out[r, i, j] = _rround(out[r, i, j] + e, mode)
