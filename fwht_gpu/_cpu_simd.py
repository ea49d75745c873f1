"""SIMD butterflies for the compiled CPU kernels: numba intrinsics that emit LLVM vector IR.

numba has no vector type, and LLVM's loop vectorizer leaves the butterflies of the lowest
index bits (partners inside one SIMD register) and short strided loops scalar: the three
lowest stages of a row took three quarters of a batched FP32 transform.  Each intrinsic
here loads whole vectors (``LOW`` = 16 elements for the lowest stages, 64 bytes otherwise:
16 FP32, 8 FP64), does its butterflies in registers and stores them back; LLVM lowers the generic vector IR
to whatever the machine has (SSE, AVX2, AVX-512, NEON).

* :func:`low_run` - the stages at bits 0 .. nb-1 of each vector of a run (partners through
  ``shufflevector``);
* :func:`pair_run` / :func:`quad_run` - one / two stages on vectors ``h`` elements apart.

Each intrinsic emits its whole loop, one copy per (rounding mode, stage count) behind a
``switch`` on the runtime arguments, so the loops themselves carry no dispatch.

Every butterfly is (a + b, a - b) with IEEE ``fadd`` / ``fsub`` and no fast-math flags: the
operations of the NumPy engine, in the same order per element, so the same bits.  With
``mode`` 1 or 2 (FP32 work vectors of FP16 / BF16 data) every result is rounded to the
16-bit format in registers, the vector form of :func:`fwht_gpu._cpu_kernels._round`
(mode 3: FP16 by integer operations even where the hardware converts, for tests).
"""
import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: Bytes of one vector of :func:`pair` and :func:`quad` (one AVX-512 register, two AVX2
#: ones).
VECTOR_BYTES = 64
#: Elements of one vector of :func:`low`, whatever the dtype: its four stages in registers.
LOW = 16

_I32 = ir.IntType(32)


def _hardware_half() -> bool:
    """Whether the machine converts float32 <-> FP16 in hardware (x86 F16C, every
    AArch64): LLVM's ``fptrunc`` / ``fpext`` to ``half`` are then one instruction per
    vector; elsewhere they would be library calls, and the integer form is used."""
    arch = platform.machine().lower()
    if arch in ("aarch64", "arm64"):
        return True
    if arch not in ("x86_64", "amd64"):
        return False
    try:
        import llvmlite.binding as llvm
        return bool(llvm.get_host_cpu_features().get("f16c", False))
    except Exception:               # pragma: no cover - a platform llvmlite cannot query
        return False


#: float32 -> FP16 -> float32 through the hardware's conversion (IEEE round to nearest
#: even, overflow to infinity, subnormals kept: the bits of NumPy's conversion).
HARDWARE_HALF = _hardware_half()


@intrinsic
def half_bits(typingctx, v):
    """The FP16 bit pattern (uint16) of the float32 ``v`` rounded to nearest even."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


@intrinsic
def half_value(typingctx, h):
    """The float32 value of the FP16 bit pattern ``h`` (uint16), exactly."""
    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


def lanes(itemsize: int) -> int:
    """Elements per vector for an element of ``itemsize`` bytes."""
    return VECTOR_BYTES // itemsize


def _consts(ty, n, values):
    return ir.Constant(ir.VectorType(ty, n), list(values))


def _splat(ty, n, value):
    return ir.Constant(ir.VectorType(ty, n), [value] * n)


def _round16(builder, v, n, mode):
    """The float32 vector ``v`` rounded to FP16 (mode 1) or BF16 (mode 2), ties to even, as
    float32 (the IR of ``_cpu_kernels._round``; NaN stays NaN of its sign).  FP16 through
    the hardware's conversion where there is one; mode 3: FP16 by integer operations
    always (the fallback, reachable for tests)."""
    if mode == 1 and HARDWARE_HALF:
        return builder.fpext(builder.fptrunc(v, ir.VectorType(ir.HalfType(), n)), v.type)
    vi = ir.VectorType(_I32, n)
    u = lambda c: _splat(_I32, n, c)            # noqa: E731
    bits = builder.bitcast(v, vi)
    mag = builder.and_(bits, u(0x7FFFFFFF))
    if mode == 2:
        nan = builder.icmp_unsigned(">", mag, u(0x7F800000))
        quiet = builder.and_(builder.or_(bits, u(0x00400000)), u(0xFFFF0000))
        lsb = builder.and_(builder.lshr(bits, u(16)), u(1))
        r = builder.and_(builder.add(builder.add(bits, u(0x7FFF)), lsb), u(0xFFFF0000))
        return builder.bitcast(builder.select(nan, quiet, r), v.type)
    sign = builder.and_(bits, u(0x80000000))
    lsb = builder.and_(builder.lshr(mag, u(13)), u(1))
    r = builder.and_(builder.add(builder.add(mag, u(0xFFF)), lsb), u(0xFFFFE000))
    half = _splat(ir.FloatType(), n, 0.5)
    small = builder.bitcast(builder.fsub(builder.fadd(builder.bitcast(mag, v.type), half),
                                         half), vi)
    r = builder.select(builder.icmp_unsigned("<", mag, u(0x38800000)), small, r)
    r = builder.select(builder.icmp_unsigned(">=", mag, u(0x477FF000)), u(0x7F800000), r)
    payload = builder.and_(mag, u(0x007FE000))
    payload = builder.select(builder.icmp_unsigned("==", payload, u(0)), u(0x2000), payload)
    r = builder.select(builder.icmp_unsigned(">", mag, u(0x7F800000)),
                       builder.or_(payload, u(0x7F800000)), r)
    return builder.bitcast(builder.or_(sign, r), v.type)


class _Emit:
    """Vector loads, stores and rounded butterflies of one intrinsic call on array ``ary``."""

    def __init__(self, context, builder, aryty, ary, mode, n=None):
        self.b = builder
        self.item = aryty.dtype.bitwidth // 8
        self.n = n or lanes(self.item)
        self.data = context.make_array(aryty)(context, builder, ary).data
        self.vty = ir.VectorType(context.get_data_type(aryty.dtype), self.n)
        self.mode = mode if aryty.dtype == types.float32 else 0

    def ptr(self, off):
        return self.b.bitcast(self.b.gep(self.data, [off]), self.vty.as_pointer())

    def load(self, off):
        return self.b.load(self.ptr(off), align=self.item)

    def store(self, v, off):
        self.b.store(v, self.ptr(off), align=self.item)

    def rnd(self, v):
        return _round16(self.b, v, self.n, self.mode) if self.mode else v

    def bfly(self, a, c):
        return self.rnd(self.b.fadd(a, c)), self.rnd(self.b.fsub(a, c))


def _switch(builder, value, cases) -> None:
    """Emit a switch on the integer ``value``: ``cases`` maps constants to functions that emit
    their code at the builder's position; other values do nothing (callers pass only the
    cases listed)."""
    end = builder.append_basic_block("switch.end")
    default = builder.append_basic_block("switch.default")
    sw = builder.switch(value, default)
    for c, emit in cases.items():
        block = builder.append_basic_block(f"switch.case{c}")
        sw.add_case(ir.Constant(value.type, c), block)
        builder.position_at_end(block)
        emit()
        builder.branch(end)
    builder.position_at_end(default)
    builder.branch(end)
    builder.position_at_end(end)


def _modes(arr):
    """The rounding modes a work array can take (float64 work arrays: none)."""
    return (0, 1, 2, 3) if arr.dtype == types.float32 else (0,)


def _checked(arr):
    return isinstance(arr, types.Array) and arr.dtype in (types.float32, types.float64) \
        and arr.layout == "C"


def _loop(builder, start, count, step, body) -> None:
    """for off in range(start, start + count, step): body(off)."""
    stop = builder.add(start, count)
    with cgutils.for_range_slice(builder, start, stop, ir.Constant(start.type, step)) as (off, _):
        body(off)


@intrinsic
def low_run(typingctx, arr, base, n, nb, mode):
    """Stages at bits 0 .. nb-1 (in that order, 1 <= nb <= 4) of every vector of ``LOW``
    elements of ``arr[base:base + n]`` (n a multiple of LOW); ``mode``: 0 (IEEE), 1 / 2
    (every result rounded to FP16 / BF16, float32 arrays), 3 (FP16 by integer operations)."""
    if not _checked(arr):
        return None

    def codegen(context, builder, sig, args):
        ary, start, count, nbits, rmode = args

        def variant(k, m):
            def emit():
                e = _Emit(context, builder, arr, ary, m, LOW)

                def body(off):
                    v = e.load(off)
                    for bit in range(k):
                        h = 1 << bit
                        idx = range(LOW)
                        a = builder.shuffle_vector(v, v, _consts(_I32, LOW, (i & ~h for i in idx)))
                        c = builder.shuffle_vector(v, v, _consts(_I32, LOW, (i | h for i in idx)))
                        s, d = e.bfly(a, c)
                        v = builder.shuffle_vector(s, d, _consts(_I32, LOW, (i + LOW if i & h else i
                                                                             for i in idx)))
                    e.store(v, off)
                _loop(builder, start, count, LOW, body)
            return emit

        _switch(builder, rmode, {m: (lambda m=m: _switch(builder, nbits, {
            k: variant(k, m) for k in range(1, LOW.bit_length())})) for m in _modes(arr)})
        return context.get_dummy_value()
    return types.void(arr, base, n, nb, mode), codegen


def _network_run(vectors: int):
    """The codegen of a run of butterfly networks on ``vectors`` vectors h elements apart
    (log2(vectors) stages: distance h, 2h, ..., in that order), one vector of lanes per step."""
    def codegen(context, builder, sig, args):
        arr = sig.args[0]
        ary, start, count, h, rmode = args

        def variant(m):
            def emit():
                e = _Emit(context, builder, arr, ary, m)

                def body(off):
                    offs = [off]
                    for _ in range(vectors - 1):
                        offs.append(builder.add(offs[-1], h))
                    v = [e.load(o) for o in offs]
                    dist = 1
                    while dist < vectors:
                        for j in range(vectors):
                            if not j & dist:
                                v[j], v[j + dist] = e.bfly(v[j], v[j + dist])
                        dist *= 2
                    for x, o in zip(v, offs):
                        e.store(x, o)
                _loop(builder, start, count, e.n, body)
            return emit

        _switch(builder, rmode, {m: variant(m) for m in _modes(arr)})
        return context.get_dummy_value()
    return codegen


@intrinsic
def pair_run(typingctx, arr, start, count, h, mode):
    """One stage of distance h on ``arr[start:start + count]`` and the elements h further
    (h and count multiples of the vector length, ``lanes``); ``mode`` as for
    :func:`low_run`."""
    if not _checked(arr):
        return None
    return types.void(arr, start, count, h, mode), _network_run(2)


@intrinsic
def quad_run(typingctx, arr, start, count, h, mode):
    """Two stages (distance h, then 2h) on ``arr[start:start + count]`` and the elements h,
    2h and 3h further: the butterflies (0, 1), (2, 3), then (0, 2), (1, 3), as two
    :func:`pair_run` stages do them."""
    if not _checked(arr):
        return None
    return types.void(arr, start, count, h, mode), _network_run(4)
