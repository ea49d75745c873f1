"""SIMD butterflies for the compiled CPU kernels: numba intrinsics that emit LLVM vector IR.

numba has no vector type, and LLVM's loop vectorizer leaves the butterflies of the lowest
index bits (partners inside one SIMD register) and short strided loops scalar: the three
lowest stages of a row took three quarters of a batched FP32 transform.  Each intrinsic
here loads whole vectors (``LOW`` = 16 elements for the lowest stages, 64 bytes otherwise:
16 FP32, 8 FP64), does its butterflies in registers and stores them back; LLVM lowers the generic vector IR
to whatever the machine has (SSE, AVX2, AVX-512, NEON).

* :func:`low` - the stages at bits 0 .. nb-1 of one vector (partners through
  ``shufflevector``);
* :func:`pair` / :func:`quad` - one / two stages on vectors ``h`` elements apart.

Every butterfly is (a + b, a - b) with IEEE ``fadd`` / ``fsub`` and no fast-math flags: the
operations of the NumPy engine, in the same order per element, so the same bits.  With
``mode`` 1 or 2 (FP32 work vectors of FP16 / BF16 data) every result is rounded to the
16-bit format in registers, the vector form of :func:`fwht_gpu._cpu_kernels._round`.
``nb`` and ``mode`` must be literal constants at the call site.
"""
import platform

from llvmlite import ir
from numba import types
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


def _literal(t):
    return t.literal_value if isinstance(t, types.IntegerLiteral) else None


def _checked(arr, *lits):
    return isinstance(arr, types.Array) and arr.dtype in (types.float32, types.float64) \
        and arr.layout == "C" and all(v is not None for v in lits)


@intrinsic
def low(typingctx, arr, off, nb, mode):
    """Stages at bits 0 .. nb-1 (in that order, nb <= 4) of the vector
    ``arr[off:off + LOW]``."""
    k, m = _literal(nb), _literal(mode)
    if not _checked(arr, k, m) or not 1 <= k <= LOW.bit_length() - 1:
        return None

    def codegen(context, builder, sig, args):
        e = _Emit(context, builder, arr, args[0], m, LOW)
        n = e.n
        v = e.load(args[1])
        for bit in range(k):
            h = 1 << bit
            a = builder.shuffle_vector(v, v, _consts(_I32, n, (i & ~h for i in range(n))))
            c = builder.shuffle_vector(v, v, _consts(_I32, n, (i | h for i in range(n))))
            s, d = e.bfly(a, c)
            v = builder.shuffle_vector(s, d, _consts(_I32, n, (i + n if i & h else i
                                                               for i in range(n))))
        e.store(v, args[1])
        return context.get_dummy_value()
    return types.void(arr, off, nb, mode), codegen


@intrinsic
def pair(typingctx, arr, off, h, mode):
    """One stage on the vectors at ``off`` and ``off + h`` (h a multiple of LANES)."""
    m = _literal(mode)
    if not _checked(arr, m):
        return None

    def codegen(context, builder, sig, args):
        e = _Emit(context, builder, arr, args[0], m)
        o0 = args[1]
        o1 = builder.add(o0, args[2])
        s, d = e.bfly(e.load(o0), e.load(o1))
        e.store(s, o0)
        e.store(d, o1)
        return context.get_dummy_value()
    return types.void(arr, off, h, mode), codegen


@intrinsic
def quad(typingctx, arr, off, h, mode):
    """Two stages (distance h, then 2h) on the vectors at ``off + j h``, j < 4: the
    butterflies (0, 1), (2, 3), then (0, 2), (1, 3), as two :func:`pair` stages do them."""
    m = _literal(mode)
    if not _checked(arr, m):
        return None

    def codegen(context, builder, sig, args):
        e = _Emit(context, builder, arr, args[0], m)
        h = args[2]
        offs = [args[1]]
        for _ in range(3):
            offs.append(builder.add(offs[-1], h))
        a, b, c, d = (e.load(o) for o in offs)
        a, b = e.bfly(a, b)
        c, d = e.bfly(c, d)
        a, c = e.bfly(a, c)
        b, d = e.bfly(b, d)
        for v, o in zip((a, b, c, d), offs):
            e.store(v, o)
        return context.get_dummy_value()
    return types.void(arr, off, h, mode), codegen

