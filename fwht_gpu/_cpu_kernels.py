"""The numba kernels of :mod:`fwht_gpu.compiled` (module-level functions, so that numba's
on-disk cache finds them again in the next process; imported on first use)."""
import numba


@numba.njit(nogil=True, cache=True, inline="always")
def _stage(x, base, n, bit):
    """The butterflies (i, i + 2^bit) on n elements from base.  The halves are taken as
    slices indexed from 0: numba then drops the negative-index wrap-around and LLVM
    vectorizes the loop (5-6x faster than indexing x itself)."""
    h = 1 << bit
    for start in range(base, base + n, 2 * h):
        lo = x[start:start + h]
        hi = x[start + h:start + 2 * h]
        for i in range(h):
            a = lo[i]
            b = hi[i]
            lo[i] = a + b
            hi[i] = a - b


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
        q0 = x[start:start + h]                     # slices: vectorized, as in _stage
        q1 = x[start + h:start + 2 * h]
        q2 = x[start + 2 * h:start + 3 * h]
        q3 = x[start + 3 * h:start + 4 * h]
        for i in range(h):
            a, b, c, d = q0[i], q1[i], q2[i], q3[i]
            a, b = a + b, a - b
            c, d = c + d, c - d
            q0[i], q2[i] = a + c, a - c
            q1[i], q3[i] = b + d, b - d


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
        lo = x[start:start + chunk]              # slices: vectorized (see _stage)
        hi = x[start + h:start + h + chunk]
        for i in range(chunk):
            a = lo[i]
            b = hi[i]
            lo[i] = a + b
            hi[i] = a - b


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
        q0 = x[start:start + chunk]              # slices: vectorized (see _stage)
        q1 = x[start + h:start + h + chunk]
        q2 = x[start + 2 * h:start + 2 * h + chunk]
        q3 = x[start + 3 * h:start + 3 * h + chunk]
        for i in range(chunk):
            a, b, c2, d = q0[i], q1[i], q2[i], q3[i]
            a, b = a + b, a - b
            c2, d = c2 + d, c2 - d
            q0[i], q2[i] = a + c2, a - c2
            q1[i], q3[i] = b + d, b - d


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
                e = s
                while e < bits.size and bits[e] < block_bits:
                    e += 1
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

