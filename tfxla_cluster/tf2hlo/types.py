"""TF types and attribute values as the lowering sees them.

Stage: lowering helper. ``element_type(DT_FLOAT) is F32``; ``np_dtype(DT_BFLOAT16)`` is ml_dtypes'
bfloat16 (what TF's numpy conversion uses too); ``attr_value`` turns an ``AttrValue`` proto into plain
Python (ints, floats, bools, str, dtype enums, shape tuples, numpy arrays, lists, function names).
Only dtypes with an XLA element type are mapped; the others raise ``UnimplementedError`` naming them.
"""
from __future__ import annotations

import numpy as np
from tensorflow.core.framework import attr_value_pb2, types_pb2

from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.graph.opdefs import base_dtype, dtype_name
from tfxla_cluster.hlo.shape import PrimitiveType as P

_ELEMENT_TYPES: dict[int, P] = {
    types_pb2.DT_BOOL: P.PRED,
    types_pb2.DT_INT8: P.S8, types_pb2.DT_INT16: P.S16, types_pb2.DT_INT32: P.S32, types_pb2.DT_INT64: P.S64,
    types_pb2.DT_UINT8: P.U8, types_pb2.DT_UINT16: P.U16, types_pb2.DT_UINT32: P.U32,
    types_pb2.DT_UINT64: P.U64,
    types_pb2.DT_HALF: P.F16, types_pb2.DT_BFLOAT16: P.BF16, types_pb2.DT_FLOAT: P.F32,
    types_pb2.DT_DOUBLE: P.F64,
    types_pb2.DT_COMPLEX64: P.C64, types_pb2.DT_COMPLEX128: P.C128,
    # quantized types are their storage integers (tf2xla's DataTypeToPrimitiveType)
    types_pb2.DT_QINT8: P.S8, types_pb2.DT_QUINT8: P.U8, types_pb2.DT_QINT16: P.S16,
    types_pb2.DT_QUINT16: P.U16, types_pb2.DT_QINT32: P.S32,
}
# The reverse map gives the plain integer type for a storage type (first entry wins).
_TF_TYPES: dict[P, int] = {}
for _tf, _et in _ELEMENT_TYPES.items():
    _TF_TYPES.setdefault(_et, _tf)


def element_type(dtype: int) -> P:
    """The XLA element type of a TF ``DataType`` enum (ref types allowed)."""
    et = _ELEMENT_TYPES.get(base_dtype(dtype))
    if et is None:
        raise UnimplementedError(f"{dtype_name(base_dtype(dtype))} has no XLA element type")
    return et


def tf_dtype(et: P) -> int:
    return _TF_TYPES[et]


def np_dtype(dtype: int) -> np.dtype:
    return element_type(dtype).dtype


def attr_value(value: attr_value_pb2.AttrValue):
    """Plain Python for an AttrValue (lists become Python lists)."""
    kind = value.WhichOneof("value")
    if kind == "list":
        lst = value.list
        for field in ("s", "i", "f", "b", "type", "shape", "tensor", "func"):
            items = getattr(lst, field)
            if len(items):
                return [_scalar(field, v) for v in items]
        return []
    if kind is None:
        return None
    return _scalar(kind, getattr(value, kind))


def _scalar(kind: str, v):
    if kind == "s":
        return v.decode("utf-8", errors="replace")
    if kind == "shape":
        return None if v.unknown_rank else tuple(d.size for d in v.dim)
    if kind == "tensor":
        import tensorflow as tf

        if v.tensor_content:   # the bytes themselves (np.frombuffer): no float passes through the FPU
            return tf.make_ndarray(v)
        from tfxla_cluster.mxcsr import kept_denormals
        with kept_denormals():  # float_val goes through Python floats: DAZ (TF's kernel thread) flushes them
            return tf.make_ndarray(v)
    if kind == "func":
        return v.name
    if kind == "placeholder":
        return v
    return v
