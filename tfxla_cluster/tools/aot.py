"""``tfxla-cluster aot``: tfcompile. A GraphDef + a ``tf2xla.Config`` → ``NAME.o`` + ``NAME.h``.

Stage: the whole tfcompile pipeline, as TF's ``tf2xla.cc`` runs it:

1. read the graph (``.pb``/``.pbtxt``, function calls inlined) and the config (text proto);
2. check the config against the graph: every feed and fetch names an existing node and output, every
   feed's type and shape agree with what the graph knows, every variable is a ``VarHandleOp``;
3. rewrite (``RewriteAndPruneGraph``): feed tensors become ``_Arg`` nodes (index = feed order), variables
   become resource ``_Arg`` nodes after them, fetches get ``_Retval`` nodes (index = fetch order), and
   the graph is pruned to what the fetches need (every feed and variable stays an argument);
4. lower the rest as one cluster — exactly how a ``jit_compile=True`` function is lowered
   (``tf2hlo.lower_cluster`` over a graph of ``_Arg``/``_Retval`` nodes): results are the fetches, then
   the new value of every variable the graph writes (in config order); as in tf2xla.cc, a variable's
   ``readonly`` must match whether the graph writes it, and no fetch may fold to a constant;
5. run our XLA:CPU pipeline, then ``codegen.aot.compile_object``;
6. write the object and a header whose comments name each argument's and result's dtype and shape.

Every bad input (unreadable file, a feed naming no node, a fetch out of range, a shape that disagrees
with the graph, a feed that must be a compile-time constant, a wrong ``readonly``) is an
``InvalidArgumentError``; a constant fetch is tf2xla's ``UnimplementedError``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tfxla_cluster.errors import InvalidArgumentError, NotFoundError, UnimplementedError


@dataclass
class TensorSpec:
    """One argument or result of the compiled function."""

    name: str
    origin: str             # "feed x:0", "fetch y:0", "variable v", "updated variable v"
    dtype: int              # TF DataType enum
    dims: tuple[int, ...]
    nbytes: int = 0

    @property
    def dtype_name(self) -> str:
        from tensorflow.core.framework import types_pb2

        return types_pb2.DataType.Name(self.dtype)


@dataclass
class AotResult:
    object_path: Path
    header_path: Path
    args: list[TensorSpec]
    results: list[TensorSpec]
    obj: object             # codegen.aot.AotObject


# ---------------------------------------------------------------------------------------------- config
def read_config(path: str | os.PathLike):
    """A ``tensorflow.compiler.tf2xla.tf2xla_pb2.Config`` from a text proto (or binary ``.pb``) file."""
    from google.protobuf import message, text_format
    from tensorflow.compiler.tf2xla import tf2xla_pb2

    p = Path(path)
    if not p.is_file():
        raise NotFoundError(f"{p}: No such file")
    config = tf2xla_pb2.Config()
    data = p.read_bytes()
    try:
        if p.suffix == ".pb":
            config.ParseFromString(data)
        else:
            text_format.Parse(data.decode("utf-8", errors="replace"), config)
    except (text_format.ParseError, message.DecodeError) as e:
        raise InvalidArgumentError(f"{p}: not a tf2xla.Config: {e}") from None
    if not config.fetch:
        raise InvalidArgumentError(f"{p}: the config has no fetch (tfcompile needs at least one)")
    return config


def _tensor_text(tid) -> str:
    return f"{tid.node_name}:{tid.output_index}"


def _dims_text(dims) -> str:
    if dims is None:
        return "<unknown rank>"
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def _proto_dims(shape_proto, where: str) -> tuple[int, ...]:
    dims = tuple(int(d.size) for d in shape_proto.dim)
    if shape_proto.unknown_rank or any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{where}: config shape {_dims_text(dims)} is not fully defined")
    return dims


def _compatible(config_dims: tuple[int, ...], graph_dims) -> bool:
    if graph_dims is None:
        return True
    return len(graph_dims) == len(config_dims) and all(g is None or g == c for g, c in zip(graph_dims, config_dims))


# ---------------------------------------------------------------------------------------------- rewrite
def rewrite_for_aot(graph_def, config):
    """(pruned GraphDef with _Arg/_Retval nodes, feed specs, fetch specs, variable specs): the checks of
    tfcompile's ``ValidateConfig`` and its ``RewriteAndPruneGraph``."""
    from tfxla_cluster.graph import Graph

    graph = Graph(graph_def, assign_devices=False)
    feeds = _check_feeds(graph, config)
    variables = _check_variables(graph, config)
    fetches = _check_fetches(graph, config)
    return _rewritten(graph_def, config, feeds, variables, fetches), feeds, fetches, variables


def _node_output(graph, tid, what: str, k: int):
    node = graph.get(tid.node_name)
    if node is None:
        raise InvalidArgumentError(f"{what} {k} ({_tensor_text(tid)}): the graph has no node named "
                                   f"'{tid.node_name}'")
    if not 0 <= tid.output_index < len(node.outputs):
        raise InvalidArgumentError(f"{what} {k} ({_tensor_text(tid)}): output index {tid.output_index} is out "
                                   f"of range; node '{node.name}' ({node.op}) has {len(node.outputs)} outputs")
    return node


def _type_name(dtype: int) -> str:
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(dtype)


def _check_feeds(graph, config) -> list[TensorSpec]:
    from tfxla_cluster.graph.opdefs import base_dtype

    specs: list[TensorSpec] = []
    seen: set[tuple[str, int]] = set()
    for k, feed in enumerate(config.feed):
        where = f"feed {k} ({_tensor_text(feed.id)})"
        node = _node_output(graph, feed.id, "feed", k)
        key = (feed.id.node_name, feed.id.output_index)
        if key in seen:
            raise InvalidArgumentError(f"{where} is fed twice")
        seen.add(key)
        graph_type = base_dtype(node.outputs[feed.id.output_index].dtype)
        dtype = feed.type or graph_type
        if dtype != graph_type:
            raise InvalidArgumentError(f"{where}: config type {_type_name(dtype)} disagrees with the graph's "
                                       f"{_type_name(graph_type)}")
        dims = _proto_dims(feed.shape, where)
        graph_dims = _graph_dims(graph, node, feed.id.output_index)
        if not _compatible(dims, graph_dims):
            raise InvalidArgumentError(f"{where}: config shape {_dims_text(dims)} disagrees with the graph's "
                                       f"{_dims_text(graph_dims)}")
        specs.append(TensorSpec(feed.name or feed.id.node_name, f"feed {_tensor_text(feed.id)}", dtype, dims))
    return specs


def _check_variables(graph, config) -> list[TensorSpec]:
    from tfxla_cluster.graph.shapes import shape_from_proto

    specs: list[TensorSpec] = []
    seen: set[str] = set()
    for j, var in enumerate(config.variable):
        where = f"variable {j} ('{var.node_name}')"
        node = graph.get(var.node_name)
        if node is None:
            raise InvalidArgumentError(f"variable {j}: the graph has no node named '{var.node_name}'")
        if node.op != "VarHandleOp":
            raise InvalidArgumentError(f"variable {j}: node '{var.node_name}' is a {node.op}, not a VarHandleOp")
        if var.node_name in seen:
            raise InvalidArgumentError(f"{where} is listed twice")
        seen.add(var.node_name)
        if not var.type:
            raise InvalidArgumentError(f"{where}: the config gives no type")
        graph_type = node.attr("dtype").type if node.has_attr("dtype") else var.type
        if var.type != graph_type:
            raise InvalidArgumentError(f"{where}: config type {_type_name(var.type)} disagrees with the graph's "
                                       f"{_type_name(graph_type)}")
        dims = _proto_dims(var.shape, where)
        graph_dims = shape_from_proto(node.attr("shape").shape) if node.has_attr("shape") else None
        if not _compatible(dims, graph_dims):
            raise InvalidArgumentError(f"{where}: config shape {_dims_text(dims)} disagrees with the graph's "
                                       f"{_dims_text(graph_dims)}")
        specs.append(TensorSpec(var.name or var.node_name, f"variable {var.node_name}", var.type, dims))
    return specs


def _check_fetches(graph, config) -> list[TensorSpec]:
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.graph.opdefs import base_dtype

    specs: list[TensorSpec] = []
    for k, fetch in enumerate(config.fetch):
        node = _node_output(graph, fetch.id, "fetch", k)
        dtype = base_dtype(node.outputs[fetch.id.output_index].dtype)
        if dtype == types_pb2.DT_RESOURCE:
            raise InvalidArgumentError(f"fetch {k} ({_tensor_text(fetch.id)}) is a resource handle")
        # The dimensions are known once the graph is lowered.
        specs.append(TensorSpec(fetch.name or fetch.id.node_name, f"fetch {_tensor_text(fetch.id)}", dtype, ()))
    return specs


def _rewritten(graph_def, config, feeds: list[TensorSpec], variables: list[TensorSpec],
               fetches: list[TensorSpec]):
    """The graph with an _Arg per feed (index = feed order) and per variable (after the feeds, replacing
    the VarHandleOp), a _Retval per fetch, pruned to what the fetches need."""
    from tensorflow.core.framework import graph_pb2, types_pb2

    from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP

    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    renames: dict[tuple[str, int], str] = {}
    for k, feed in enumerate(config.feed):
        renames[(feed.id.node_name, feed.id.output_index)] = _add_arg(out, f"_aot_feed_{k}", k, feeds[k].dtype,
                                                                      feeds[k].dims)
    var_nodes = {var.node_name for var in config.variable}
    for j, var in enumerate(config.variable):
        renames[(var.node_name, 0)] = _add_arg(out, f"_aot_variable_{j}", len(feeds) + j, types_pb2.DT_RESOURCE,
                                               None)
    fed_nodes = {node for node, _ in renames}
    for nd in graph_def.node:
        if nd.name in var_nodes:
            continue  # the VarHandleOp itself is replaced
        copy = out.node.add()
        copy.CopyFrom(nd)
        del copy.input[:]
        for inp in nd.input:
            if inp.startswith("^") and inp[1:] in fed_nodes:
                continue  # a fed node is replaced; ordering after it means nothing any more
            copy.input.append(_renamed(inp, renames))
    for k, fetch in enumerate(config.fetch):
        tensor = renames.get((fetch.id.node_name, fetch.id.output_index), _tensor_text(fetch.id))
        r = out.node.add(name=f"_aot_fetch_{k}", op=RETVAL_OP, input=[tensor])
        r.attr["T"].type = fetches[k].dtype
        r.attr["index"].i = k
    # Every feed and variable stays an argument, needed or not: the C signature follows the config.
    return _prune(out, [n.name for n in out.node if n.op in (ARG_OP, RETVAL_OP)])


def _graph_dims(graph, node, slot: int):
    if node.op in ("Placeholder", "PlaceholderV2") and node.has_attr("shape"):
        from tfxla_cluster.graph.shapes import shape_from_proto

        return shape_from_proto(node.attr("shape").shape)
    shapes = graph.output_shapes(node)
    return shapes[slot] if slot < len(shapes) else None


def _add_arg(gd, name: str, index: int, dtype: int, dims) -> str:
    from tfxla_cluster.graph.opdefs import ARG_OP

    arg = gd.node.add(name=name, op=ARG_OP)
    arg.attr["T"].type = dtype
    arg.attr["index"].i = index
    if dims is not None:
        shape = arg.attr["_output_shapes"].list.shape.add()
        for d in dims:
            shape.dim.add(size=d)
    return name


def _renamed(inp: str, renames: dict[tuple[str, int], str]) -> str:
    if inp.startswith("^"):
        return inp
    node, sep, idx = inp.rpartition(":")
    key = (node, int(idx)) if sep and idx.isdigit() else (inp, 0)
    return renames.get(key, inp)


def _prune(gd, roots: list[str]):
    """Keep the ancestors of ``roots`` (data and control inputs), in the original order."""
    from tensorflow.core.framework import graph_pb2

    by_name = {n.name: n for n in gd.node}
    keep: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        for inp in by_name[name].input:
            src = inp.lstrip("^").rpartition(":")
            src_name = src[0] if src[1] and src[2].isdigit() else inp.lstrip("^")
            if src_name not in by_name:
                raise InvalidArgumentError(f"node '{name}' has input '{inp}', which is not in the graph")
            stack.append(src_name)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(gd.versions)
    out.library.CopyFrom(gd.library)
    out.node.extend(n for n in gd.node if n.name in keep)
    for n in out.node:
        if n.op in ("Placeholder", "PlaceholderV2"):
            raise InvalidArgumentError(f"the fetches need placeholder '{n.name}', which the config does not feed")
    return out


# ---------------------------------------------------------------------------------------------- compile
def lower_for_aot(graph_def, config, name: str):
    """(LoweredCluster, arg specs, result specs) — results are the fetches, then updated variables."""
    from tfxla_cluster.graph import Graph
    from tfxla_cluster.hlo.shape import Shape
    from tfxla_cluster.tf2hlo import types
    from tfxla_cluster.tf2hlo.lower import lower_cluster

    pruned, args, fetches, variables = rewrite_for_aot(graph_def, config)
    graph = Graph(pruned, assign_devices=False)
    arg_shapes: dict[int, object] = {k: a.dims for k, a in enumerate(args)}
    for j, v in enumerate(variables):
        arg_shapes[len(args) + j] = (types.element_type(v.dtype), v.dims)
    try:
        lowered = lower_cluster(graph, [n.name for n in graph.op_nodes()], arg_shapes=arg_shapes, name=name)
    except InvalidArgumentError as e:
        # A feed reaching an operand that must be known at compile time (a shape, an axis): say it in
        # the config's terms, not the lowering API's (const_args).
        m = re.match(r"Input (\d+) to node `([^`]*)` with op (\S+) must be a compile-time constant, but cluster "
                     r"input \d+ \(_aot_feed_(\d+):0\)", e.message)
        if not m:
            raise
        k = int(m[4])
        raise InvalidArgumentError(f"feed {k} ({args[k].origin[5:]}) reaches input {m[1]} of node '{m[2]}' "
                                   f"({m[3]}), which must be a compile-time constant; it cannot be fed") from None
    root = lowered.module.entry.root
    constant = sum(1 for out in lowered.outputs if out.kind == "retval" and _is_constant(root.operands[out.index]))
    if constant:
        # tf2xla.cc's words: a fetch that folds to a constant is a configuration mistake for tfcompile.
        raise UnimplementedError(f"Conversion from TensorFlow graph to XLA resulted in {constant} constant "
                                 "results.  The configuration of the output args (i.e. fetch ids) is probably wrong.")
    results: list[TensorSpec] = []
    updated = {out.resource_input: out for out in lowered.outputs if out.kind == "resource"}
    for j, var in enumerate(config.variable):
        if var.readonly == (len(args) + j in updated):  # tf2xla.cc's check, both ways
            raise InvalidArgumentError(
                f'Variable "{var.node_name}" is marked as {"" if var.readonly else "not "}readonly, but is '
                f'{"" if len(args) + j in updated else "not "}modified by the computation.')
    for out in lowered.outputs:
        shape: Shape = root.shape.tuple_shapes[out.index]
        if out.kind == "retval":
            spec = fetches[out.retval_index]
            spec.dims = shape.dimensions
            results.append(spec)
        elif out.kind == "resource":
            j = out.resource_input - len(args)
            var = variables[j]
            results.append(TensorSpec(var.name, f"updated variable {config.variable[j].node_name}", var.dtype,
                                      var.dims))
    return lowered, args + variables, results


def _is_constant(instr) -> bool:
    """Whether a lowered fetch is a compile-time constant (tf2xla's ``is_constant`` output): a literal,
    or the broadcast scalar literal a uniform host constant becomes."""
    from tfxla_cluster.hlo.opcode import HloOpcode

    if instr.opcode is HloOpcode.BROADCAST:
        instr = instr.operands[0]
    return instr.opcode is HloOpcode.CONSTANT


def compile_aot(graph_path: str | os.PathLike, config_path: str | os.PathLike, name: str,
                out_dir: str | os.PathLike, *, target_cpu: str | None = None, target_features: str | None = None,
                threads: int = 1) -> AotResult:
    """The whole ``tfxla-cluster aot`` command: writes ``out_dir/NAME.o`` and ``out_dir/NAME.h``."""
    from tfxla_cluster.codegen.aot import check_c_identifier, compile_object
    from tfxla_cluster.graph import load_graph_def
    from tfxla_cluster.passes.pipeline import optimize

    check_c_identifier(name)
    graph_def = load_graph_def(graph_path)
    config = read_config(config_path)
    lowered, args, results = lower_for_aot(graph_def, config, name)
    module, _ = optimize(lowered.module, cluster=name)
    obj = compile_object(module, name, cpu=target_cpu or None, features=target_features, threads=threads)
    for spec, n in zip(args, obj.arg_bytes):
        spec.nbytes = n
    for spec, n in zip(results, obj.result_bytes):
        spec.nbytes = n
    out = Path(out_dir)
    object_path, header_path = out / f"{name}.o", out / f"{name}.h"
    try:  # a file where the directory should be, no permission, a name too long for the file system
        out.mkdir(parents=True, exist_ok=True)
        object_path.write_bytes(obj.object_code)
        header_path.write_text(render_header(name, args, results, obj, source=str(graph_path)))
    except OSError as e:
        raise InvalidArgumentError(f"--out-dir {out}: cannot write {name}.o and {name}.h there: "
                                   f"{e.strerror or e}") from None
    return AotResult(object_path, header_path, args, results, obj)


_C_TYPES = {"DT_FLOAT": "float", "DT_DOUBLE": "double", "DT_INT32": "int32_t", "DT_INT64": "int64_t",
            "DT_INT8": "int8_t", "DT_INT16": "int16_t", "DT_UINT8": "uint8_t", "DT_UINT16": "uint16_t",
            "DT_UINT32": "uint32_t", "DT_UINT64": "uint64_t", "DT_BOOL": "bool (1 byte)",
            "DT_HALF": "IEEE half (uint16_t bits)", "DT_BFLOAT16": "bfloat16 (uint16_t bits)"}


def render_header(name: str, args: list[TensorSpec], results: list[TensorSpec], obj, *, source: str = "") -> str:
    """The C header: the issue's declarations, with tfcompile-style comments on every buffer."""
    guard = f"TFXLA_AOT_{name.upper()}_H_"

    def describe(kind: str, k: int, spec: TensorSpec) -> str:
        ctype = _C_TYPES.get(spec.dtype_name, "")
        return (f"//   {kind} {k}: \"{spec.name}\" ({spec.origin}) {spec.dtype_name} {_dims_text(spec.dims)}, "
                f"{spec.nbytes} bytes{', ' + ctype if ctype else ''}")

    threading = "single-threaded" if obj.threads == 1 else f"up to {obj.threads} threads"
    lines = [
        f"// Generated by tfxla-cluster aot{' from ' + source if source else ''}. Do not edit.",
        f"// Target: {obj.triple}, cpu {obj.cpu}; {threading}.",
        "// Link with: cc main.c " + f"{name}.o -lm -lpthread",
        "//",
        f"// {name}_run(args, results) runs the model once: args[k] and results[k] point at caller-allocated,",
        "// dense row-major buffers of the sizes below (they must not overlap). It allocates its scratch",
        f"// memory ({obj.arena_bytes} bytes) per call, so concurrent calls are safe; it returns 0 on success",
        "// and 1 when that allocation fails.",
        "//",
        "// Arguments (feeds in config order, then variables):",
        *[describe("arg", k, a) for k, a in enumerate(args)],
        "// Results (fetches in config order, then the new value of each variable not marked readonly):",
        *[describe("result", k, r) for k, r in enumerate(results)],
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        f"#define {name}_NUM_ARGS {len(args)}",
        f"#define {name}_NUM_RESULTS {len(results)}",
        f"extern const int64_t {name}_arg_bytes[{name}_NUM_ARGS];",
        f"extern const int64_t {name}_result_bytes[{name}_NUM_RESULTS];",
        f"int {name}_run(const void* const* args, void* const* results);  /* 0 on success */",
        "",
        "#ifdef __cplusplus",
        "}  // extern \"C\"",
        "#endif",
        "",
        f"#endif  // {guard}",
        "",
    ]
    return "\n".join(lines)
