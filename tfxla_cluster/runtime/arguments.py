"""Call arguments → the flat tensors a traced concrete function takes, exactly as ``tf.function`` binds them.

Stage: runtime (each call of a :class:`tfxla_cluster.runtime.function.Function`, after TF picked or traced the
concrete function). Guarantee: the list returned is what TF's ``tracing_compilation.call_function`` would pass
to ``ConcreteFunction._call_flat`` for the same call, so every argument ``tf.function`` accepts is accepted
here and converted the same way, and every argument it rejects is rejected with TF's exception and text:

- with an ``input_signature``, arguments are first cast to the signature (a numpy float64 array or a Python
  list given for a float32 ``TensorSpec`` becomes a float32 tensor; a wrong dtype or shape is TF's
  ``TypeError: Binding inputs to tf.function failed ...``);
- a ``tf.Variable`` argument becomes its resource handle (the concrete function's input is a resource);
- Python scalars and other non-tensor values traced as constants are not inputs.
"""
from __future__ import annotations

from typing import Any


def flat_inputs(tf_function: Any, concrete: Any, args: tuple, kwargs: dict) -> list:
    """The tensors of the call ``tf_function(*args, **kwargs)`` for ``concrete`` (captured inputs excluded)."""
    from tfxla_cluster.tf_compat import bind_call_inputs

    args, kwargs = bind_call_inputs(tf_function, args, kwargs)
    # TF's call_function: bind to the concrete function's own type and unpack its tensors (a variable
    # unpacks to its handle, a traced constant to nothing).
    function_type = concrete.function_type
    return list(function_type.unpack_inputs(function_type.bind(*args, **kwargs)))
