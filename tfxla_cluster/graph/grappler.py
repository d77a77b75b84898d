"""TF's own grappler, run on a GraphDef the way TF's function runtime runs it before the JIT passes.

Stage: optional pre-clustering rewrite. TF optimizes every function graph with grappler's meta
optimizer (function inlining, constant folding, dependency and arithmetic optimizers, pruning, ...)
before MarkForCompilation. Running the same C++ optimizer through ``tf_optimizer.OptimizeGraph`` on a
runtime-form GraphDef (``_Arg``/``_Retval``, calls not yet inlined) yields the graph TF's
``before_mark_for_compilation`` dump shows — same nodes, same names, same order — provided nodes are
placed first (done here), since some rewrites (the CPU remapper's fused MatMul/Conv2D) need devices.

Argument shapes: TF's function runtime optimizes the instantiated graph with the ``_Arg`` shapes of the
call known (the FunctionDef's ``arg_attr`` ``_output_shapes``), so shape-dependent rewrites fire
(no-op Reshape removal, AddN/Log1p rewrites, folds of Shape/Size of arguments). Through
``tf_optimizer.OptimizeGraph`` the same ``_Arg`` nodes come out of grappler's shape inference with
unknown dimensions (rank only), and none of those rewrites happen. So each non-resource ``_Arg`` with
a recorded shape is handed to grappler as a stand-in ``FakeParam`` of that dtype and shape (an input-less
op whose shape function gives exactly that shape; a unique attribute keeps CSE from merging two, and
a stand-in pruned for want of users is re-added), and turned back into the original ``_Arg`` after.
Checked against TF's own post-grappler graphs (RunMetadata ``post_optimization_graph``): equal node
for node, order included, on the functions where the rewrites differed.

Functional control flow and calls: TF's runtime lowers If/Case/While and inlines calls in its
PRE_PLACEMENT passes before grappler (tfxla_cluster/graph/lower_functional.py, done first by
``loader.runtime_rewrites``). Left to grappler's function optimizer through this entry point, the lowering
differs: e.g. constant folding anchors a branch constant on a new ``ConstantFoldingCtrl/<switch>_<port>``
Identity where TF's runtime keeps the lowering's ``pivot_t``/``pivot_f``.

XLA's global JIT level: TF's MetaOptimizer asks XLA's config registry whether auto-clustering is on for
every graph (``IsXlaGlobalJitOn``: the ConfigProto's ``global_jit_level`` overridden by ``--tf_xla_auto_jit``,
on for both single-GPU and general graphs). When it is, the default memory optimizer is left out
(``MemoryOptimizerEnabled``): no AddN of more than 2 inputs becomes a ``TemporaryVariable`` + ``AssignAdd``
chain when the estimated peak memory passes 80% of the device's (a 256 MiB CPU device: a large training
step), and no ``_grappler_relax_allocator_constraints`` on Assign nodes. TF's process reads its own
``TF_XLA_FLAGS``; ours may run with other flags than its environment, so :func:`runtime_config` hands the
same decision to TF's optimizer through the ConfigProto.
"""
from __future__ import annotations

import threading
import warnings
from typing import Callable, Sequence

from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2, rewriter_config_pb2

from tfxla_cluster import flags as flags_mod
from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.graph.devices import canonical_device
from tfxla_cluster.graph.function import OUTPUT_CONTROL_NODE, inline_calls
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OPS
from tfxla_cluster.tf_compat import inferred_output_shapes, optimize_graph


def default_fetch(graph_def: graph_pb2.GraphDef) -> list[str]:
    """What the graph computes: its ``_Retval`` nodes, else the nodes nothing consumes."""
    retvals = [n.name for n in graph_def.node if n.op in RETVAL_OPS]
    if retvals:
        return retvals
    consumed = {ref.lstrip("^").split(":")[0] for n in graph_def.node for ref in n.input}
    return [n.name for n in graph_def.node if n.name not in consumed]


def xla_auto_clustering_on(flags: "flags_mod.Flags | str | None" = None) -> bool:
    """meta_optimizer.cc ``IsXlaGlobalJitOn`` under ``flags`` (None: the environment's): XLA's global JIT
    level is at least ON_1 for single-GPU graphs and for general ones."""
    flags = flags_mod.Flags.resolve(flags)
    return all(flags_mod.global_jit_level_for_graph(flags, single_gpu) >= flags_mod.GlobalJitLevel.ON_1
               for single_gpu in (True, False))


def runtime_config(flags: "flags_mod.Flags | str | None" = None) -> config_pb2.ConfigProto:
    """The ConfigProto TF's function runtime optimizes a function graph with, under ``flags``: the
    default one, with auto-clustering's global JIT level when ``flags`` turn it on (module docstring)."""
    config = config_pb2.ConfigProto()
    if xla_auto_clustering_on(flags):
        config.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.ON_1
    return config


def run_grappler(graph_def: graph_pb2.GraphDef, fetch: Sequence[str] | None = None,
                 config: config_pb2.ConfigProto | None = None, *,
                 arg_shapes: bool = True, inline: bool = True,
                 keep: Sequence[str] = (), flags: "flags_mod.Flags | str | None" = None,
                 alongside: Callable[[], None] | None = None) -> graph_pb2.GraphDef:
    """Optimize ``graph_def`` with TF's meta optimizer, keeping ``fetch`` (default: see default_fetch).
    ``config`` (default: :func:`runtime_config` of ``flags``, None meaning the environment's flags).
    ``arg_shapes``: let grappler see the ``_Arg`` shapes, as TF's function runtime does (module docstring).
    ``inline``: inline function calls first with our inliner (TF's ``<call>/<node>`` names) — what TF's
    runtime item ends up with; grappler's own inlining through this entry point folds differently
    (e.g. ``inner(x, x + 1) - 1`` keeps ``sub`` as an Add of a folded Const).
    ``keep``: nodes grappler must keep though no fetch needs them — a function's control outputs, which
    TF's function runtime passes as its grappler item's ``keep_ops``. They change what the dependency
    optimizer removes, and so the order of the nodes it leaves (TF's node ids after grappler).
    ``alongside``: work for the calling thread while TF's optimizer runs (it releases the GIL) on a helper
    thread — the optimizer's input and output are the same either way."""
    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(inline_calls(graph_def) if inline else graph_def)
    # TF places a function's nodes before grappler runs; device-dependent rewrites (the remapper's
    # _FusedMatMul/_FusedConv2D on CPU) only fire on placed nodes.
    for nd in meta.graph_def.node:
        nd.device = canonical_device(nd.device)
    args = _args_as_shaped_stand_ins(meta.graph_def) if arg_shapes else {}
    meta.collection_def["train_op"].node_list.value.extend(fetch or default_fetch(graph_def))
    keep = _present(keep, meta.graph_def)
    if keep:  # every node a collection names is one grappler must keep (its item's keep_ops)
        meta.collection_def["tfxla_keep_ops"].node_list.value.extend(keep)
    config = config if config is not None else runtime_config(flags)
    crash = _tile_rewrite_divides_by_zero(meta.graph_def)
    if crash is not None:
        warnings.warn(f"TF's grappler would crash the process on node {crash!r} (SIGFPE: ArithmeticOptimizer's "
                      "ReplaceMulWithBroadcastByTile divides by its operand's zero dimension); running "
                      "grappler without the arithmetic optimizer on this graph", RuntimeWarning, stacklevel=2)
        config = _without_arithmetic_optimizer(config)
    try:
        out = _optimize(config, meta, alongside)
    except Exception as e:  # grappler reports through TF status exceptions: typed, first line, cause chained
        raise InvalidArgumentError(f"grappler failed: {str(e).splitlines()[0]}") from e
    if not out.HasField("versions"):
        out.versions.CopyFrom(graph_def.versions)
    _restore_pack_tile_ports(out, meta.graph_def)
    _keep_original_functions(out, graph_def)
    for nd in out.node:
        original = args.pop(nd.name, None)
        if original is not None and nd.op == _STAND_IN:
            device = nd.device
            nd.CopyFrom(original)
            nd.device = device
    for original in args.values():
        # A stand-in nothing used was pruned (TF keeps an unused _Arg: it is stateful). Fetching the
        # stand-ins instead would change grappler's node order, so put the argument back at the end.
        nd = out.node.add()
        nd.CopyFrom(original)
        nd.device = canonical_device(nd.device)
    return out


_STAND_IN = "FakeParam"

_PACK_TILE = "ArithmeticOptimizer/ReplacePackWithTileReshape_Tile_"


def _restore_pack_tile_ports(out: graph_pb2.GraphDef, given: graph_pb2.GraphDef) -> None:
    """Give each Tile of grappler's ``ReplacePackWithTileReshape`` (``Pack(x, x, ...)`` -> ``Reshape(Tile(x))``)
    its Pack's input back: TF 2.21's rewrite wires the Tile to ``x``'s node, dropping its output port, so
    ``Pack(top_k.indices, top_k.indices)`` tiled the values, a double for an int32 Tile, and the graph no longer
    imports (fuzz seed 320001442; in TF's own runtime that function's Pack was left alone)."""
    packs = {n.name: n for n in given.node if n.op == "Pack"}
    for nd in out.node:
        if nd.op != "Tile" or _PACK_TILE not in nd.name or not nd.input:
            continue
        scope, _, name = nd.name.partition(_PACK_TILE)
        pack = packs.get(scope + name)
        if pack is not None and pack.input and pack.input[0].split(":")[0] == nd.input[0].split(":")[0]:
            nd.input[0] = pack.input[0]

# Ops grappler's arithmetic optimizer can turn into Mul(x, C) with a folded constant C (x / C -> x * 1/C).
_TILE_REWRITE_OPS = frozenset({"Mul", "RealDiv", "Div"})


def _tile_rewrite_divides_by_zero(graph_def: graph_pb2.GraphDef) -> str | None:
    """The first node on which TF 2.21's grappler would die of SIGFPE, else None.

    arithmetic_optimizer.cc ``ReplaceMulWithBroadcastByTile``: ``Mul(x, C)`` with C a float constant whose
    elements are all 1 (vacuously so when C has none) and x not a Const becomes ``Tile(x, out / x)`` per
    dimension — an integer division by a zero dimension of x, which aborts TF's own process (plain
    ``tf.function`` of ``x / tf.zeros([0, 3])`` for x of shape [0, 1]). C is often made by grappler itself
    (constant folding, division -> reciprocal multiply), so this is conservative: a float Mul/RealDiv/Div
    whose first operand has a zero dimension, of the output's rank but not its shape, and whose second
    operand folds to a constant (only Consts at its sources)."""
    candidates = [n for n in graph_def.node
                  if n.op in _TILE_REWRITE_OPS and n.attr["T"].type == types_pb2.DT_FLOAT and len(n.input) >= 2]
    if not candidates or not any(_has_zero_dim(n) for n in graph_def.node):
        return None
    nodes = {n.name: n for n in graph_def.node}
    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph_def)
    meta.collection_def["train_op"].node_list.value.extend(n.name for n in candidates)
    shapes = _static_shapes(meta)
    if shapes is None:
        return None

    def shape_of(ref: str) -> tuple[int, ...] | None:
        name, _, port = ref.partition(":")
        found = shapes.get(name, [])
        k = int(port) if port else 0
        return found[k] if k < len(found) else None

    def folds(ref: str) -> bool:
        seen, stack = set(), [ref.lstrip("^").split(":")[0]]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            node = nodes.get(name)
            inputs = [i for i in node.input] if node is not None else []
            if node is None or (not inputs and node.op != "Const"):
                return False
            stack.extend(i.lstrip("^").split(":")[0] for i in inputs)
        return True

    for n in candidates:
        x, c, out = shape_of(n.input[0]), shape_of(n.input[1]), shape_of(n.name)
        if x is None or c is None or out is None or 0 not in x:
            continue
        if len(x) == len(c) == len(out) and x != out and nodes.get(n.input[0].split(":")[0]) is not None \
                and nodes[n.input[0].split(":")[0]].op != "Const" and folds(n.input[1]):
            return n.name
    return None


def _static_shapes(meta: meta_graph_pb2.MetaGraphDef) -> dict[str, list] | None:
    """Output shapes as the arithmetic optimizer would see them, None where its shape inference fails.

    The optimizer adds ReplaceMulWithBroadcastByTile only when ``GraphProperties::InferStatically``
    succeeds (``can_use_shapes``). Inference of the raw graph can fail — StridedSlice's shape function
    takes an int32 Const vector as a shape and rejects an empty slice of it (``Subshape must have computed
    start <= end``, fuzz seed 348001179) — so it is retried on the optimizer's own input, the graph after
    constant folding (which may have replaced the failing node); where that fails too, TF leaves the
    rewrite out and so does this check."""
    try:
        return inferred_output_shapes(meta)
    except Exception:  # noqa: BLE001 - TF's status errors: fall back to the constant-folded graph
        pass
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.append("constfold")  # only the stage that runs before the arithmetic optimizer
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    try:
        folded = meta_graph_pb2.MetaGraphDef()
        folded.CopyFrom(meta)
        folded.graph_def.CopyFrom(optimize_graph(config, meta))
        return inferred_output_shapes(folded)
    except Exception:  # noqa: BLE001 - inference fails there too: the optimizer skips the rewrite
        return None


def _has_zero_dim(node: node_def_pb2.NodeDef) -> bool:
    """A shape with a zero dimension in the node's own attributes (argument stand-in, Const value)."""
    if node.op == _STAND_IN:
        return any(d.size == 0 for d in node.attr["shape"].shape.dim)
    if node.op == "Const":
        return any(d.size == 0 for d in node.attr["value"].tensor.tensor_shape.dim)
    return False


def _without_arithmetic_optimizer(config: config_pb2.ConfigProto) -> config_pb2.ConfigProto:
    safe = config_pb2.ConfigProto()
    safe.CopyFrom(config)
    safe.graph_options.rewrite_options.arithmetic_optimization = rewriter_config_pb2.RewriterConfig.OFF
    return safe


def _optimize(config: config_pb2.ConfigProto, meta: meta_graph_pb2.MetaGraphDef,
              alongside: Callable[[], None] | None) -> graph_pb2.GraphDef:
    """TF's meta optimizer on ``meta``; with ``alongside``, on a helper thread while this thread runs it."""
    if alongside is None:
        return optimize_graph(config, meta)
    done: dict[str, object] = {}

    def optimize() -> None:
        try:
            done["graph"] = optimize_graph(config, meta)
        except BaseException as e:  # re-raised on the caller's thread
            done["error"] = e
    worker = threading.Thread(target=optimize, name="tfxla-grappler", daemon=True)
    worker.start()
    try:
        alongside()
    finally:
        worker.join()
    if "error" in done:
        raise done["error"]  # type: ignore[misc]
    return done["graph"]  # type: ignore[return-value]


def _keep_original_functions(out: graph_pb2.GraphDef, graph_def: graph_pb2.GraphDef) -> None:
    """A function the graph still calls (a ``_noinline`` or ``_XlaMustCompile`` callee) keeps its own
    definition: grappler hands back a rewritten copy under the same name (nodes reordered, debug info
    gone), which TF refuses to register beside the function the eager context already holds. Functions
    grappler added (specializations) stay."""
    original = {f.signature.name: f for f in graph_def.library.function}
    for fdef in out.library.function:
        if fdef.signature.name in original:
            fdef.CopyFrom(original[fdef.signature.name])


def _present(keep: Sequence[str], graph_def: graph_pb2.GraphDef) -> list[str]:
    """``keep`` as nodes of ``graph_def``: a kept call our inliner replaced is kept through the NoOp its
    control consumers wait on (TF's inliner keeps the caller itself as a NoOp of that name); a name in
    neither form is dropped (grappler's pruner fails on a kept node the graph lacks)."""
    names = {n.name for n in graph_def.node}
    out = []
    for name in keep:
        if name not in names:
            name = f"{name}/{OUTPUT_CONTROL_NODE}"
        if name in names:
            out.append(name)
    return out


def _args_as_shaped_stand_ins(graph_def: graph_pb2.GraphDef) -> dict[str, node_def_pb2.NodeDef]:
    """Replace (in place) each non-resource ``_Arg`` that has ``_output_shapes`` by a ``FakeParam`` with
    that dtype and shape; returns the original NodeDefs by name."""
    originals: dict[str, node_def_pb2.NodeDef] = {}
    for nd in graph_def.node:
        if nd.op != ARG_OP or nd.attr["T"].type == types_pb2.DT_RESOURCE:
            continue
        shapes = nd.attr["_output_shapes"].list.shape if "_output_shapes" in nd.attr else []
        if len(shapes) != 1:
            continue
        original = node_def_pb2.NodeDef()
        original.CopyFrom(nd)
        originals[nd.name] = original
        dtype, shape = nd.attr["T"].type, shapes[0]
        nd.ClearField("attr")
        nd.op = _STAND_IN
        nd.attr["dtype"].type = dtype
        nd.attr["shape"].shape.CopyFrom(shape)
        nd.attr["_tfxla_arg"].s = nd.name.encode()   # distinct attrs: CSE must not merge two arguments
    return originals
