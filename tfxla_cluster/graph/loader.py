"""One entry point for every graph source: files, SavedModels, GraphDefs and TF functions.

Stage: import. ``load_graph`` returns a validated :class:`~tfxla_cluster.graph.graph.Graph`; every
failure is a typed error naming the source.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tensorflow.core.framework import graph_pb2

from tfxla_cluster.graph import function, io
from tfxla_cluster.graph.graph import Graph


def load_graph_def(source: Any, *args: Any, signature: str = "serving_default", grappler: bool = False,
                   inline: bool = True, **kwargs: Any) -> graph_pb2.GraphDef:
    """A GraphDef from a path (``.pbtxt``/``.pb``/SavedModel dir), a GraphDef, or a (concrete)
    ``tf.function`` traced with ``args``/``kwargs``.

    ``grappler=True`` applies TF's grappler as TF's runtime does before clustering; ``inline`` (the
    default when grappler is off) inlines function calls with our inliner.
    """
    if isinstance(source, graph_pb2.GraphDef):
        gd = source
    elif isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_dir():
            concrete = io.load_saved_model(p, signature)
            # The variables' shapes are known to the restored function: shapes downstream of their
            # reads (the signature's outputs) are then inferred, not unknown.
            return function.graph_def_from_concrete(concrete, inline=inline, grappler=grappler,
                                                    resource_handle_data=True)
        gd = io.read_graph_def(p)
    else:
        return function.graph_def_from_function(source, *args, inline=inline, grappler=grappler, **kwargs)
    if grappler:
        from tfxla_cluster.graph.grappler import run_grappler

        return run_grappler(gd)
    return function.inline_calls(gd) if inline else gd


def load_graph(source: Any, *args: Any, signature: str = "serving_default", grappler: bool = False,
               inline: bool = True, assign_devices: bool = True, **kwargs: Any) -> Graph:
    """Like :func:`load_graph_def`, returning the validated :class:`Graph`."""
    gd = load_graph_def(source, *args, signature=signature, grappler=grappler, inline=inline, **kwargs)
    return Graph(gd, assign_devices=assign_devices)
