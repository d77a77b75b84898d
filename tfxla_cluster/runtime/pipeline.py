"""The driver: one straight line of named stages from a traced function to the program TF runs.

Stage: runtime (TF's JIT pass registration plus the function runtime). :func:`compile_concrete` runs

1. **import** — the concrete function becomes the graph TF's JIT passes see (runtime form; TF's
   grappler with nodes placed; CloneConstantsForBetterClustering);
2. **mark** — clusters: ``jit_compile=True`` the whole body is one must-compile cluster (TF's error,
   listing every uncompilable node, if it can't be); ``False`` none; ``None`` TF's auto-clustering
   under ``TF_XLA_FLAGS``;
3. **encapsulate** — each cluster becomes one launch node (:mod:`.encapsulate`) backed by a
   :class:`~.launcher.Launcher` (the native ``TfxlaLaunch`` op where it can, else a py-func);
4. **TF import** — TF imports the rewritten graph as a pruned function; everything outside clusters
   runs on TF's kernels;

and then, per cluster and signature at its first launch, as TF's ``_XlaCompile`` does:
5. **lower** → **optimise** → **compile** (:meth:`.launcher.Launcher.compile_signature`);
6. **launch** — the compiled code runs on the launch node's inputs.

When a function's rewritten graph first runs eagerly, steps 5 of the clusters whose signatures the graph
already tells start ahead of their launches on idle cores (:mod:`.ahead`); each launch takes its cluster's
compile, with the same code, logs and errors as if it had compiled there.

:func:`compile_graph` is the same line from step 3 for a graph that is already marked (the report's
GraphDefs). Each stage records its time under its name in :mod:`tfxla_cluster.compile_profile`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from tensorflow.core.framework import graph_pb2

from tfxla_cluster import compile_profile
from tfxla_cluster._gc import gc_paused
from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP
from tfxla_cluster.runtime.encapsulate import ClusterSignature
from tfxla_cluster.runtime.launcher import Launcher

#: The py-func body of a launcher's launch node: ``body(launcher)(*tensors) -> [tensor, ...]``.
PyLaunch = Callable[[Launcher], Callable[..., list]]

# Ops whose output shape depends on input *values*. TF's XLA compiles them with bounded dynamic
# dimensions, and so do we when every use of their results inside the function is one the lowering's
# dynamic padder takes (bounded_dynamic_problems); otherwise a must-compile function holding one is
# compiled as several clusters with these ops run on TF's kernels in between (_split_at_dynamic_shapes).
DATA_DEPENDENT_SHAPE_OPS = frozenset({"Unique", "UniqueV2", "UniqueWithCounts", "UniqueWithCountsV2", "Where"})


@dataclass
class Program:
    """What the pipeline made of one graph: its clustering, launchers, and the function TF runs."""

    graph: Graph                                  # the graph that was clustered
    clusters: dict[str, list[str]]
    mark_result: Any                              # jit.MarkResult (None without auto-clustering)
    graph_def: graph_pb2.GraphDef                 # the rewritten graph (one launch node per cluster)
    signatures: list[ClusterSignature]
    launchers: dict[str, Launcher]
    fn: Any                                       # TF's pruned function running graph_def
    num_outputs: int                              # data outputs of fn (control outputs come after)
    keep: list = field(default_factory=list)      # py-func objects: TF's registry holds weak references


# ------------------------------------------------------------------------------------------ the driver
def compile_concrete(concrete, *, jit_compile: bool | None, flags, grappler: bool, backend: str,
                     py_launch: PyLaunch, on_native: Callable[[Launcher], None] | None = None,
                     profile: "compile_profile.CompileProfile | None" = None) -> Program:
    """Steps 1–4 of the module docstring for a ``ConcreteFunction``; ``py_launch`` makes the py-func
    body of a launch node, ``on_native(launcher)`` is called for each cluster bound to the native op."""
    from tfxla_cluster.flags import Flags
    from tfxla_cluster.runtime import compile_cache  # also: clustering's XLA kernel list from its disk cache

    with compile_profile.collecting(profile), gc_paused():
        flags = Flags.resolve(flags)
        gd, graph = import_concrete(concrete, jit_compile=jit_compile, flags=flags, grappler=grappler)
        with compile_profile.stage("clustering"):
            if jit_compile is True:   # with the persistent cache on, a second process skips the check
                clusters, mark_result = compile_cache.must_compile_checked(
                    gd, flags, lambda: mark(concrete, graph, gd, jit_compile, flags),
                    name=concrete.function_def.signature.name)
            else:   # with the persistent cache on, a second process replays the first one's clustering
                clusters, mark_result = compile_cache.clustered(
                    gd, flags, lambda state: mark(concrete, graph, gd, jit_compile, flags, state=state),
                    jit_compile=jit_compile, name=concrete.function_def.signature.name)
        args = sorted((n for n in gd.node if n.op == ARG_OP), key=lambda n: n.attr["index"].i)
        rets = sorted((n for n in gd.node if n.op == RETVAL_OP), key=lambda n: n.attr["index"].i)
        return compile_graph(graph, clusters, flags=flags, backend=backend, must_compile=jit_compile is True,
                             py_launch=py_launch, on_native=on_native, mark_result=mark_result,
                             feeds=[a.name for a in args], fetches=[f"{r.name}:0" for r in rets],
                             run_ops=list(concrete.function_def.control_ret.values()))


def compile_graph(graph: Graph, clusters: dict[str, list[str]], *, flags, backend: str, must_compile: bool,
                  py_launch: PyLaunch, feeds: list[str], fetches: list[str], run_ops: list[str],
                  on_native: Callable[[Launcher], None] | None = None, mark_result: Any = None) -> Program:
    """Steps 3–4 for a marked graph: launch nodes, then TF's function with ``feeds`` (input node
    names) in, ``fetches`` (tensor names) out, and ``run_ops`` (nodes that must run: the function's
    control outputs; a clustered one runs as its launch node). ``on_native`` None keeps every
    cluster on the py-func launch."""
    from tfxla_cluster.flags import Flags

    flags = Flags.resolve(flags)
    with compile_profile.stage("encapsulation"):
        rewritten, signatures, launchers, keep = encapsulate_clusters(
            graph, clusters, flags=flags, backend=backend, must_compile=must_compile, py_launch=py_launch,
            on_native=on_native)
    with compile_profile.stage("tf-import"):
        member_of = {m: sig.control_node or sig.name for sig in signatures for m in sig.members}
        fn = import_into_tf(rewritten, feeds, fetches, [member_of.get(n, n) for n in run_ops])
    return Program(graph, clusters, mark_result, rewritten, signatures, launchers, fn, len(fetches), keep)


# ------------------------------------------------------------------------------------------ the stages
def import_concrete(concrete, *, jit_compile: bool | None, flags, grappler: bool) -> tuple[graph_pb2.GraphDef, Graph]:
    """Step 1: (the GraphDef, its Graph) TF's JIT passes would see for ``concrete``."""
    from tfxla_cluster import flags as flags_mod
    from tfxla_cluster.graph.loader import graph_def_from_concrete, with_resource_handle_data
    from tfxla_cluster.jit.clone_constants import with_cloned_constants

    stage = compile_profile.stage
    jit_on = jit_compile is True or flags_mod.global_jit_level_for_graph(flags, False) != \
        flags_mod.GlobalJitLevel.OFF
    # A must-compile function is compiled from its own body, as TF's XlaCompiler instantiates
    # it: grappler never sees it, so functional If/While/Case stay functional (grappler's
    # inlining would lower them to Switch/Merge, which have no XLA kernels).
    if grappler and jit_compile is not True:
        from tfxla_cluster.graph.loader import control_outputs, runtime_rewrites
        from tfxla_cluster.runtime import compile_cache

        imported: list = []   # (GraphDef, Graph) of a fresh rewrite: its Graph is not imported again

        def convert() -> graph_pb2.GraphDef:
            return with_resource_handle_data(graph_def_from_concrete(concrete, inline=False), concrete)

        def rewrite(before: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
            out = runtime_rewrites(before, concrete, flags,
                                   alongside=lambda lowered: _alongside_grappler(lowered, flags, jit_on))
            with stage("import"):
                imported[:] = with_cloned_constants(out, jit_on=jit_on)
            return imported[0]
        # With the persistent cache on, a second process takes the rewritten graph (constants cloned) from it,
        # keyed by the traced function (then it skips the conversion too) or by the graph, with TF's version
        # and the flags: grappler's output for the same graph is the same graph.
        keep = control_outputs(concrete)
        variant = f"clone_constants={jit_on}"
        with stage("grappler"):
            key = _function_key(concrete, keep, flags, variant)
        gd, cached = compile_cache.rewritten_function_graph(key, flags, convert, rewrite, keep,
                                                            concrete.function_def.signature.name, variant)
        if imported and imported[0] is gd:
            return gd, imported[1]
        with stage("import"):
            # A graph from the persistent cache was checked when the process that stored it imported it.
            return gd, Graph(gd, check_attrs=not cached)
    with stage("import"):
        gd = with_resource_handle_data(graph_def_from_concrete(concrete), concrete)
        return with_cloned_constants(gd, jit_on=jit_on)


_compiler_imported = False

# What a first compile imports besides the four roots of ``_import_compiler`` (each pulls in its own
# dependencies): the launch side — the native launch op, compiles ahead, the native thread pool, the
# progress bar — and the must-compile check of an error path. Measured (issue 17, small_cnn_infer with
# the persistent cache off): without these, 6 modules were still imported on the critical path after grappler.
_FIRST_CALL_MODULES = ("tfxla_cluster.runtime.native", "tfxla_cluster.runtime.ahead", "tfxla_cluster.codegen.executable",
                       "tfxla_cluster.codegen.native_pool", "tfxla_cluster.progress",
                       "tfxla_cluster.jit.must_compile", "tfxla_cluster.codegen.split",
                       "tfxla_cluster.codegen.kernel_share")
# Op types whose convolutions may run as Winograd's (its emitter is imported at the first 3x3 convolution).
_WINOGRAD_OPS = frozenset({"Conv2D", "_FusedConv2D", "Conv2DBackpropInput"})


def import_alongside() -> bool:
    """``TFXLA_IMPORT_ALONGSIDE`` (default on): 0/false/no/off leaves the compiler's modules to be imported
    where first used (A/B timing of :func:`_import_compiler`)."""
    from tfxla_cluster.flags import env_switch

    return (env_switch("TFXLA_IMPORT_ALONGSIDE") or "").strip().lower() not in ("0", "false", "no", "off")


def _import_compiler(ops: Iterable[str] = ()) -> None:
    """Import what a process's first clustering and compile use next (the clustering pass, lowering's op
    families, the HLO passes, IR emission, the launch side: ~0.17 s of CPU in a new process), while TF's
    grappler runs on another core without the GIL (``run_grappler``'s ``alongside``). A graph from the
    persistent cache skips grappler and so this: a process whose clusters all come from the cache imports
    none of it. ``ops``: the graph's op types (Winograd's emitter is imported only for a convolution).

    Only this window hides imports: Python runs module code under the GIL, so importing on a thread while
    TF traces (Python too) made trace + import slower, not faster (issue 17: 0.47 s vs 0.39-0.43 s for
    small_cnn_infer). The imports run on the calling thread, so no module is imported by two threads at once."""
    global _compiler_imported
    import importlib

    from tfxla_cluster.codegen import program  # noqa: F401
    from tfxla_cluster.jit import mark_for_compilation  # noqa: F401
    from tfxla_cluster.passes import pipeline  # noqa: F401
    from tfxla_cluster.tf2hlo.registry import lowered_ops

    lowered_ops()
    for name in _FIRST_CALL_MODULES:
        importlib.import_module(name)
    if _WINOGRAD_OPS.intersection(ops):
        importlib.import_module("tfxla_cluster.codegen.winograd")
    _compiler_imported = True


# Ops grappler's CPU remapper makes of the graph's (MatMul/Conv2D + BiasAdd [+ activation]): clustering asks
# about them, so their kernels are prefetched with the op's (a guess that misses costs ~0.35 ms, once).
_REMAPPED = {"MatMul": "_FusedMatMul", "Conv2D": "_FusedConv2D"}


def _alongside_grappler(graph_def: graph_pb2.GraphDef, flags, jit_on: bool) -> None:
    """What the first call can do on its own thread while TF's grappler optimizes ``graph_def`` (control flow
    lowered, calls not yet inlined) on another (it releases the GIL): a process's first time, import the
    compiler; when CPU nodes auto-cluster, ask TF for the XLA kernels of the ops the graph (and the functions
    it inlines) holds that no earlier clustering asked about — MarkForCompilation reads them next (the same
    answers, now off the critical path)."""
    from tfxla_cluster.graph.function import CALL_OPS

    functions = {f.signature.name for f in graph_def.library.function}
    skip = functions | {ARG_OP, RETVAL_OP, *CALL_OPS}
    ops = dict.fromkeys(n.op for n in graph_def.node if n.op not in skip)
    if any(n.op in functions or n.op in CALL_OPS for n in graph_def.node):
        for f in graph_def.library.function:
            ops.update(dict.fromkeys(n.op for n in f.node_def if n.op not in skip))
    if not _compiler_imported and import_alongside():
        _import_compiler(ops)
    from tfxla_cluster.tf_compat import session_cpu_global_jit

    # Without cpu_global_jit (flag or session) CPU nodes are candidates only when asked for by attribute:
    # clustering reads no kernels for the rest.
    if not jit_on or not (flags.tf_xla_cpu_global_jit or session_cpu_global_jit()):
        return
    from tfxla_cluster.tfops import xla_kernels

    xla_kernels.prefetch([*ops, *(_REMAPPED[op] for op in ops if op in _REMAPPED)])


def _function_key(concrete, keep: list[str], flags, variant: str):
    """The persistent key of ``concrete``'s rewritten graph by what :func:`import_concrete` converts
    (``compile_cache.function_graph_key``), or None with the persistent cache off."""
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.runtime import compile_cache
    from tfxla_cluster.tf_compat import resource_handle_data

    if compile_cache.persistent_cache(flags) is None:
        return None
    fdef = concrete.function_def
    graph = concrete.graph
    extra = [graph.graph_def_versions.SerializeToString(deterministic=True)]
    placeholders = graph.inputs
    for k, arg in enumerate(fdef.signature.input_arg):   # what with_resource_handle_data reads
        if arg.type == types_pb2.DT_RESOURCE and k < len(placeholders):
            data = resource_handle_data(placeholders[k])
            extra.append(b"-" if data is None else data.SerializeToString(deterministic=True))
    return compile_cache.function_graph_key(fdef, graph.as_graph_def().library, b"\0".join(extra), keep, flags,
                                            variant)


def mark(concrete, graph: Graph, gd: graph_pb2.GraphDef, jit_compile: bool | None, flags, *, state=None
         ) -> tuple[dict[str, list[str]], Any]:
    """Step 2: (clusters, the MarkResult or None); auto-clustering numbers its clusters and spends fuel on
    ``state`` (a ``ProcessState``; None: the process's)."""
    from tfxla_cluster.jit.mark_for_compilation import mark_for_compilation

    name = concrete.function_def.signature.name
    if jit_compile is True:
        from tfxla_cluster.jit import must_compile

        problems = must_compile.uncompilable_in_graph(gd, name)
        if problems:
            raise must_compile.error_for(name, problems, created_at=must_compile.CreationStacks(concrete),
                                         eager_op=True)
        members = [n.name for n in graph.op_nodes() if n.op not in (ARG_OP, RETVAL_OP)]
        from tfxla_cluster.tf2hlo.dynamic_padder import bounded_dynamic_problems
        dynamic = sorted({graph.node(n).op for n in members} & DATA_DEPENDENT_SHAPE_OPS)
        if dynamic and not bounded_dynamic_problems(graph, members):
            dynamic = []   # one cluster: their results are bounded dynamic values (tf2hlo/dynamic_padder.py)
        if dynamic:
            result = _split_at_dynamic_shapes(graph, flags, dynamic, name)
            return result.clusters, result
        return ({"cluster_0": members} if members else {}), None
    # jit_compile=False (``_XlaMustCompile=false``) does not keep a function out of auto-clustering: TF
    # 2.21 clusters its body under --tf_xla_auto_jit or set_jit as any other (seen in TF's live dumps).
    from tfxla_cluster.jit.must_compile import CreationStacks

    from tfxla_cluster.tf_compat import session_cpu_global_jit

    result = mark_for_compilation(graph, flags, cpu_global_jit_config=session_cpu_global_jit(), state=state)
    result.created_at = CreationStacks(concrete)
    result.release_graph(graph)   # made again if explain or the report reads it
    return result.clusters, result


def _split_at_dynamic_shapes(graph, flags, ops: list[str], function_name: str):
    """Clusters for a ``jit_compile=True`` body that holds data-dependent-shape ops: TF's clustering
    (cycle-safe, every compilable op a candidate, clusters of any size) with those ops left to TF's
    kernels. Each cluster is still must-compile (a lowering error raises); downstream clusters are
    specialised on the run-time shapes, one compile per shape, as every cluster is."""
    import logging

    from tfxla_cluster.jit.mark_for_compilation import mark_for_compilation

    logging.getLogger("tfxla_cluster.runtime").warning(
        "jit_compile=True: %s in %s has a data-dependent output shape, which TF's XLA compiles with bounded "
        "dynamic dimensions; here it runs on TF's kernels between compiled clusters", ", ".join(ops),
        function_name)
    split = flags.replace(tf_xla_auto_jit="2", tf_xla_cpu_global_jit=True, tf_xla_min_cluster_size=1,
                          tf_xla_max_cluster_size=2 ** 31 - 1, tf_xla_clustering_fuel=2 ** 63 - 1,
                          tf_xla_ops_to_cluster="", tf_xla_cluster_exclude_ops="Where" if "Where" in ops else "")
    return mark_for_compilation(graph, split)


def encapsulate_clusters(graph: Graph, clusters: dict[str, list[str]], *, flags, backend: str, must_compile: bool,
                         py_launch: PyLaunch, on_native: Callable[[Launcher], None] | None = None
                         ) -> tuple[graph_pb2.GraphDef, list[ClusterSignature], dict[str, Launcher], list]:
    """Step 3: (rewritten GraphDef, signatures, launchers by cluster, py-func objects to keep alive)."""
    import tensorflow as tf

    from tfxla_cluster.runtime import native
    from tfxla_cluster.runtime.encapsulate import encapsulate
    from tfxla_cluster.tf_compat import register_eager_func

    launchers: dict[str, Launcher] = {}
    keep: list = []
    # Variables move out of a native launch node; the debugging ops' output numbering assumes
    # they don't, so with those flags resource clusters keep the Python launch.
    debugging = (flags.tf_xla_check_cluster_input_numerics or flags.tf_xla_check_cluster_output_numerics
                 or flags.tf_xla_print_cluster_outputs)

    def register(sig: ClusterSignature):
        launcher = Launcher(graph, sig, must_compile=must_compile, backend=backend, flags=flags)
        launchers[sig.name] = launcher
        if on_native is not None:
            bound = native.bind(launcher, resources=not debugging)
            if bound is not None:
                on_native(launcher)
                return bound
        # EagerPyFunc runs registered EagerFunc objects with eager tensors in and out.
        token, eager = register_eager_func(py_launch(launcher), [tf.as_dtype(t) for t in sig.output_dtypes])
        keep.append(eager)  # TF's registry only holds weak references
        return token

    rewritten, signatures = encapsulate(graph, clusters, register, flags=flags)
    return rewritten, signatures, launchers, keep


def import_into_tf(rewritten: graph_pb2.GraphDef, feeds: list[str], fetches: list[str], run_ops: list[str]):
    """Step 4: TF's function running ``rewritten`` (its ``_Arg``s as placeholders): ``feeds`` in,
    ``fetches`` out, and the ``run_ops`` present in it run too (a function returning nothing still
    runs e.g. its variable updates, as TF's runtime does)."""
    from tfxla_cluster.graph.function import runtime_to_placeholders
    from tfxla_cluster.tf_compat import GraphDefFunction

    runnable = runtime_to_placeholders(rewritten)
    present = {n.name for n in runnable.node}
    return GraphDefFunction(runnable, feeds, fetches, [n for n in dict.fromkeys(run_ops) if n in present])
