"""The numba kernels of :mod:`fwht_gpu.compiled` (module-level functions, so that numba's
on-disk cache finds them again in the next process; imported on first use)."""
import numba
from numba.core import types
from numba.extending import intrinsic


@numba.njit(nogil=True, cache=True, inline="always")
def _pairs(lo, hi):
    """Butterflies (lo[i], hi[i]) -> (lo[i] + hi[i], lo[i] - hi[i]) on two equal slices.
    Slices indexed from 0: numba then drops the negative-index wrap-around and LLVM
    vectorizes the loop (5-6x faster than indexing the array itself)."""
    for i in range(lo.size):
        a = lo[i]
        b = hi[i]
        lo[i] = a + b
        hi[i] = a - b


@numba.njit(nogil=True, cache=True, inline="always")
def _quads(q0, q1, q2, q3):
    """Two stages on four equal slices (bit h then 2h: q0/q1, q2/q3, then q0/q2, q1/q3),
    four values in registers: the same butterflies in the same order as two _pairs rounds."""
    for i in range(q0.size):
        a, b, c, d = q0[i], q1[i], q2[i], q3[i]
        a, b = a + b, a - b
        c, d = c + d, c - d
        q0[i], q2[i] = a + c, a - c
        q1[i], q3[i] = b + d, b - d


@numba.njit(nogil=True, cache=True, inline="always")
def _stage(x, base, n, bit):
    """The butterflies (i, i + 2^bit) on n elements from base (slices: see _pairs)."""
    h = 1 << bit
    for start in range(base, base + n, 2 * h):
        _pairs(x[start:start + h], x[start + h:start + 2 * h])


@numba.njit(nogil=True, cache=True, inline="always")
def _first3(x, base, n):
    """Stages at bits 0, 1, 2 (in that order) on n elements from base, eight values in
    registers at a time: the same butterflies in the same order as three _stage calls."""
    for g in range(base, base + n, 8):
        x0, x1, x2, x3 = x[g], x[g + 1], x[g + 2], x[g + 3]
        x4, x5, x6, x7 = x[g + 4], x[g + 5], x[g + 6], x[g + 7]
        x0, x1 = x0 + x1, x0 - x1
        x2, x3 = x2 + x3, x2 - x3
        x4, x5 = x4 + x5, x4 - x5
        x6, x7 = x6 + x7, x6 - x7
        x0, x2 = x0 + x2, x0 - x2
        x1, x3 = x1 + x3, x1 - x3
        x4, x6 = x4 + x6, x4 - x6
        x5, x7 = x5 + x7, x5 - x7
        x[g], x[g + 4] = x0 + x4, x0 - x4
        x[g + 1], x[g + 5] = x1 + x5, x1 - x5
        x[g + 2], x[g + 6] = x2 + x6, x2 - x6
        x[g + 3], x[g + 7] = x3 + x7, x3 - x7


@numba.njit(nogil=True, cache=True, inline="always")
def _stage2(x, base, n, bit):
    """Stages at ``bit`` then ``bit + 1``, four values in registers (the same butterflies
    in the same order as two _stage calls)."""
    h = 1 << bit
    for start in range(base, base + n, 4 * h):
        _quads(x[start:start + h], x[start + h:start + 2 * h],
               x[start + 2 * h:start + 3 * h], x[start + 3 * h:start + 4 * h])


@numba.njit(nogil=True, cache=True, parallel=True)
def blocked(x, bits, block):
    """Stages ``bits`` (all < log2(block)) on every ``block`` of the flat array x."""
    nblocks = x.size // block
    first3 = bits.size >= 3 and block >= 8 and bits[0] == 0 and bits[1] == 1 and bits[2] == 2
    for k in numba.prange(nblocks):
        s0 = 0
        if first3:
            _first3(x, k * block, block)
            s0 = 3
        s = s0
        while s < bits.size:
            if s + 1 < bits.size and bits[s + 1] == bits[s] + 1:
                _stage2(x, k * block, block, bits[s])
                s += 2
            else:
                _stage(x, k * block, block, bits[s])
                s += 1


@numba.njit(nogil=True, cache=True, parallel=True)
def wide(x, n, bit):
    """One stage at ``bit`` over every row of length n of the flat array x: the pairs
    (i, i + 2^bit) in chunks of 2^BLOCK_BITS / 2 in parallel."""
    h = 1 << bit
    rows = x.size // n
    groups = n // (2 * h)                       # per row: blocks of 2h elements
    chunk = min(h, 1 << 11)
    per = h // chunk
    total = rows * groups * per
    for q in numba.prange(total):
        g, c = q // per, q % per
        start = g * 2 * h + c * chunk            # rows are whole groups: g spans them
        _pairs(x[start:start + chunk], x[start + h:start + h + chunk])


@numba.njit(nogil=True, cache=True, parallel=True)
def wide2(x, n, bit):
    """Stages at ``bit`` then ``bit + 1`` in one pass: four values (i, i + h, i + 2h,
    i + 3h) in registers, the same butterflies in the same order as two ``wide``."""
    h = 1 << bit
    rows = x.size // n
    groups = n // (4 * h)
    chunk = min(h, 1 << 11)
    per = h // chunk
    total = rows * groups * per
    for q in numba.prange(total):
        g, c = q // per, q % per
        start = g * 4 * h + c * chunk
        _quads(x[start:start + chunk], x[start + h:start + h + chunk],
               x[start + 2 * h:start + 2 * h + chunk], x[start + 3 * h:start + 3 * h + chunk])


@numba.njit(nogil=True, cache=True, inline="always")
def _block_run(bits, s, block_bits):
    """The end of the run of stages from s whose bits are all below block_bits."""
    e = s
    while e < bits.size and bits[e] < block_bits:
        e += 1
    return e


@numba.njit(nogil=True, cache=True)
def serial(x, n, bits, block_bits):
    """The stages ``bits`` on each row of length n of the flat array x in the calling
    thread, row by row (a row of up to a few 2^14 elements stays in the L2 cache): the
    same butterflies in the same order per element as :func:`run`, for callers that
    transform their own small buffers inside a parallel kernel."""
    block = 1 << block_bits
    for row in range(0, x.size, n):
        s = 0
        while s < bits.size:
            if bits[s] < block_bits:
                e = _block_run(bits, s, block_bits)
                first3 = e - s >= 3 and block >= 8 and bits[s] == 0 and bits[s + 1] == 1 \
                    and bits[s + 2] == 2
                for base in range(row, row + n, block):
                    t = s
                    if first3:
                        _first3(x, base, block)
                        t = s + 3
                    while t < e:
                        if t + 1 < e and bits[t + 1] == bits[t] + 1:
                            _stage2(x, base, block, bits[t])
                            t += 2
                        else:
                            _stage(x, base, block, bits[t])
                            t += 1
                s = e
            elif s + 1 < bits.size and bits[s + 1] == bits[s] + 1:
                _stage2(x, row, n, bits[s])
                s += 2
            else:
                _stage(x, row, n, bits[s])
                s += 1



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
    (:mod:`fwht_gpu.rounding` for FP16); a NaN stays a NaN of the same sign."""
    bits = _bits(v)
    sign = bits & numba.uint32(0x80000000)
    mag = bits & numba.uint32(0x7FFFFFFF)
    if mode == 2:
        if mag > numba.uint32(0x7F800000):                  # NaN: quiet, top payload bits
            return _float((bits | numba.uint32(0x00400000)) & numba.uint32(0xFFFF0000))
        lsb = (bits >> numba.uint32(16)) & numba.uint32(1)
        return _float((bits + numba.uint32(0x7FFF) + lsb) & numba.uint32(0xFFFF0000))
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


@numba.njit(nogil=True, cache=True, inline="always")
def _rounded_pairs(f, lo, hi, count, mode):
    """Butterflies (lo + i, hi + i), i < count, each result rounded (see _round); slices
    indexed from 0, as in _stage, so that the loop vectorizes."""
    x = f[lo:lo + count]
    y = f[hi:hi + count]
    for i in range(count):
        a = x[i]
        b = y[i]
        x[i] = _round(a + b, mode)
        y[i] = _round(a - b, mode)


@numba.njit(nogil=True, cache=True, parallel=True)
def rounded(f, n, bits, block_bits, mode):
    """The stages ``bits`` on every row of length n of the flat float32 array f, every sum
    and difference rounded to FP16 (mode 1) or BF16 (mode 2): the NumPy engine's
    per-operation rounding.  Stages below ``block_bits`` run on cache blocks in parallel,
    higher ones over chunks of pairs in parallel; each element sees the same operations in
    the same order."""
    block = 1 << block_bits
    s = 0
    while s < bits.size:
        if bits[s] < block_bits:
            e = _block_run(bits, s, block_bits)
            for k in numba.prange(f.size // block):
                for t in range(s, e):
                    h = 1 << bits[t]
                    for start in range(k * block, (k + 1) * block, 2 * h):
                        _rounded_pairs(f, start, start + h, h, mode)
            s = e
        else:
            h = 1 << bits[s]
            chunk = min(h, 1 << 11)
            per = h // chunk
            for q in numba.prange(f.size // (2 * h) * per):
                g, c = q // per, q % per
                start = g * 2 * h + c * chunk
                _rounded_pairs(f, start, start + h, chunk, mode)
            s += 1


@numba.njit(nogil=True, cache=True, parallel=True)
def round_storage(f, mode):
    """Round the flat float32 array f in place to FP16 (mode 1) or BF16 (mode 2)."""
    step = 1 << 14
    for k in numba.prange((f.size + step - 1) // step):
        x = f[k * step:min(f.size, (k + 1) * step)]     # indexed from 0: vectorizes
        for i in range(x.size):
            x[i] = _round(x[i], mode)
