"""LLVM types for HLO element types, and loads/stores/constants in them.

Each element type has a *storage* type (how it sits in memory, matching numpy's itemsize) and a
*value* type (how it is held in a register):

    pred  i8 in memory, i1 in registers        s8..s64 / u8..u64  iN (signedness lives in the HLO type)
    f16   half                                 bf16  i16 bits (arithmetic goes through f32, as XLA's)
    f32   float                                f64   double
    c64   {float, float}                       c128  {double, double}   (real part first, as numpy)

Token/tuple element types have no mapping; asking for one raises ``UnimplementedError``.
"""
from __future__ import annotations

import struct

import numpy as np
from llvmlite import ir

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.shape import PrimitiveType as T

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
C64 = ir.LiteralStructType([F32, F32])
C128 = ir.LiteralStructType([F64, F64])
PTR = ir.PointerType()
VOID = ir.VoidType()

_STORAGE = {
    T.PRED: I8, T.S8: I8, T.U8: I8, T.S16: I16, T.U16: I16, T.S32: I32, T.U32: I32, T.S64: I64, T.U64: I64,
    T.F16: F16, T.BF16: I16, T.F32: F32, T.F64: F64, T.C64: C64, T.C128: C128,
}


def supported(et: T) -> bool:
    return et in _STORAGE


def storage_type(et: T) -> ir.Type:
    try:
        return _STORAGE[et]
    except KeyError:
        raise UnimplementedError(f"native code for element type {et.value} is not implemented") from None


def value_type(et: T) -> ir.Type:
    return I1 if et is T.PRED else storage_type(et)


def compute_float_type(et: T) -> ir.Type:
    """The type float arithmetic is done in: f32 for f16/bf16 (XLA's upcast), else the type itself."""
    return F64 if et is T.F64 else F32


def i64(v: int) -> ir.Constant:
    return ir.Constant(I64, int(v))


def int_constant(et: T, value: int) -> ir.Constant:
    ty = value_type(et)
    width = ty.width
    return ir.Constant(ty, int(value) & ((1 << width) - 1))


def float_constant(ty: ir.Type, value: float) -> ir.Constant:
    """An exact float constant of ``ty`` (NaN payloads and signed zeros kept)."""
    if isinstance(ty, ir.DoubleType):
        bits = struct.unpack("<q", struct.pack("<d", float(value)))[0]
        return ir.Constant(I64, bits).bitcast(F64)
    if isinstance(ty, ir.FloatType):
        bits = int(np.array(value, dtype=np.float32).view(np.uint32))
        return ir.Constant(I32, bits).bitcast(F32)
    if isinstance(ty, ir.HalfType):
        bits = int(np.array(value, dtype=np.float16).view(np.uint16))
        return ir.Constant(I16, bits).bitcast(F16)
    raise UnimplementedError(f"no float constant of type {ty}")


_BITS = {16: (I16, np.int16), 32: (I32, np.int32), 64: (I64, np.int64)}
_FLOATS = {16: np.float16, 32: np.float32, 64: np.float64}


def float_constant_value(v) -> np.floating | None:
    """The value of ``v`` if it is a float constant (``float_constant``'s bitcast of its bits, or a plain
    one) as a numpy scalar of its width (bits kept: NaN payloads, signed zeros); else None."""
    if not isinstance(v, ir.Constant) or not isinstance(v.type, (ir.HalfType, ir.FloatType, ir.DoubleType)):
        return None
    width = {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}[type(v.type)]
    if isinstance(v, ir.FormattedConstant):   # "bitcast (i32 N to float)", as float_constant makes it
        head, _, rest = v.constant.partition(" (")
        bits, _, _ = rest.partition(" to ")
        ity, _, n = bits.partition(" ")
        if head != "bitcast" or ity != f"i{width}":
            return None
        return np.array(int(n) & ((1 << width) - 1), np.uint64).astype(f"u{width // 8}").view(_FLOATS[width])[()]
    if isinstance(v.constant, float):
        return _FLOATS[width](v.constant)
    return None


def _float_bits_constant(ty: ir.Type, value: np.ndarray) -> ir.Constant:
    """The float constant of ``ty`` with exactly the bits of numpy scalar ``value`` (already of that width)."""
    ity, view = _BITS[value.dtype.itemsize * 8]
    return ir.Constant(ity, int(np.asarray(value).reshape(()).view(view))).bitcast(ty)


def constant(et: T, value) -> ir.Constant:
    """The register value of a numpy/Python scalar of element type ``et``."""
    if et is T.PRED:
        return ir.Constant(I1, int(bool(value)))
    if et.is_integral:
        return int_constant(et, int(np.asarray(value).astype(et.dtype).astype(np.int64)
                                    if not et.is_unsigned_int else np.asarray(value).astype(et.dtype)))
    if et is T.BF16:
        bits = int(np.asarray(value).astype(et.dtype).view(np.uint16))
        return ir.Constant(I16, bits)
    # Floats go by their bits, never through a Python float: code is emitted on TF's kernel thread, whose
    # MXCSR has DAZ set, and a float(denormal f32) there is 0 (a pad value must keep its denormal bits).
    if et in (T.F16, T.F32, T.F64):
        return _float_bits_constant(value_type(et), np.asarray(value).astype(et.dtype))
    if et in (T.C64, T.C128):
        z = np.asarray(value).astype(et.dtype)
        part = F32 if et is T.C64 else F64
        return ir.Constant(value_type(et), [_float_bits_constant(part, z.real), _float_bits_constant(part, z.imag)])
    raise UnimplementedError(f"constants of element type {et.value} are not implemented")


def to_storage(b: ir.IRBuilder, et: T, value: ir.Value) -> ir.Value:
    return b.zext(value, I8) if et is T.PRED else value


def from_storage(b: ir.IRBuilder, et: T, value: ir.Value) -> ir.Value:
    return b.icmp_unsigned("!=", value, ir.Constant(I8, 0)) if et is T.PRED else value


def element_bytes(et: T) -> int:
    return et.bit_width // 8
