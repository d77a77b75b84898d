"""Op signatures: the OpDef (or library FunctionDef) behind a NodeDef, and its typed outputs.

Stage: import helper. Given a NodeDef and the graph's function library, this module says which op
signature the node instantiates and expands its input/output *argument lists* into flat, typed slots
(``Split`` with ``num_split=3`` has three outputs of type ``T``). It guarantees that every answer comes
from TF's own op registry or from the library's FunctionDef signatures, never from a hand-written table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from tensorflow.core.framework import function_pb2, node_def_pb2, op_def_pb2, types_pb2
from tfxla_cluster.errors import InvalidArgumentError, NotFoundError
from tfxla_cluster.tf_compat import op_def as registered_op_def

# The ops and nodes TF's runtime puts at a graph's boundary: spelled here once for the package.
ARG_OP, RETVAL_OP = "_Arg", "_Retval"                       # a function's inputs and outputs
DEVICE_ARG_OP, DEVICE_RETVAL_OP = "_DeviceArg", "_DeviceRetval"  # the same, kept on the device
ARG_OPS = frozenset({ARG_OP, DEVICE_ARG_OP})                # Node::IsArg
RETVAL_OPS = frozenset({RETVAL_OP, DEVICE_RETVAL_OP})       # Node::IsRetval
SOURCE_NODE, SINK_NODE = "_SOURCE", "_SINK"                 # Graph's implicit source and sink (NoOps)

# Ops TF handles specially in the graph (not listed as ordinary OpDefs or with special semantics).
REF_TYPE_OFFSET = 100  # DT_FLOAT_REF == DT_FLOAT + 100 in types.proto


@dataclass(frozen=True, slots=True)
class ArgSlot:
    """One flat input or output slot: which OpDef argument it belongs to, and its dtype."""

    arg_name: str
    index_in_arg: int
    dtype: int  # types_pb2 enum value; ref types keep their _REF value
    is_ref: bool


def lookup_op_def(op: str, library: function_pb2.FunctionDefLibrary | None = None) -> op_def_pb2.OpDef:
    """Return the OpDef for ``op``: a registered op, or a function in ``library`` (its signature)."""
    if library is not None:
        for fdef in library.function:
            if fdef.signature.name == op:
                return fdef.signature
    op_def = registered_op_def(op)
    if op_def is None:
        raise NotFoundError(
            f"Op type not registered '{op}' in binary running on this host. Make sure the Op and Kernel "
            "are registered in the binary running in this process.")
    return op_def


def _attr_value(node: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef, name: str):
    """An attr's value from the node, falling back to the OpDef's default (as TF's AddDefaultsToNodeDef)."""
    if name in node.attr:
        return node.attr[name]
    for attr in op_def.attr:
        if attr.name == name and attr.HasField("default_value"):
            return attr.default_value
    raise InvalidArgumentError(
        f"NodeDef missing attr '{name}' from Op<name={op_def.name}>; NodeDef: {{{{node {node.name}}}}}")


def _expand_args(node: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef,
                 args: Iterable[op_def_pb2.OpDef.ArgDef]) -> list[ArgSlot]:
    slots: list[ArgSlot] = []
    for arg in args:
        if arg.type_list_attr:
            types = list(_attr_value(node, op_def, arg.type_list_attr).list.type)
        else:
            count = 1
            if arg.number_attr:
                count = _attr_value(node, op_def, arg.number_attr).i
            dtype = arg.type if arg.type != types_pb2.DT_INVALID else _attr_value(node, op_def, arg.type_attr).type
            types = [dtype] * count
        for i, dtype in enumerate(types):
            if arg.is_ref and dtype < REF_TYPE_OFFSET:
                dtype += REF_TYPE_OFFSET
            slots.append(ArgSlot(arg.name, i, dtype, arg.is_ref or dtype > REF_TYPE_OFFSET))
    return slots


class SlotCache:
    """Memoised :func:`output_slots`/:func:`input_slots` for one graph: slots depend only on the op and
    the attrs its arguments name. Per graph, because library function names are not global."""

    def __init__(self) -> None:
        self._cache: dict[tuple, list[ArgSlot]] = {}

    def slots(self, node: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef, outputs: bool) -> list[ArgSlot]:
        args = op_def.output_arg if outputs else op_def.input_arg
        key: list = [outputs, node.op]
        for arg in args:
            for attr in (arg.type_attr, arg.number_attr, arg.type_list_attr):
                if attr:
                    value = node.attr.get(attr) if node.attr else None
                    key.append(value.SerializeToString() if value is not None else None)
        k = tuple(key)
        found = self._cache.get(k)
        if found is None:
            found = _expand_args(node, op_def, args)
            self._cache[k] = found
        return found


def output_slots(node: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef) -> list[ArgSlot]:
    """Flat, typed output slots of ``node`` (slot i is tensor ``node:i``)."""
    return _expand_args(node, op_def, op_def.output_arg)


def input_slots(node: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef) -> list[ArgSlot]:
    """Flat, typed data-input slots of ``node``."""
    return _expand_args(node, op_def, op_def.input_arg)


def input_arg_ranges(node: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef) -> dict[str, tuple[int, int]]:
    """TF's ``NameRangesForNode`` for inputs: argument name → [start, stop) of its flat slots. Needs
    only the count attrs (``number_attr``, ``type_list_attr``), not the dtypes."""
    ranges: dict[str, tuple[int, int]] = {}
    start = 0
    for arg in op_def.input_arg:
        if arg.number_attr:
            count = _attr_value(node, op_def, arg.number_attr).i
        elif arg.type_list_attr:
            count = len(_attr_value(node, op_def, arg.type_list_attr).list.type)
        else:
            count = 1
        ranges[arg.name] = (start, start + count)
        start += count
    return ranges


def base_dtype(dtype: int) -> int:
    """Strip the _REF offset (DT_FLOAT_REF → DT_FLOAT)."""
    return dtype - REF_TYPE_OFFSET if dtype > REF_TYPE_OFFSET else dtype


def dtype_name(dtype: int) -> str:
    """TF's enum name, e.g. ``DT_FLOAT``."""
    return types_pb2.DataType.Name(dtype)


# AttrValue's oneof field -> the attr type name TF's AttrValueHasType reports.
_VALUE_KIND = {"s": "string", "i": "int", "f": "float", "b": "bool", "type": "type", "shape": "shape",
               "tensor": "tensor", "func": "func"}
_LIST_FIELDS = ("s", "i", "f", "b", "type", "shape", "tensor", "func")


def dtype_string(dtype: int) -> str:
    """TF's DataTypeString: DT_FLOAT -> 'float', DT_FLOAT_REF -> 'float_ref'."""
    try:
        return types_pb2.DataType.Name(dtype)[3:].lower()
    except ValueError:
        return f"unknown dtype enum ({dtype})"


def _value_type(value) -> str | None:
    """The attr type ``value`` holds ('type', 'list(int)', ...); None for an empty list (fits any)."""
    kind = value.WhichOneof("value")
    if kind == "list":
        present = [f for f in _LIST_FIELDS if len(getattr(value.list, f))]
        return f"list({_VALUE_KIND[present[0]]})" if present else None
    return _VALUE_KIND.get(kind or "", kind)


def validate_attrs(node: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef) -> None:
    """TF's importer checks (ValidateNodeDef): every attr the op declares has a value of its declared type
    and, for type attrs, one of its allowed values; errors carry TF's wording."""
    for attr in op_def.attr:
        if attr.name not in node.attr:
            continue  # a missing attr is reported where it is needed (with its default applied first)
        value = node.attr[attr.name]
        if value.WhichOneof("value") == "placeholder":
            continue
        have = _value_type(value)
        if have is not None and have != attr.type:
            if have == "list(tensor)" and attr.type == "list(tensor)" or (
                    value.WhichOneof("value") == "list" and attr.type.startswith("list(") and have is None):
                continue
            raise InvalidArgumentError(
                f"AttrValue had value with type '{have}' when '{attr.type}' expected for attr "
                f"'{attr.name}'; NodeDef: {{{{node {node.name}}}}}")
        if value.WhichOneof("value") == "list" and not attr.type.startswith("list("):
            raise InvalidArgumentError(
                f"AttrValue had value with type 'list' when '{attr.type}' expected for attr "
                f"'{attr.name}'; NodeDef: {{{{node {node.name}}}}}")
        allowed = list(attr.allowed_values.list.type) if attr.HasField("allowed_values") else []
        if allowed and attr.type in ("type", "list(type)"):
            got = [value.type] if attr.type == "type" else list(value.list.type)
            for dt in got:
                if dt not in allowed:
                    raise InvalidArgumentError(
                        f"Value for attr '{attr.name}' of {dtype_string(dt)} is not in the list of allowed "
                        f"values: {', '.join(dtype_string(a) for a in allowed)}; NodeDef: "
                        f"{{{{node {node.name}}}}}")
