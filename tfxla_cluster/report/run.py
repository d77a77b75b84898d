"""Make things run so the report has real numbers: a GraphDef on generated inputs, or a user's script.

Stage: report (drives the runtime). Two sources:

* :func:`run_graph` — a loaded graph and its clustering: every cluster becomes a launch node
  (:func:`tfxla_cluster.runtime.pipeline.compile_graph`, exactly the clusters the static report
  shows), TF imports the rewritten graph, and it is called a few times on deterministic random inputs
  made from the graph's input dtypes and shapes. When that is impossible (unknown input shapes,
  string or resource inputs, ...) it raises :class:`NotRunnable` with the reason the report prints.
* :func:`run_saved_model` — a SavedModel's signature function, with its variables, through
  :func:`tfxla_cluster.function` (its GraphDef alone can't run: variable values live outside it);
* :func:`run_script` — a Python TF program run unmodified under the plugin (every ``tf.function``
  goes through our pipeline; ``TF_XLA_FLAGS`` decide clustering), returning the traced functions.

Launch observers (the report's :class:`~.collect.Recorder`, the numerics checker) must be installed
by the caller around these calls.
"""
from __future__ import annotations

import os
import runpy
import sys
import time
from typing import Any

import numpy as np

from tfxla_cluster.errors import TfXlaError
from tfxla_cluster.graph.opdefs import ARG_OP, ARG_OPS, RETVAL_OP, RETVAL_OPS


class NotRunnable(TfXlaError):
    """The graph can't be run from the report: the reason says why (shown in the page)."""


def make_inputs(graph: Any, input_shapes: dict[str, tuple[int, ...]] | None = None, seed: int = 0
                ) -> list[tuple[str, np.ndarray]]:
    """(placeholder name, value) for every input of ``graph``: deterministic random values of the
    input's dtype and static shape (``input_shapes`` fills unknown ones, by node name)."""
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.graph.opdefs import base_dtype

    input_shapes = input_shapes or {}
    rng = np.random.default_rng(seed)
    out = []
    for node in graph.op_nodes():
        if node.op not in ("Placeholder", *ARG_OPS) or node.data_inputs():
            continue
        dtype = base_dtype(node.outputs[0].dtype)
        if dtype == types_pb2.DT_RESOURCE:
            raise NotRunnable(f"input '{node.name}' is a resource (a variable's handle): a GraphDef does not "
                              "carry the variable's value; run the program with `report -- script.py` instead")
        if dtype in (types_pb2.DT_STRING, types_pb2.DT_VARIANT):
            raise NotRunnable(f"input '{node.name}' is a {tf.as_dtype(dtype).name} tensor: no value can be made up for it")
        shape = input_shapes.get(node.name)
        if shape is None:
            try:
                shape = graph.output_shapes(node)[0]
            except TfXlaError:   # shape inference refused the node: the shape must be given
                shape = None
            if shape is None or any(d is None or d < 0 for d in shape):
                raise NotRunnable(f"input '{node.name}' has unknown shape {_shape_text(shape)}; give it with "
                                  f"--input-shape {node.name}=D0,D1,...")
        value = random_value(tf.as_dtype(dtype).as_numpy_dtype, tuple(int(d) for d in shape), rng, node.name)
        out.append((node.name, value))
    return out


def random_value(np_dtype: Any, shape: tuple[int, ...], rng: np.random.Generator, name: str) -> np.ndarray:
    """A deterministic random value for input ``name``: normal floats, small non-negative integers
    (likely valid as indices, sizes and axes), fair booleans."""
    if np.issubdtype(np_dtype, np.floating) or getattr(np_dtype, "__name__", "") == "bfloat16":
        return rng.standard_normal(shape).astype(np_dtype)
    if np.issubdtype(np_dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np_dtype)
    if np_dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(np_dtype, np.integer):
        return rng.integers(0, 4, size=shape).astype(np_dtype)
    raise NotRunnable(f"input '{name}' has dtype {np_dtype}: no value can be made up for it")


def run_saved_model(path: str, signature: str, flags: Any, *, input_shapes: dict | None = None, calls: int = 3,
                    seed: int = 0, backend: str = "llvm") -> tuple[Any, Any, list[str]]:
    """Run a SavedModel's signature function (with its variables) through :func:`tfxla_cluster.function`
    ``calls`` times on generated inputs. Returns (the Function, the loaded SavedModel — keep it alive:
    it owns the variables —, a description of the inputs fed)."""
    import tensorflow as tf

    from tfxla_cluster.runtime.function import function

    input_shapes = input_shapes or {}
    loaded = tf.saved_model.load(str(path))
    concrete = loaded.signatures[signature]
    _, specs = concrete.structured_input_signature
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in sorted(specs.items()):
        shape = input_shapes.get(name, spec.shape.as_list() if spec.shape.rank is not None else None)
        if shape is None or any(d is None for d in shape):
            raise NotRunnable(f"input '{name}' has unknown shape {_shape_text(shape)}; give it with "
                              f"--input-shape {name}=D0,D1,...")
        if spec.dtype in (tf.string, tf.variant, tf.resource):
            raise NotRunnable(f"input '{name}' is a {spec.dtype.name} tensor: no value can be made up for it")
        feeds[name] = tf.constant(random_value(spec.dtype.as_numpy_dtype, tuple(int(d) for d in shape), rng, name))

    def serve(**kwargs: Any) -> Any:
        return concrete(**kwargs)
    serve.__name__ = signature
    fn = function(serve, flags=flags, backend=backend)
    for _ in range(max(1, calls)):
        fn(**feeds)
    return fn, loaded, [f"{k}: {v.dtype.name}{v.shape.as_list()}" for k, v in feeds.items()]


def _shape_text(shape: Any) -> str:
    if shape is None:
        return "<unknown rank>"
    return "[" + ",".join("?" if d is None or d < 0 else str(d) for d in shape) + "]"


def run_graph(result: Any, flags: Any, *, input_shapes: dict | None = None, calls: int = 3, seed: int = 0,
              backend: str = "llvm", profile: Any = None) -> tuple[dict[str, Any], list[str]]:
    """Run the clustered graph of ``result`` ``calls`` times on generated inputs, through the pipeline's
    stages from encapsulation on (:func:`tfxla_cluster.runtime.pipeline.compile_graph`; py-func launches,
    so every launch is observed). Returns the launchers by cluster name and a description of the inputs fed.
    With ``profile`` (a :class:`~tfxla_cluster.compile_profile.CompileProfile`), encapsulation, TF's import and
    each cluster's first launch (its compile's stages, on TF's thread) are recorded in it."""
    import tensorflow as tf

    from tfxla_cluster import compile_profile

    from tfxla_cluster.runtime.pipeline import compile_graph

    inputs = make_inputs(result.graph, input_shapes, seed)
    graph, fetch_ops = _with_retvals(result.graph)
    retvals = sorted((n for n in graph.op_nodes() if n.op in RETVAL_OPS),
                     key=lambda n: n.node_def.attr["index"].i)
    fetch_tensors = [f"{n.name}:0" for n in retvals]
    if not fetch_tensors and not fetch_ops:
        raise NotRunnable("the graph has no outputs to fetch")

    profiled: set[str] = set()

    def py_launch(launcher: Any) -> Any:
        def call(*tensors: Any) -> list:
            name = launcher.sig.name
            if profile is None or name in profiled:
                return [tf.convert_to_tensor(a) for a in launcher(*tensors)]
            profiled.add(name)
            t0 = time.perf_counter()
            with compile_profile.collecting(profile, name):
                values = [tf.convert_to_tensor(a) for a in launcher(*tensors)]
            elapsed = time.perf_counter() - t0
            compile_s = launcher.stats.compile_seconds
            profile.add("run", max(0.0, elapsed - compile_s), name)
            return values
        return call

    with compile_profile.collecting(profile):
        program = compile_graph(graph, result.clusters, flags=flags, backend=backend, must_compile=False,
                                py_launch=py_launch, feeds=[name for name, _ in inputs], fetches=fetch_tensors,
                                run_ops=fetch_ops)
    feeds = [tf.constant(v) for _, v in inputs]
    for _ in range(max(1, calls)):
        program.fn(*feeds)
    described = [f"{name}: {v.dtype}{list(v.shape)}" for name, v in inputs]
    return program.launchers, described


def _with_retvals(graph: Any) -> tuple[Any, list[str]]:
    """A graph whose outputs are ``_Retval`` nodes (a GraphDef's sinks become retvals, so a clustered
    sink is an output of its launch node, as in a function) and the ops without outputs to run."""
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.graph.graph import Graph
    from tfxla_cluster.graph.opdefs import base_dtype

    nodes = list(graph.op_nodes())
    if any(n.op in RETVAL_OPS for n in nodes):
        return graph, []
    gd = type(graph.graph_def)()
    gd.CopyFrom(graph.graph_def)
    ops: list[str] = []
    index = 0
    for n in nodes:
        if any(e.dst.is_op for e in n.out_edges) or n.op in ("Placeholder", ARG_OP, "NoOp"):
            continue
        outs = [(i, base_dtype(o.dtype)) for i, o in enumerate(n.outputs)]
        outs = [(i, dt) for i, dt in outs if dt not in (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT)]
        if not outs:
            ops.append(n.name)
        for i, dt in outs:
            nd = gd.node.add(name=f"tfxla_report_retval_{index}", op=RETVAL_OP, input=[f"{n.name}:{i}"])
            nd.attr["T"].type = dt
            nd.attr["index"].i = index
            if n.node_def.device:
                nd.device = n.node_def.device
            index += 1
    return Graph(gd), ops


def run_script(script: str, args: list[str], *, backend: str = "llvm", on_new_launcher: Any = None
               ) -> tuple[list[Any], int, str]:
    """Run ``script`` with ``args`` under the plugin. Returns (the traced ``Function`` objects, the
    script's exit code, the plugin's summary)."""
    from tfxla_cluster.errors import NotFoundError
    from tfxla_cluster.runtime import plugin

    if not os.path.exists(script):
        raise NotFoundError(f"{script}: No such file or directory")
    kept: dict[int, Any] = {}
    # Functions traced before this run (an earlier report in this process) are not this script's; they
    # stay referenced meanwhile so that no new function can reuse their id.
    earlier = list(plugin._functions)
    earlier_ids = {id(f) for f in earlier}

    def keep_functions(_launcher: Any = None) -> None:
        # The plugin tracks functions weakly; a function the script drops must still be reported.
        for f in list(plugin._functions):
            if id(f) not in earlier_ids:
                kept[id(f)] = f
    plugin.install(backend=backend)
    saved_argv = sys.argv
    sys.argv = [script, *args]
    code = 0
    namespace: dict = {}
    seen: set[int] = set()
    failure = ""

    def observer(launcher: Any, compiled: Any, arrays: list, outputs: list, seconds: float) -> None:
        # On a cluster's first launch, hold on to the functions traced so far.
        if id(launcher) not in seen:
            seen.add(id(launcher))
            keep_functions()
            if on_new_launcher is not None:
                on_new_launcher(launcher)
    from tfxla_cluster.runtime.launcher import add_observer, remove_observer

    try:
        add_observer(observer)
        try:
            namespace = runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:   # the script's own error (as `run` reports it): what ran is still worth a report
            code = 1
            failure = f"the script raised {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        finally:
            remove_observer(observer)
        keep_functions()
        summary = plugin.summary() + (f"\n{failure}" if failure else "")
    finally:
        plugin.uninstall()
        sys.argv = saved_argv
    del namespace, earlier
    return list(kept.values()), code, summary
