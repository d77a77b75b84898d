"""A tiny GraphDefBuilder for tests, in the spirit of TF's ``GraphDefBuilder``/``ops::`` test helpers.

``b.op("Relu", a, name="B")`` adds a NodeDef whose type attrs (``T``, ``dtype``, ``N``) are filled in
from the inputs' dtypes, so tests can build TF's clustering scenarios node by node (A–F) exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2, types_pb2
from tensorflow.python.framework import op_def_registry, tensor_util


@dataclass(frozen=True)
class T:
    """A tensor reference ``node:index`` with its dtype."""

    node: str
    index: int
    dtype: int

    @property
    def ref(self) -> str:
        return self.node if self.index == 0 else f"{self.node}:{self.index}"

    def __getitem__(self, i: int) -> "T":
        return T(self.node, i, self.dtype)


class GDB:
    def __init__(self) -> None:
        self.graph_def = graph_pb2.GraphDef()
        self._names: set[str] = set()

    def _unique(self, base: str) -> str:
        name, k = base, 0
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def node(self, name: str) -> node_def_pb2.NodeDef:
        return next(n for n in self.graph_def.node if n.name == name)

    def op(self, op: str, *inputs: T | list[T], name: str | None = None, ctrl: tuple = (),
           device: str = "", out_dtype: int | None = None, **attrs) -> T:
        """Add ``op``. ``inputs`` are tensors (or lists of tensors for list args); ``ctrl`` control deps
        (names or tensors); ``attrs`` are Python values (bool/int/float/str/dtype/list/AttrValue)."""
        nd = self.graph_def.node.add(name=self._unique(name or op), op=op, device=device)
        flat: list[T] = []
        for inp in inputs:
            flat.extend(inp if isinstance(inp, list) else [inp])
        nd.input.extend(t.ref for t in flat)
        nd.input.extend("^" + (c.node if isinstance(c, T) else c) for c in ctrl)
        op_def = op_def_registry.get(op)
        if op_def is not None:
            # Fill type attrs from the inputs, as the Python op wrappers would.
            pos = 0
            for arg, inp in zip(op_def.input_arg, inputs):
                group = inp if isinstance(inp, list) else [inp]
                if arg.type_attr and arg.type_attr not in attrs and group:
                    nd.attr[arg.type_attr].type = group[0].dtype % 100
                if arg.number_attr and arg.number_attr not in attrs:
                    nd.attr[arg.number_attr].i = len(group)
                if arg.type_list_attr and arg.type_list_attr not in attrs:
                    nd.attr[arg.type_list_attr].list.type.extend(t.dtype for t in group)
                pos += len(group)
        for key, value in attrs.items():
            nd.attr[key].CopyFrom(_attr(value))
        dtype = out_dtype
        if dtype is None:
            if "dtype" in nd.attr:
                dtype = nd.attr["dtype"].type
            elif "T" in nd.attr:
                dtype = nd.attr["T"].type
            elif "DstT" in nd.attr:
                dtype = nd.attr["DstT"].type
            elif "Tout" in nd.attr and nd.attr["Tout"].HasField("type"):
                dtype = nd.attr["Tout"].type
            else:
                dtype = types_pb2.DT_FLOAT
        return T(nd.name, 0, dtype)

    def const(self, value, dtype=tf.float32, name: str | None = None, **kw) -> T:
        tensor = tensor_util.make_tensor_proto(np.asarray(value, dtype=tf.as_dtype(dtype).as_numpy_dtype)
                                               if dtype != tf.string else value, dtype=dtype)
        return self.op("Const", name=name or "Const", value=attr_value_pb2.AttrValue(tensor=tensor),
                       dtype=tf.as_dtype(dtype), **kw)

    def placeholder(self, dtype=tf.float32, shape=None, name: str | None = None, **kw) -> T:
        attrs = {"dtype": tf.as_dtype(dtype)}
        if shape is not None:
            attrs["shape"] = tf.TensorShape(shape)
        return self.op("Placeholder", name=name or "Placeholder", **attrs, **kw)

    def add_function(self, fdef) -> None:
        self.graph_def.library.function.add().CopyFrom(fdef)


def _attr(value) -> attr_value_pb2.AttrValue:
    if isinstance(value, attr_value_pb2.AttrValue):
        return value
    if isinstance(value, tf.DType):
        return attr_value_pb2.AttrValue(type=value.as_datatype_enum)
    if isinstance(value, tf.TensorShape):
        return attr_value_pb2.AttrValue(shape=value.as_proto())
    if isinstance(value, bool):
        return attr_value_pb2.AttrValue(b=value)
    if isinstance(value, int):
        return attr_value_pb2.AttrValue(i=value)
    if isinstance(value, float):
        return attr_value_pb2.AttrValue(f=value)
    if isinstance(value, str):
        return attr_value_pb2.AttrValue(s=value.encode())
    if isinstance(value, (list, tuple)):
        av = attr_value_pb2.AttrValue()
        if all(isinstance(v, tf.DType) for v in value) and value:
            av.list.type.extend(v.as_datatype_enum for v in value)
        elif all(isinstance(v, int) for v in value):
            av.list.i.extend(value)
        else:
            av.list.CopyFrom(attr_value_pb2.AttrValue.ListValue())
        return av
    raise TypeError(f"can't make an AttrValue of {value!r}")


def func_attr(name: str) -> attr_value_pb2.AttrValue:
    av = attr_value_pb2.AttrValue()
    av.func.name = name
    return av


FLOAT = types_pb2.DT_FLOAT
INT32 = types_pb2.DT_INT32
BOOL = types_pb2.DT_BOOL
RESOURCE = types_pb2.DT_RESOURCE
