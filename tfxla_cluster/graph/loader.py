"""One entry point for every graph source: files, SavedModels, GraphDefs and TF functions.

Stage: import. ``load_graph`` returns a validated :class:`~tfxla_cluster.graph.graph.Graph`; every
failure is a typed error naming the source. :func:`graph_def_from_function` and
:func:`graph_def_from_concrete` are the entry points for Python callers: they instantiate the function
(:mod:`.function`) and then inline its calls or run TF's grappler (:mod:`.grappler`) on it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from tensorflow.core.framework import graph_pb2

from tfxla_cluster import compile_profile
from tfxla_cluster.graph import io
from tfxla_cluster.graph.devices import require_cpu_kernels
from tfxla_cluster.graph.function import find_function, inline_calls, instantiate
from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.graph.grappler import run_grappler
from tfxla_cluster.graph.lower_functional import lower_functional_ops
from tfxla_cluster.graph.opdefs import ARG_OP


def load_graph_def(source: Any, *args: Any, signature: str = "serving_default", grappler: bool = False,
                   inline: bool = True, flags: Any = None, **kwargs: Any) -> graph_pb2.GraphDef:
    """A GraphDef from a path (``.pbtxt``/``.pb``/SavedModel dir), a GraphDef, or a (concrete)
    ``tf.function`` traced with ``args``/``kwargs``.

    ``grappler=True`` applies TF's grappler as TF's runtime does before clustering; ``inline`` (the
    default when grappler is off) inlines function calls with our inliner. ``flags`` (a ``Flags``, a
    ``TF_XLA_FLAGS`` string, None for the environment's) are the ones TF's runtime would run with: its
    grappler depends on whether they turn auto-clustering on (see :mod:`.grappler`).
    """
    if isinstance(source, graph_pb2.GraphDef):
        gd = source
        io.check_importable(gd)
    elif isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_dir():
            concrete = io.load_saved_model(p, signature)
            # The variables' shapes are known to the restored function: shapes downstream of their
            # reads (the signature's outputs) are then inferred, not unknown.
            return graph_def_from_concrete(concrete, inline=inline, grappler=grappler, resource_handle_data=True,
                                           flags=flags)
        gd = io.read_graph_def(p)
        io.check_importable(gd, str(p))
    else:
        return graph_def_from_function(source, *args, inline=inline, grappler=grappler, flags=flags, **kwargs)
    if grappler:
        return run_grappler(gd, flags=flags)
    return inline_calls(gd) if inline else gd


def load_graph(source: Any, *args: Any, signature: str = "serving_default", grappler: bool = False,
               inline: bool = True, assign_devices: bool = True, flags: Any = None, **kwargs: Any) -> Graph:
    """Like :func:`load_graph_def`, returning the validated :class:`Graph`."""
    gd = load_graph_def(source, *args, signature=signature, grappler=grappler, inline=inline, flags=flags, **kwargs)
    return Graph(gd, assign_devices=assign_devices)


def graph_def_from_concrete(concrete, *, inline: bool = True, grappler: bool = False,
                            resource_handle_data: bool = False, flags: Any = None) -> graph_pb2.GraphDef:
    """The runtime-form GraphDef (``_Arg``/``_Retval``) of a ConcreteFunction.

    ``grappler=True`` runs TF's grappler as TF's function runtime does (it inlines calls itself, so the
    result is the graph TF's MarkForCompilation sees); otherwise ``inline`` uses our inliner.
    ``resource_handle_data``: resource ``_Arg``s carry their variable's dtype and shape (see
    :func:`with_resource_handle_data`), so shapes downstream of variable reads are known.
    ``flags``: as in :func:`load_graph_def`.
    """
    library = concrete.graph.as_graph_def().library
    fdef = concrete.function_def
    gd = instantiate(fdef, library)
    gd.versions.CopyFrom(concrete.graph.graph_def_versions)
    # The function's own attributes (e.g. _XlaMustCompile from jit_compile) live on its FunctionDef;
    # keep the FunctionDef itself in the library so callers can look them up.
    if find_function(gd.library, fdef.signature.name) is None:
        gd.library.function.add().CopyFrom(fdef)
    if resource_handle_data:
        gd = with_resource_handle_data(gd, concrete)
    if grappler:
        return runtime_rewrites(gd, concrete, flags)
    return inline_calls(gd) if inline else gd


def runtime_rewrites(gd: graph_pb2.GraphDef, concrete, flags: Any = None,
                     alongside: Callable[[graph_pb2.GraphDef], None] | None = None) -> graph_pb2.GraphDef:
    """What TF's function runtime does to ``concrete``'s (uninlined) graph before clustering: calls inlined
    and If/Case/While lowered by its PRE_PLACEMENT passes (not inside grappler: see lower_functional),
    then TF's placer's check that every node has a CPU kernel, then grappler keeping the function's control
    outputs, configured as TF's runtime under ``flags`` (None: the environment's). Profiled as the "import"
    and "grappler" stages; ``alongside(graph)`` runs on this thread while grappler runs on ``graph`` (the
    lowered graph, before grappler: see :func:`~.grappler.run_grappler`)."""
    with compile_profile.stage("import"):
        gd = lower_functional_ops(gd)
        require_cpu_kernels(gd)
    lowered = gd
    with compile_profile.stage("grappler"):
        return run_grappler(gd, keep=control_outputs(concrete), flags=flags,
                            alongside=None if alongside is None else lambda: alongside(lowered))


def control_outputs(concrete) -> list[str]:
    """The nodes a ConcreteFunction must run (its FunctionDef's ``control_ret``): TF's function runtime
    gives them to grappler as nodes to keep, which decides what the dependency optimizer may remove
    and, through that, the order of the optimized graph's nodes (the node ids the JIT passes see)."""
    return list(concrete.function_def.control_ret.values())


def with_resource_handle_data(graph_def, concrete):
    """Give each resource ``_Arg`` the dtype and shape of the variable it carries
    (``_handle_dtypes`` / ``_handle_shapes``), as TF's eager runtime does when it instantiates a function
    for a call — before grappler, whose shape inference (and so the remapper's ``_FusedMatMul`` of a
    MatMul + bias read from a variable) depends on them."""
    from tensorflow.core.framework import types_pb2
    from tfxla_cluster.tf_compat import resource_handle_data

    placeholders = concrete.graph.inputs
    for nd in graph_def.node:
        if nd.op != ARG_OP or nd.attr["T"].type != types_pb2.DT_RESOURCE:
            continue
        index = nd.attr["index"].i
        data = resource_handle_data(placeholders[index]) if index < len(placeholders) else None
        if data is None or not data.is_set or not data.shape_and_type:
            continue
        nd.attr["_handle_dtypes"].list.type.extend(x.dtype for x in data.shape_and_type)
        for x in data.shape_and_type:
            nd.attr["_handle_shapes"].list.shape.add().CopyFrom(x.shape)
    return graph_def


def graph_def_from_function(fn: Callable[..., Any], *args: Any, input_signature=None,
                            jit_compile: bool | None = None, inline: bool = True, grappler: bool = False,
                            flags: Any = None, **kwargs: Any) -> graph_pb2.GraphDef:
    """Trace ``fn`` (a ``tf.function``, a plain Python function, or a ConcreteFunction) and return its
    runtime-form GraphDef with the function library.

    Give example ``args``/``kwargs`` (tensors, numpy arrays or ``tf.TensorSpec``) or an
    ``input_signature``. ``grappler=True`` gives exactly the graph TF's JIT passes see.
    """
    from tfxla_cluster.tf_compat import concrete_function_type, tf_function

    if isinstance(fn, concrete_function_type()):
        concrete = fn
    else:
        if not hasattr(fn, "get_concrete_function"):
            fn = tf_function()(fn, input_signature=input_signature, jit_compile=jit_compile)
        if input_signature is not None and not args and not kwargs:
            concrete = fn.get_concrete_function()
        else:
            concrete = fn.get_concrete_function(*args, **kwargs)
    return graph_def_from_concrete(concrete, inline=inline, grappler=grappler, flags=flags)
