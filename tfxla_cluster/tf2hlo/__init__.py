"""TF → HLO lowering (TensorFlow's tf2xla): a cluster of graph nodes becomes an ``HloModule``.

Stage: lowering, after clustering (``jit/``) and before the HLO passes (``passes/``).

    lower_cluster(graph, node_names, *, arg_shapes=None, const_args=None, name=None) -> LoweredCluster
    lower_function(fn_or_concrete, *example_args) -> LoweredCluster       # a jit_compile=True function
    cluster_input_tensors(graph, node_names) -> [(node, slot)]            # input order, without lowering
    cluster_modules(graph, mark_result) -> dict[str, HloModule]           # every cluster of a marking
    lowers("AddV2", "Add")                                                # the registry decorator
    lowered_ops() -> frozenset[str]

Modules:
    registry.py   the ``@lowers`` registry            lower.py     clusters/functions → modules
    context.py    LoweringContext, values, folding    builder.py   TfBuilder (names, metadata)
    xla_lib.py    broadcasting, reducers, math        types.py     TF dtypes and attr values
    one module per op family: elementwise, reduction, shape_ops, slicing, gather_scatter, nn, conv,
    pooling, batch_norm, variables, control_flow, random, array_ops, xla_ops (calls and Xla* ops),
    random_stateful (resource-state and seedless randoms), tensor_list, tensor_array (TF1 arrays, stacks),
    collectives (one-device meaning), symbolic_gradient,
    xla_structured (XlaConv/Gather/Scatter/Reduce*/Sort/While/If/CallModule/...), image_color, nn_more,
    quantize, math_more, special, linalg_more, linalg_decomp, fft, dynamic_size
"""
from __future__ import annotations

from tfxla_cluster._lazy import lazy_attributes

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfxla_cluster.graph import Graph
    from tfxla_cluster.hlo.ir import HloModule


def cluster_modules(graph: "Graph", mark_result, **kwargs) -> dict[str, "HloModule"]:
    """The HloModule of every cluster in ``mark_result`` (a ``MarkResult``), by cluster name, in the
    result's cluster order. ``graph`` is the graph the clusters name nodes of (``mark_result.graph``
    when None); ``kwargs`` go to :func:`lower_cluster` (e.g. ``arg_shapes``)."""
    from tfxla_cluster.tf2hlo.lower import lower_cluster

    graph = graph if graph is not None else mark_result.graph
    return {name: lower_cluster(graph, nodes, name=name, **kwargs).module
            for name, nodes in mark_result.clusters.items()}


__all__ = ["ClusterInput", "ClusterOutput", "LoweredCluster", "LoweringContext", "Resource", "cluster_input_tensors",
           "cluster_modules",
           "lower_cluster", "lower_function", "lowered_ops", "lowers"]

# Names resolve on first use (PEP 562): the persistent cache's hit path unpickles ClusterInput
# (cluster_input.py) without importing lowering and every op family.
_LAZY = {
    "LoweringContext": "tfxla_cluster.tf2hlo.context",
    "Resource": "tfxla_cluster.tf2hlo.context",
    "ClusterInput": "tfxla_cluster.tf2hlo.cluster_input",
    **{name: "tfxla_cluster.tf2hlo.lower" for name in ("ClusterOutput", "LoweredCluster",
                                                        "cluster_input_tensors", "lower_cluster", "lower_function")},
    "lowered_ops": "tfxla_cluster.tf2hlo.registry",
    "lowers": "tfxla_cluster.tf2hlo.registry",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
