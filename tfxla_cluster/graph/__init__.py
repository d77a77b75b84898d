"""Import: GraphDefs from tf.functions, files and SavedModels, as TF's JIT passes see them."""
from tfxla_cluster.graph.graph import CONTROL_SLOT, Edge, Graph, Node, Shape
from tfxla_cluster.graph.io import load_saved_model, read_graph_def, write_graph_def
from tfxla_cluster.graph.function import inline_calls
from tfxla_cluster.graph.loader import graph_def_from_concrete, graph_def_from_function, load_graph, load_graph_def

__all__ = ["CONTROL_SLOT", "Edge", "Graph", "Node", "Shape", "load_saved_model", "read_graph_def",
           "write_graph_def", "graph_def_from_concrete", "graph_def_from_function", "inline_calls", "load_graph", "load_graph_def"]
