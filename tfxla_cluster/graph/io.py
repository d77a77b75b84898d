"""Reading and writing GraphDef files: ``.pbtxt`` (text format), ``.pb`` (binary), SavedModel dirs.

Stage: import. Every reader returns a ``GraphDef`` proto (TF's own class, parsed by protobuf's own
``text_format``/``ParseFromString``) or raises one typed error whose message says what is wrong and
where (file, line and column for text syntax errors). Nothing here crashes on bad input.
"""
from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import message as pb_message
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from tfxla_cluster.errors import DataLossError, InvalidArgumentError, NotFoundError
from tfxla_cluster.graph.opdefs import dtype_string

TEXT_SUFFIXES = (".pbtxt", ".txt", ".pbtext", ".prototxt")


def read_graph_def(path: str | os.PathLike) -> graph_pb2.GraphDef:
    """Read a GraphDef from a ``.pbtxt``/``.pb`` file (format chosen by suffix, then by sniffing)."""
    p = Path(path)
    if p.is_dir():
        raise InvalidArgumentError(
            f"{p} is a directory; for a SavedModel use load_saved_model(path, signature) "
            "or the CLI's --signature option")
    if not p.exists():
        raise NotFoundError(f"{p}: No such file or directory")
    data = p.read_bytes()
    if not data.strip():
        raise InvalidArgumentError(f"{p}: file is empty, not a GraphDef")
    if p.suffix in TEXT_SUFFIXES or (p.suffix != ".pb" and _looks_like_text(data)):
        return parse_text(data, str(p))
    return parse_binary(data, str(p))


def check_importable(graph_def: graph_pb2.GraphDef, where: str = "<GraphDef>") -> None:
    """Raise InvalidArgumentError (``where: TF's message``) unless TF's own importer takes ``graph_def``.

    ``tf.graph_util.import_graph_def`` into a scratch graph: the checks TF applies to every GraphDef it is
    given — versions, registered ops, each node's attributes and its inputs' number and types against the
    op's signature, constant tensors against their dtype, references to missing nodes, cycles through
    non-loop nodes — so a GraphDef TF rejects is never half-processed by our own stages."""
    why = _tf_import_error(graph_def)
    if why:
        raise InvalidArgumentError(f"{where}: {why}")
    _check_function_bodies(graph_def, where)
    bodies = [graph_def.node] + [f.node_def for f in graph_def.library.function]
    for node in (n for body in bodies for n in body):
        # TF's Const kernel rejects a value whose dtype is not the node's; the importer does not look, and
        # grappler's constant folding CHECK-fails on it (the process aborts), so it is checked here.
        if node.op != "Const" or "value" not in node.attr or not node.attr["value"].HasField("tensor"):
            continue
        value, dtype = node.attr["value"].tensor.dtype, node.attr["dtype"].type
        if value != dtype:
            raise InvalidArgumentError(f"{where}: Node '{node.name}': Type mismatch between value "
                                       f"({dtype_string(value)}) and dtype ({dtype_string(dtype)})")


def _check_function_bodies(graph_def: graph_pb2.GraphDef, where: str) -> None:
    """TF's importer takes a library without looking into the functions' bodies; TF checks a body when it
    instantiates the function, and grappler (which inlines and folds bodies first) CHECK-fails on some bad
    ones — a Const without its ``value``. Each body, instantiated as TF's function runtime does
    (``_Arg`` → body → ``_Retval``), goes through TF's importer here. Generic functions (type parameters
    in the signature) are instantiated only by their callers and are left to them."""
    from tfxla_cluster.graph.function import instantiate  # function.py reads no files: no cycle at import

    for fdef in graph_def.library.function:
        if fdef.signature.attr:
            continue
        try:
            body = instantiate(fdef, graph_def.library)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{where}: {e.message}") from None
        body.versions.CopyFrom(graph_def.versions)
        why = _tf_import_error(body)
        if why:
            raise InvalidArgumentError(f"{where}: Function '{fdef.signature.name}': {why}")


def _tf_import_error(graph_def: graph_pb2.GraphDef) -> str | None:
    """The first line of what ``tf.graph_util.import_graph_def`` (into a scratch graph) says against
    ``graph_def``; None when it imports."""
    import tensorflow as tf

    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except (ValueError, TypeError, tf.errors.OpError) as e:  # what the importer raises for a bad graph
        detail = (getattr(e, "message", None) or str(e)).strip().splitlines()
        return detail[0] if detail else type(e).__name__
    return None


def _looks_like_text(data: bytes) -> bool:
    head = data[:4096]
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def parse_text(data: bytes | str, where: str = "<text>") -> graph_pb2.GraphDef:
    """Parse protobuf text format. Syntax errors name the line and column."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:  # replacing the bytes would change names and tensor contents silently
        raise InvalidArgumentError(f"{where}: not a valid GraphDef in text format: not UTF-8 text "
                                   f"(byte 0x{data[e.start]:02x} at offset {e.start})") from None
    graph_def = graph_pb2.GraphDef()
    try:
        text_format.Parse(text, graph_def)
    except text_format.ParseError as e:
        # protobuf's message is "line:col : detail"; keep it and name the file.
        raise InvalidArgumentError(f"{where}: not a valid GraphDef in text format: {e}") from None
    _check_not_empty(graph_def, where)
    return graph_def


def parse_binary(data: bytes, where: str = "<bytes>") -> graph_pb2.GraphDef:
    """Parse a binary GraphDef. A truncated or foreign file is DATA_LOSS, as in TF's ReadBinaryProto."""
    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (pb_message.DecodeError, RuntimeError, ValueError) as e:
        raise DataLossError(f"{where}: can't parse as a binary GraphDef (truncated or not a GraphDef: {e})") \
            from None
    _check_not_empty(graph_def, where)
    return graph_def


def _check_not_empty(graph_def: graph_pb2.GraphDef, where: str) -> None:
    # A binary file of another proto type often "parses" into a GraphDef with only unknown fields.
    if not graph_def.node and not graph_def.library.function:
        raise InvalidArgumentError(f"{where}: parsed, but contains no nodes and no functions; not a GraphDef?")


def write_graph_def(graph_def: graph_pb2.GraphDef, path: str | os.PathLike) -> Path:
    """Write as text (``.pbtxt`` and other text suffixes) or binary (anything else)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix in TEXT_SUFFIXES:
        p.write_text(text_format.MessageToString(graph_def))
    else:
        p.write_bytes(graph_def.SerializeToString(deterministic=True))
    return p


def load_saved_model(path: str | os.PathLike, signature: str = "serving_default"):
    """Load a SavedModel and return the ConcreteFunction of ``signature``.

    The caller turns it into a GraphDef with :func:`tfxla_cluster.graph.loader.graph_def_from_concrete`.
    """
    import tensorflow as tf

    p = Path(path)
    if not (p / "saved_model.pb").exists() and not (p / "saved_model.pbtxt").exists():
        raise NotFoundError(f"{p}: not a SavedModel directory (no saved_model.pb)")
    try:
        loaded = tf.saved_model.load(str(p))
    except Exception as e:  # TF raises many types here: one typed error with its first line, cause chained
        raise InvalidArgumentError(f"{p}: can't load SavedModel: {str(e).splitlines()[0]}") from e
    sigs = getattr(loaded, "signatures", {})
    if signature not in sigs:
        raise NotFoundError(
            f"{p}: SavedModel has no signature '{signature}'; it has: {', '.join(sorted(sigs)) or '(none)'}")
    return sigs[signature]
