"""Every cluster of every sample graph lowers, and its module computes what TF computes with the same
nodes.

For each ``graphs/NAME.pbtxt``: load it as TF's JIT passes see it (grappler on), mark it with
``--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1``, and for each cluster:

1. take its inputs from a TF Session run of the whole sample on ``inputs.npz`` (tensors TF cannot fetch,
   such as ones inside while-loop frames, get deterministic stand-in values instead);
2. run the cluster's own nodes in TF (a GraphDef of just those nodes, external inputs as placeholders,
   resource inputs as fresh variables) and fetch its outputs and final variable values;
3. evaluate the lowered module on the same inputs and compare (f32 rtol/atol 1e-5: reductions sum in a
   different order than TF's kernels), then the printer→parser round trip and real XLA.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tests.tf2hlo.tf2hlo_harness import HAVE_JAX

from tfxla_cluster import load_graph, mark_for_compilation
from tfxla_cluster.hlo import parse_module
from tfxla_cluster.tf2hlo import cluster_input_tensors, lower_cluster

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"
SAMPLES = sorted(p.stem for p in GRAPHS.glob("*.pbtxt"))
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


def _variables(name: str, meta: dict) -> dict[str, np.ndarray]:
    """Resource placeholder name → initial variable value."""
    if not meta["captured_variables"]:
        return {}
    init = np.load(GRAPHS / "tf" / name / "variables.npz")
    return {c["placeholder"].split(":")[0]: init[c["variable"]] for c in meta["captured_variables"]}


def _fetch_inputs(graph_def, meta, name, variables, tensors: list[str]):
    """Run the whole sample: the values of ``tensors`` TF lets us fetch, and the shapes of all of them
    (from the step trace, which also sees tensors inside while-loop frames)."""
    inputs = np.load(GRAPHS / "tf" / name / "inputs.npz")
    out: dict[str, np.ndarray] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    g = tf.Graph()
    with g.as_default():
        input_map = {i["tensor"]: tf.constant(inputs[i["name"]]) for i in meta["inputs"]}
        vs = []
        for ph, value in variables.items():
            v = tf.compat.v1.Variable(value, use_resource=True, name=f"var_{ph.replace('/', '_')}")
            vs.append(v)
            input_map[f"{ph}:0"] = v.handle
        tf.compat.v1.import_graph_def(graph_def, input_map=input_map, name="s")
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            run_metadata = tf.compat.v1.RunMetadata()
            sinks = [op for op in g.get_operations() if op.name.startswith("s/") and not op.outputs]
            results = [g.get_tensor_by_name(f"s/{o['tensor']}") for o in meta["outputs"]]
            sess.run(results + sinks, options=options, run_metadata=run_metadata)
            for dev in run_metadata.step_stats.dev_stats:
                for ns in dev.node_stats:
                    for o in ns.output:
                        dims = tuple(d.size for d in o.tensor_description.shape.dim)
                        shapes[f"{ns.node_name.split(':')[0].removeprefix('s/')}:{o.slot}"] = dims
            sess.run(tf.compat.v1.global_variables_initializer())
            for t in tensors:
                try:
                    out[t] = sess.run(g.get_tensor_by_name(f"s/{t}"))
                except (tf.errors.OpError, ValueError):
                    continue  # e.g. inside a while-loop frame
    for t, v in out.items():
        shapes[t] = tuple(v.shape)
    return out, shapes


def _stand_in(dtype: np.dtype, shape) -> np.ndarray:
    rng = np.random.default_rng(len(shape))
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 3, shape).astype(dtype)
    return rng.uniform(-1, 1, shape).astype(dtype)


def _run_cluster_in_tf(graph, nodes: list[str], lc, feeds: list, resources: dict[int, np.ndarray]):
    """The cluster's nodes alone in a TF Session: (output values, final resource values)."""
    members = set(nodes)
    gd = graph_pb2.GraphDef()
    gd.versions.CopyFrom(graph.graph_def.versions)
    gd.library.CopyFrom(graph.graph_def.library)
    rename = {}
    for inp in lc.inputs:
        ph = gd.node.add(name=f"cluster_input_{inp.index}", op="Placeholder")
        src = graph.node(inp.tensor[0])
        ph.attr["dtype"].type = src.outputs[inp.tensor[1]].dtype if src.op != "_Arg" else src.node_def.attr["T"].type
        rename[f"{inp.tensor[0]}:{inp.tensor[1]}"] = ph.name
    for n in nodes:
        nd = gd.node.add()
        nd.CopyFrom(graph.node(n).node_def)
        nd.device = ""
        new_inputs = []
        for ref in nd.input:
            if ref.startswith("^"):
                if ref[1:] in members:
                    new_inputs.append(ref)
                continue
            src, _, slot = ref.partition(":")
            key = f"{src}:{slot or 0}"
            new_inputs.append(ref if src in members else rename[key])
        del nd.input[:]
        nd.input.extend(new_inputs)
    g = tf.Graph()
    with g.as_default():
        input_map, variables = {}, {}
        for inp in lc.inputs:
            if inp.index in resources:
                v = tf.compat.v1.Variable(resources[inp.index], use_resource=True, name=f"var{inp.index}")
                variables[inp.index] = v
                input_map[f"cluster_input_{inp.index}:0"] = v.handle
        tf.compat.v1.import_graph_def(gd, input_map=input_map, name="c")
        fetch = [g.get_tensor_by_name(f"c/{o.tensor[0]}:{o.tensor[1]}") for o in lc.outputs if o.tensor is not None]
        targets = [g.get_operation_by_name(f"c/{n}") for n in nodes]
        feed = {g.get_tensor_by_name(f"c/cluster_input_{i.index}:0"): feeds[i.index] for i in lc.inputs
                if i.index not in resources}
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            values = sess.run(fetch + targets, feed_dict=feed)[:len(fetch)]
            after = {i: sess.run(v.read_value()) for i, v in variables.items()}
    return values, after


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_clusters_lower_and_match_tf(name):
    meta = json.loads((GRAPHS / f"{name}.json").read_text(encoding="utf-8"))
    graph = load_graph(GRAPHS / f"{name}.pbtxt", grappler=True)
    result = mark_for_compilation(graph, FLAGS)
    assert result.clusters, f"{name}: no clusters"
    variables = _variables(name, meta)
    signatures = {c: cluster_input_tensors(graph, nodes) for c, nodes in result.clusters.items()}
    wanted = sorted({f"{t[0]}:{t[1]}" for ts in signatures.values() for t in ts})
    fetched, shapes = _fetch_inputs(graph.graph_def, meta, name, variables, wanted)

    def arg_shapes(tensors):
        """Unknown dims are specialised on the actual argument shapes, as TF's launch op does."""
        out = {}
        for t in tensors:
            if t[0] in variables:
                out[t] = (variables[t[0]].dtype, variables[t[0]].shape)
            elif f"{t[0]}:{t[1]}" in shapes:
                out[t] = shapes[f"{t[0]}:{t[1]}"]
        return out

    lowered = {c: lower_cluster(graph, nodes, name=c, arg_shapes=arg_shapes(signatures[c]))
               for c, nodes in result.clusters.items()}
    for cname, lc in lowered.items():
        text = lc.module.to_string()
        assert parse_module(text).to_string() == text
        feeds, resources = [], {}
        for inp in lc.inputs:
            key = f"{inp.tensor[0]}:{inp.tensor[1]}"
            if inp.kind == "resource":
                value = variables[inp.tensor[0]]
                resources[inp.index] = value
            elif inp.kind == "constant":
                value = inp.value
            else:
                value = fetched.get(key)
                if value is None or tuple(value.shape) != inp.dims:
                    value = _stand_in(inp.element_type.dtype, inp.dims)
            feeds.append(np.asarray(value).astype(inp.element_type.dtype))
        want, after = _run_cluster_in_tf(graph, result.clusters[cname], lc, feeds, resources)
        got = lc.run(*feeds)
        tensors = [o for o in lc.outputs if o.tensor is not None]
        for o, w in zip(tensors, want):
            np.testing.assert_allclose(got[o.index], w, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name}/{cname} output {o.tensor}")
        for index, t in lc.resource_updates().items():
            np.testing.assert_allclose(got[t], after[index], rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name}/{cname} resource input {index}")
        if HAVE_JAX:
            from tests.tf2hlo.tf2hlo_xla import xla_run

            params = [feeds[i.index] for i in lc.parameters]
            for a, b in zip(xla_run(text, *params), got):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"{name}/{cname}: XLA vs evaluator")
