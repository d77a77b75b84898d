"""``SymbolicGradient`` (TF1 functional gradients): the gradient of library function ``f`` at its inputs,
given the gradients of its outputs.

Stage: lowering. TF instantiates the op as a gradient function built by its gradient registry and
tf2xla compiles that function. Here the gradient function is built the same way in TF: ``f``'s body is
imported into a graph (``function_def_to_graph``), ``tf.gradients`` of its outputs with respect to its
inputs (weighted by the incoming output gradients) is taken there, and the resulting function is
lowered in place like a call; inputs the outputs do not depend on get zero gradients, as in TF.
The gradient functions are TF's Python gradient registrations, whose math TF's C++ symbolic gradients
share. Bodies that call further library functions are refused (a typed error).
"""
from __future__ import annotations


from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.tf2hlo.registry import lowers



def _gradient_function_def(fdef, input_shapes):
    """A FunctionDef ``(xs..., dys...) -> dxs`` for ``fdef``."""
    import tensorflow as tf

    from tfxla_cluster.tf_compat import function_def_to_graph, graph_to_function_def

    if any(a.func.name for n in fdef.node_def for a in n.attr.values() if a.HasField("func")):
        raise UnimplementedError(f"SymbolicGradient of {fdef.signature.name}, which calls other functions")
    fg = function_def_to_graph(fdef, [tf.TensorShape(s) for s in input_shapes])
    with fg.as_default():
        dys = [tf.compat.v1.placeholder(o.dtype, o.shape, name=f"dy{i}") for i, o in enumerate(fg.outputs)]
        grads = tf.gradients(fg.outputs, fg.inputs, grad_ys=dys)
        grads = [g if g is not None else tf.zeros_like(x) for g, x in zip(grads, fg.inputs)]
        grads = [tf.identity(g, name=f"dx{i}") for i, g in enumerate(grads)]
    gfdef = graph_to_function_def(fg, fg.get_operations(), list(fg.inputs) + dys, grads)
    return gfdef


@lowers("SymbolicGradient")
def _symbolic_gradient(ctx, node):
    from tfxla_cluster.graph import Graph
    from tfxla_cluster.graph.function import instantiate

    fname = ctx.attr("f")
    lowerer = ctx.lowerer
    fdef = lowerer.graph.function(fname)
    if fdef is None:
        raise InvalidArgumentError(f"function '{fname}' is not in the graph's library")
    n_in, n_out = len(fdef.signature.input_arg), len(fdef.signature.output_arg)
    if ctx.num_inputs != n_in + n_out or len(node.outputs) != n_in:
        raise InvalidArgumentError(f"SymbolicGradient of {fname} needs {n_in} inputs and {n_out} output "
                                   f"gradients and has {n_in} outputs; got {ctx.num_inputs} inputs, "
                                   f"{len(node.outputs)} outputs")
    gfdef = _gradient_function_def(fdef, [list(ctx.input_dims(i)) for i in range(n_in)])
    # A name unique among this lowering's functions (deterministic: no process-wide counter).
    k = 0
    while f"{fname}_symbolic_gradient_{k}" in lowerer._functions:
        k += 1
    gfdef.signature.name = f"{fname}_symbolic_gradient_{k}"
    lowerer._functions[gfdef.signature.name] = Graph(instantiate(gfdef, lowerer.graph.library), assign_devices=False)
    args = [ctx.input_value(i) for i in range(ctx.num_inputs)]
    _, rets = lowerer.lower_function_body(gfdef.signature.name, args, ctx.b)
    return rets
