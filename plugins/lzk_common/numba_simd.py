"""Eight-lane float32 vectors for numba code: a numba type for LLVM's ``<8 x float>`` and the few
operations the compiled search kernels (:mod:`lzk_muzero.numba_mlp`) need, plus float/int bit casts.

Why: numba runs LLVM's loop vectoriser but not its SLP vectoriser, so a matmul microkernel that
keeps a tile of accumulators in registers (4 rows × 16 outputs = 8 vectors, the BLIS layout)
cannot be written with scalar code; with these values it can, and runs at ~90% of the FMA peak.
The vector width is fixed at 8: one AVX register; LLVM splits it into two SSE registers on
machines without AVX, so the code stays portable.

``vload``/``vstore`` take a C-contiguous float32 array of any rank and a flat element offset
(unaligned access; no bounds check: callers guarantee ``offset + 8 <= a.size``). ``vload_wide``/
``vstore_narrow`` do the same for float32 arrays and for uint16 arrays that hold bfloat16 bits
(torch's bf16 tensors viewed as ``uint16``): a bf16 load widens exactly (bits << 16), a bf16
store rounds to nearest even as torch's casts do. Kernels written with them compile once per
storage type and compute in float32 either way.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

LANES = 8
_VEC = ir.VectorType(ir.FloatType(), LANES)
_I32 = ir.IntType(32)


class F32x8(types.Type):
    """numba type of an LLVM <8 x float> value (lives in a register)."""

    def __init__(self) -> None:
        super().__init__(name="f32x8")


f32x8 = F32x8()


@register_model(F32x8)
class _F32x8Model(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: F32x8) -> None:
        super().__init__(dmm, fe_type, _VEC)


def _is_f32_c_array(a: types.Type) -> bool:
    return isinstance(a, types.Array) and a.dtype == types.float32 and a.layout == "C"


def _vec_ptr(context: Any, builder: ir.IRBuilder, aryty: types.Array, ary: Any, offset: Any) -> Any:
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [offset]), _VEC.as_pointer())


@intrinsic
def vload(typingctx: Any, a: types.Type, offset: types.Type) -> Any:
    """a.flat[offset : offset + 8] as a vector."""
    if not (_is_f32_c_array(a) and isinstance(offset, types.Integer)):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        return builder.load(_vec_ptr(context, builder, a, args[0], args[1]), align=4)

    return f32x8(a, offset), codegen


@intrinsic
def vstore(typingctx: Any, a: types.Type, offset: types.Type, v: types.Type) -> Any:
    """a.flat[offset : offset + 8] = v."""
    if not (_is_f32_c_array(a) and isinstance(offset, types.Integer) and v == f32x8):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        builder.store(args[2], _vec_ptr(context, builder, a, args[0], args[1]), align=4)
        return context.get_dummy_value()

    return types.none(a, offset, v), codegen


@intrinsic
def vbroadcast(typingctx: Any, x: types.Type) -> Any:
    """[x] * 8 from a float32."""
    if x != types.float32:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        undef = ir.Constant(_VEC, ir.Undefined)
        v = builder.insert_element(undef, args[0], ir.Constant(_I32, 0))
        return builder.shuffle_vector(v, undef, ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES))

    return f32x8(x), codegen


@intrinsic
def vzero(typingctx: Any) -> Any:
    """[0.0] * 8."""
    return f32x8(), lambda context, builder, sig, args: ir.Constant(_VEC, [0.0] * LANES)


@intrinsic
def vfma(typingctx: Any, a: types.Type, b: types.Type, c: types.Type) -> Any:
    """a·b + c lane-wise (``llvm.fmuladd``: one FMA instruction where the CPU has them)."""
    if not a == b == c == f32x8:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3), "llvm.fmuladd.v8f32")
        return builder.call(fn, args)

    return f32x8(a, b, c), codegen


def _lanewise(name: str, instruction: str, doc: str) -> Any:
    """A binary lane-wise intrinsic of two f32x8 values, emitting one LLVM ``instruction``
    (an IRBuilder method: ``fadd``, ``fmul``) without fast-math flags."""

    def typer(typingctx: Any, a: types.Type, b: types.Type) -> Any:
        if not a == b == f32x8:
            return None
        return f32x8(a, b), lambda context, builder, sig, args: getattr(builder, instruction)(args[0], args[1])

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


vadd = _lanewise("vadd", "fadd", "a + b lane-wise.")


@intrinsic
def vrelu(typingctx: Any, a: types.Type) -> Any:
    """max(a, 0) lane-wise, with relu(NaN) = NaN as torch (a select on a < 0, not maxps)."""
    if a != f32x8:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        zero = ir.Constant(_VEC, [0.0] * LANES)
        return builder.select(builder.fcmp_ordered("<", args[0], zero), zero, args[0])

    return f32x8(a), codegen


@intrinsic
def f32_bits(typingctx: Any, x: types.Type) -> Any:
    """The bits of a float32 as an int32 (a bit cast, which vectorises, unlike a memory round trip)."""
    if x != types.float32:
        return None
    return types.int32(x), lambda context, builder, sig, args: builder.bitcast(args[0], _I32)


@intrinsic
def bits_f32(typingctx: Any, x: types.Type) -> Any:
    """The float32 whose bits are the low 32 bits of the integer ``x`` (numba widens int32
    arithmetic to int64; LLVM narrows it back)."""
    if not (isinstance(x, types.Integer) and x.bitwidth >= 32):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        bits = args[0] if x.bitwidth == 32 else builder.trunc(args[0], _I32)
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(x), codegen


_I16 = ir.IntType(16)
_VEC_I32 = ir.VectorType(_I32, LANES)
_VEC_I16 = ir.VectorType(_I16, LANES)


def _is_bf16_bits_c_array(a: types.Type) -> bool:
    return isinstance(a, types.Array) and a.dtype == types.uint16 and a.layout == "C"


def _typed_ptr(context: Any, builder: ir.IRBuilder, aryty: types.Array, ary: Any, offset: Any, vec: ir.Type) -> Any:
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [offset]), vec.as_pointer())


@intrinsic
def vload_wide(typingctx: Any, a: types.Type, offset: types.Type) -> Any:
    """a.flat[offset : offset + 8] as a float32 vector, from float32 or bf16-bit (uint16) storage."""
    if not isinstance(offset, types.Integer):
        return None
    if _is_f32_c_array(a):
        return f32x8(a, offset), lambda context, builder, sig, args: builder.load(
            _vec_ptr(context, builder, a, args[0], args[1]), align=4)
    if not _is_bf16_bits_c_array(a):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        half = builder.load(_typed_ptr(context, builder, a, args[0], args[1], _VEC_I16), align=2)
        wide = builder.shl(builder.zext(half, _VEC_I32), ir.Constant(_VEC_I32, [16] * LANES))
        return builder.bitcast(wide, _VEC)

    return f32x8(a, offset), codegen


@intrinsic
def vstore_narrow(typingctx: Any, a: types.Type, offset: types.Type, v: types.Type) -> Any:
    """a.flat[offset : offset + 8] = v, into float32 storage, or into bf16-bit (uint16) storage
    rounded to nearest even (NaN stays a quiet NaN), as torch's float → bfloat16 cast."""
    if not (isinstance(offset, types.Integer) and v == f32x8):
        return None
    if _is_f32_c_array(a):
        def store_f32(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
            builder.store(args[2], _vec_ptr(context, builder, a, args[0], args[1]), align=4)
            return context.get_dummy_value()

        return types.none(a, offset, v), store_f32
    if not _is_bf16_bits_c_array(a):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        def splat(x: int) -> ir.Constant:
            return ir.Constant(_VEC_I32, [x] * LANES)

        value = args[2]
        bits = builder.bitcast(value, _VEC_I32)
        lsb = builder.and_(builder.lshr(bits, splat(16)), splat(1))
        rounded = builder.lshr(builder.add(bits, builder.add(splat(0x7FFF), lsb)), splat(16))
        quiet_nan = builder.or_(builder.lshr(bits, splat(16)), splat(0x40))
        is_nan = builder.fcmp_unordered("uno", value, value)
        half = builder.trunc(builder.select(is_nan, quiet_nan, rounded), _VEC_I16)
        builder.store(half, _typed_ptr(context, builder, a, args[0], args[1], _VEC_I16), align=2)
        return context.get_dummy_value()

    return types.none(a, offset, v), codegen


vmul = _lanewise("vmul", "fmul", "a · b lane-wise (a plain multiply: never contracted with an add, so results "
                                 "do not depend on the compiler's choices).")


def _reduction(name: str, llvm_name: str, start: float | None, doc: str) -> Any:
    """An intrinsic reducing an f32x8 to a float32 with ``llvm_name``; ``start`` is the ordered
    reduction's initial value (fadd), None for reductions that take none (fmax)."""

    def typer(typingctx: Any, a: types.Type) -> Any:
        if a != f32x8:
            return None

        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
            f32 = ir.FloatType()
            head = [] if start is None else [ir.Constant(f32, start)]
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f32, [h.type for h in head] + [_VEC]),
                                                llvm_name)
            return builder.call(fn, head + [args[0]])

        return types.float32(a), codegen

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


vsum = _reduction("vsum", "llvm.vector.reduce.fadd.v8f32", -0.0,
                  "The sum of the 8 lanes, added in lane order (an ordered reduction: deterministic).")


vsub = _lanewise("vsub", "fsub", "a − b lane-wise.")


@intrinsic
def vmax(typingctx: Any, a: types.Type, b: types.Type) -> Any:
    """max(a, b) lane-wise (``llvm.maxnum``: a NaN lane takes the other operand; callers whose
    result must carry NaN get it from later arithmetic on the same lanes)."""
    if not a == b == f32x8:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 2), "llvm.maxnum.v8f32")
        return builder.call(fn, args)

    return f32x8(a, b), codegen


vhmax = _reduction("vhmax", "llvm.vector.reduce.fmax.v8f32", None,
                   "The largest of the 8 lanes (max is exact, so the order does not matter).")


# exp(x) = 2^n · e^r with n = round(x / ln 2) and r = x − n·ln 2 ∈ [−ln 2 / 2, ln 2 / 2]: ln 2 split in
# two parts so that n·C1 is exact, e^r from the degree-7 Taylor-like minimax polynomial of Cephes' expf
# (public domain), 2^n built from its exponent bits.
_EXP_HI, _EXP_LO = 88.72283, -87.33654  # exp overflows above, leaves the normal range below
_LOG2E = 1.44269504088896341
_LN2_C1, _LN2_C2 = 0.693359375, -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


@intrinsic
def vexp(typingctx: Any, a: types.Type) -> Any:
    """exp(a) lane-wise, within 1 ulp of the exact value for normal results (measured over
    [−100, 89]); inputs are clamped to [−87.34, 88.72], so exp of anything lower is ≈ 1.2e-38 (not
    0) and of anything higher ≈ 3.4e38 (not inf); NaN stays NaN. Plain multiplies and adds (no
    contraction): the same bits wherever it compiles."""
    if a != f32x8:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        def splat(x: float) -> ir.Constant:
            return ir.Constant(_VEC, [x] * LANES)

        x = args[0]
        x = builder.select(builder.fcmp_ordered(">", x, splat(_EXP_HI)), splat(_EXP_HI), x)
        x = builder.select(builder.fcmp_ordered("<", x, splat(_EXP_LO)), splat(_EXP_LO), x)
        floor = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC]), "llvm.floor.v8f32")
        n = builder.call(floor, [builder.fadd(builder.fmul(x, splat(_LOG2E)), splat(0.5))])
        r = builder.fsub(builder.fsub(x, builder.fmul(n, splat(_LN2_C1))), builder.fmul(n, splat(_LN2_C2)))
        p = splat(_EXP_POLY[0])
        for c in _EXP_POLY[1:]:
            p = builder.fadd(builder.fmul(p, r), splat(c))
        y = builder.fadd(builder.fadd(builder.fmul(p, builder.fmul(r, r)), r), splat(1.0))
        # 2^n as 2^h · 2^(n − h), h = n >> 1: both factors stay normal floats for n ∈ [−126, 128].
        n_int = builder.fptosi(n, _VEC_I32)
        half = builder.ashr(n_int, ir.Constant(_VEC_I32, [1] * LANES))

        def pow2(k: Any) -> Any:
            biased = builder.add(k, ir.Constant(_VEC_I32, [127] * LANES))
            return builder.bitcast(builder.shl(biased, ir.Constant(_VEC_I32, [23] * LANES)), _VEC)

        return builder.fmul(builder.fmul(y, pow2(half)), pow2(builder.sub(n_int, half)))

    return f32x8(a), codegen
