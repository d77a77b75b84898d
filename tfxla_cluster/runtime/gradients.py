"""Calls of a compiled function that a gradient tape watches.

Stage: runtime, per call. TF answers an eager call of a ``tf.function`` that a ``tf.GradientTape`` watches
(``ConcreteFunction._call_flat``) with a pair of functions built from the traced graph: a *forward*
function that also returns the intermediates the gradient needs, and a *backward* function taking the
output gradients and those intermediates. It runs the forward, and records the call on the tape with the
backward; both are instantiated like any function, so TF's auto-clustering clusters each of them, and under
``jit_compile=True`` XLA compiles each whole (the pair carries the function's attributes,
``_XlaMustCompile`` included).

A rewritten graph's launch nodes have no gradient, so a taped call of ours does what TF does, with our
pipeline in XLA's place: TF builds the pair (its gradient rules, its choice of intermediates), the forward
function is compiled and run by us — with recording stopped, since its ops are recorded as one call — and
the tape records our backward: TF's backward function compiled by us the first time a gradient is taken.
A backward function called under a tape again (higher-order gradients, a persistent tape) takes the same
road. Calls with forward-mode tangents (``tf.autodiff.ForwardAccumulator``) need the jvp functions TF builds
around the pair: they run TF's own function (TF's runtime, not ours).

Guarantees: values and gradients are TF's (the same graphs, compiled by us); nothing of TF's pair is
changed, so a TF call of the same concrete function keeps TF's own backward.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from tfxla_cluster import tf_compat

# Sentinel: the call is not watched by any tape (the caller runs its graph as usual).
UNWATCHED = object()


class TapedCalls:
    """The forward and backward functions of one concrete function's taped calls, compiled by ``compile``
    (a concrete function → its :class:`~tfxla_cluster.runtime.function.CompiledGraph`) on first use."""

    def __init__(self, compile: Callable[[Any], Any]) -> None:
        self._compile = compile
        self._lock = threading.Lock()
        # id(TF's pair object) → (the pair, our compiled forward, our backward); the pair is kept so its
        # id stays its own (TF caches the pair on its concrete function, per kind of tape).
        self._pairs: dict[int, tuple[Any, Any, "Backward"]] = {}

    def call(self, concrete: Any, tensor_inputs: list, captured_inputs: list) -> Any:
        """The structured result of a call of ``concrete`` under a tape, recorded on it; ``UNWATCHED`` when
        no tape watches these arguments."""
        args = [*tensor_inputs, *captured_inputs]
        call = tf_compat.taped_forward(concrete, args)
        if call is None:
            return UNWATCHED
        forward, functions, forward_args, tangents = tf_compat.forward_backward_parts(call)
        if tangents:   # forward-mode accumulators: TF's jvp functions (see the module docstring)
            return tf_compat.call_flat(concrete)(tensor_inputs, captured_inputs)
        compiled, backward = self._pair(forward, functions)
        with tf_compat.stop_recording():
            flat = compiled.run_flat(forward_args)
            # A graph output that is an input passed through comes back as that very tensor; TF's call
            # makes a new one, and the tape needs it (an op whose output is its input is a cycle to it).
            passed = {id(a) for a in forward_args}
            flat = [_identity(t) if id(t) in passed else t for t in flat]
        tf_compat.record_backward(functions, backward, flat, args)
        return concrete.function_type.pack_output(flat)

    def _pair(self, forward: Any, functions: Any) -> tuple[Any, "Backward"]:
        with self._lock:
            entry = self._pairs.get(id(functions))
            if entry is None:
                compiled = self._compile(tf_compat.forward_concrete(forward))
                entry = (functions, compiled, Backward(tf_compat.backward_concrete(functions), self._compile))
                self._pairs[id(functions)] = entry
        return entry[1], entry[2]


def _identity(t: Any) -> Any:
    import tensorflow as tf

    return tf.identity(t)


class Backward:
    """TF's backward ``ConcreteFunction`` as the tape calls it (``_call_flat(gradients, captures)``), run by
    our pipeline: compiled on the first gradient taken; every other attribute is TF's function's."""

    def __init__(self, backward: Any, compile: Callable[[Any], Any]) -> None:
        self._backward = backward
        self._compile = compile
        self._compiled = None
        self._lock = threading.Lock()

    def _call_flat(self, tensor_inputs: list, captured_inputs: list) -> Any:
        with self._lock:
            if self._compiled is None:
                self._compiled = self._compile(self._backward)
        return self._compiled.call_structured(list(tensor_inputs), list(captured_inputs))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_backward", "_compile", "_compiled", "_lock"):
            raise AttributeError(name)
        return getattr(self._backward, name)
