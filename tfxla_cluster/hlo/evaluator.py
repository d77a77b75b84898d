"""Reference evaluator for HLO (XLA's HloEvaluator): ``evaluate(module, *args)``.

The semantic oracle for the rest of the pipeline: a pass is correct when ``evaluate(before)`` equals
``evaluate(after)``, a kernel when its output equals ``evaluate`` of its HLO. Values are numpy arrays
whose dtype is exactly the HLO element type (bf16 via ml_dtypes) or tuples of values.

Instructions are evaluated in ``post_order`` through one dispatch table keyed by opcode; the
semantics live next to their handlers (eval_elementwise, eval_data, eval_compute, eval_random), each
citing the XLA source it follows. Called computations are evaluated recursively; scalar computations
(reducers, comparators, map bodies, scatter combiners) are evaluated *vectorized* — fed whole arrays
where XLA feeds scalars — when they only contain elementwise instructions, and element by element
otherwise.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError
from tfxla_cluster.hlo import eval_compute, eval_data, eval_elementwise as ew, eval_random
from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType, Shape, primitive_type_from_dtype

# Instructions a scalar computation may contain and still be evaluated on whole arrays at once.
_LIFTABLE = (ops.ELEMENTWISE - {O.MAP}) | {O.PARAMETER, O.CONSTANT, O.TUPLE, O.GET_TUPLE_ELEMENT,
                                           O.RESHAPE, O.BROADCAST, O.BITCAST}
_MAX_WHILE_ITERATIONS = 10_000_000


def _unary(ev, instr, args):
    return ew.UNARY[instr.opcode](args[0])


def _binary(ev, instr, args):
    return ew.BINARY[instr.opcode](*args)


def _constant(ev, instr, args):
    if instr.literal_elided:
        raise FailedPreconditionError(f"constant %{instr.name} was printed as {{...}}; its value is unknown")
    lit = instr.literal
    return tuple(np.array(v) for v in lit) if isinstance(lit, tuple) else np.array(lit)


def _while(ev, instr, args):
    state = args[0]
    for _ in range(_MAX_WHILE_ITERATIONS):
        if not bool(ev.evaluate_computation(instr.while_condition, [state])):
            return state
        state = ev.evaluate_computation(instr.while_body, [state])
    raise FailedPreconditionError(f"while %{instr.name} ran more than {_MAX_WHILE_ITERATIONS} iterations")


def _conditional(ev, instr, args):
    selector, branch_args = args[0], args[1:]
    n = len(instr.called_computations)
    if selector.dtype == np.bool_:
        index = 0 if bool(selector) else 1
    else:
        index = int(selector)
        index = index if 0 <= index < n else n - 1  # out-of-range indices run the last branch
    return ev.evaluate_computation(instr.called_computations[index], [branch_args[index]])


def _topk(ev, instr, args):
    """XLA:CPU's "TopK" custom call: (values, s32 indices) of the k largest along the last dimension,
    ordered by the attached comparator — over values (TopkRewriter's form of a sort+slice) or, as XLA
    prints it, over (value, index) pairs."""
    (x,) = args
    k = instr.shape.tuple_shapes[0].dimensions[-1]
    idx = np.broadcast_to(np.arange(x.shape[-1], dtype=np.int32), x.shape)
    comparator = instr.called_computations[0]
    if comparator.num_parameters == 4:  # XLA's form compares (value, index) pairs
        values, indices = eval_compute.sort_along(ev, comparator, [x, idx], x.ndim - 1)
    else:
        values, indices = eval_compute.sort_along(ev, comparator, [x], x.ndim - 1, carry=[idx])
    return values[..., :k].copy(), indices[..., :k].copy()


# Custom-call targets the evaluator understands, keyed by target name.
CUSTOM_CALL_TARGETS = {"TopK": _topk}


def _custom_call(ev, instr, args):
    handler = CUSTOM_CALL_TARGETS.get(instr.custom_call_target)
    if handler is None:
        raise UnimplementedError(f"custom-call %{instr.name} (target \"{instr.custom_call_target}\") "
                                 "cannot be evaluated")
    return handler(ev, instr, args)


def _bitcast_convert(ev, instr, args):
    return ew.bitcast_convert(args[0], instr.shape.element_type, instr.shape.dimensions)


def _broadcast(ev, instr, args):
    # Scalar computations evaluated on arrays may broadcast a scalar to a scalar shape: keep the array.
    if not instr.shape.dimensions and ev.lifted:
        return args[0]
    return eval_data.broadcast(ev, instr, args)


def _bitcast(ev, instr, args):
    if not instr.shape.dimensions and ev.lifted:  # scalar reinterpretation inside a comparator
        return np.ascontiguousarray(args[0]).view(instr.shape.dtype)
    return eval_data.bitcast(ev, instr, args)


def _reshape(ev, instr, args):
    if not instr.shape.dimensions and ev.lifted:
        return args[0]
    return args[0].reshape(instr.shape.dimensions).copy()


HANDLERS = {op: _unary for op in ew.UNARY}
HANDLERS.update({op: _binary for op in ew.BINARY})
HANDLERS.update(eval_data.HANDLERS)
HANDLERS.update(eval_compute.HANDLERS)
HANDLERS.update(eval_random.HANDLERS)
HANDLERS.update({
    O.PARAMETER: lambda ev, i, a: ev.parameter_value(i),
    O.CONSTANT: _constant,
    O.COMPARE: lambda ev, i, a: ew.compare(a[0], a[1], i.comparison_direction, i.comparison_type),
    O.SELECT: lambda ev, i, a: ew.select(*a),
    O.CLAMP: lambda ev, i, a: ew.clamp(*a),
    O.CONVERT: lambda ev, i, a: ew.convert(a[0], i.shape.element_type),
    O.BITCAST_CONVERT: _bitcast_convert,
    O.REDUCE_PRECISION: lambda ev, i, a: ew.reduce_precision(a[0], i.exponent_bits, i.mantissa_bits),
    O.BROADCAST: _broadcast,
    O.RESHAPE: _reshape,
    O.BITCAST: _bitcast,
    O.TUPLE: lambda ev, i, a: tuple(a),
    O.GET_TUPLE_ELEMENT: lambda ev, i, a: a[0][i.tuple_index],
    O.CALL: lambda ev, i, a: ev.evaluate_computation(i.to_apply, a),
    O.FUSION: lambda ev, i, a: ev.evaluate_computation(i.fused_computation, a),
    O.MAP: lambda ev, i, a: ev.map_computation(i.to_apply, a),
    O.WHILE: _while,
    O.CONDITIONAL: _conditional,
    O.CUSTOM_CALL: _custom_call,
    O.OPTIMIZATION_BARRIER: lambda ev, i, a: a[0],
    O.SET_DIMENSION_SIZE: lambda ev, i, a: a[0].copy(),  # static shapes: the size is informational
    O.GET_DIMENSION_SIZE: lambda ev, i, a: np.array(i.operands[0].shape.dimensions[i.dimensions[0]], np.int32),
    O.PARTITION_ID: lambda ev, i, a: np.array(0, np.uint32),
    O.REPLICA_ID: lambda ev, i, a: np.array(0, np.uint32),
    O.AFTER_ALL: lambda ev, i, a: (),
})


def _coerce(value, shape: Shape, what: str):
    """Check an argument against a parameter shape; Python scalars and lists are cast to it."""
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
            raise InvalidArgumentError(f"{what}: expected a tuple for {shape}")
        return tuple(_coerce(v, s, f"{what}[{k}]") for k, (v, s) in enumerate(zip(value, shape.tuple_shapes)))
    typed = isinstance(value, (np.ndarray, np.generic))
    arr = np.asarray(value)
    if typed and arr.dtype != shape.dtype:
        raise InvalidArgumentError(f"{what}: expected {shape.element_type.value}, got numpy {arr.dtype}")
    arr = arr.astype(shape.dtype)
    if arr.shape != shape.dimensions:
        raise InvalidArgumentError(f"{what}: expected dimensions {list(shape.dimensions)}, got {list(arr.shape)}")
    return arr


class Evaluator:
    """Evaluates computations of one module. ``seed`` drives the stateful ``rng`` opcode."""

    def __init__(self, seed: int = 0) -> None:
        self.random = np.random.default_rng(seed)
        self.lifted = False
        self._params: list = []

    @staticmethod
    def element_type(x: np.ndarray) -> PrimitiveType:
        return primitive_type_from_dtype(x.dtype)

    def parameter_value(self, instr):
        return self._params[instr.parameter_number]

    def evaluate_computation(self, comp, args):
        """Run ``comp`` on ``args`` (one value per parameter) and return the root's value."""
        if len(args) != comp.num_parameters:
            raise InvalidArgumentError(f"computation {comp.name} takes {comp.num_parameters} arguments, "
                                       f"got {len(args)}")
        saved = self._params
        self._params = list(args)
        values: dict[int, object] = {}
        try:
            with np.errstate(all="ignore"):
                for instr in comp.post_order():
                    handler = HANDLERS.get(instr.opcode)
                    if handler is None:
                        raise UnimplementedError(f"the evaluator does not implement {instr.opcode.text}")
                    operands = [values[id(o)] for o in instr.operands]
                    try:
                        values[id(instr)] = handler(self, instr, operands)
                    except (UnimplementedError, FailedPreconditionError, InvalidArgumentError):
                        raise
                    except Exception as e:  # keep the instruction in the message
                        raise InvalidArgumentError(
                            f"evaluating %{instr.name} ({instr.opcode.text}) in %{comp.name}: "
                            f"{type(e).__name__}: {e}") from e
            return values[id(comp.root)]
        finally:
            self._params = saved

    def map_computation(self, comp, args):
        """Apply a scalar computation elementwise to same-shaped arrays (vectorized when possible)."""
        if all(i.opcode in _LIFTABLE for i in comp.instructions):
            saved, self.lifted = self.lifted, True
            try:
                out = self.evaluate_computation(comp, list(args))
            finally:
                self.lifted = saved
            shape = np.broadcast_shapes(*(np.shape(a) for a in args)) if args else ()
            if isinstance(out, tuple):
                return tuple(np.broadcast_to(o, shape).copy() for o in out)
            return np.broadcast_to(out, shape).copy()
        return self._map_elementwise(comp, args)

    def _map_elementwise(self, comp, args):
        shape = np.broadcast_shapes(*(np.shape(a) for a in args))
        flat = [np.broadcast_to(a, shape).reshape(-1) for a in args]
        results = [self.evaluate_computation(comp, [f[k:k + 1].reshape(()) for f in flat])
                   for k in range(int(np.prod(shape)))]
        root = comp.root.shape
        if root.is_tuple:
            return tuple(np.array([r[j] for r in results], dtype=s.dtype).reshape(shape)
                         for j, s in enumerate(root.tuple_shapes))
        return np.array(results, dtype=root.dtype).reshape(shape)


def evaluate_computation(comp, *args, seed: int = 0):
    args = [_coerce(a, p.shape, f"argument {k} of %{comp.name}") for k, (a, p) in enumerate(zip(args, comp.parameters))]
    return Evaluator(seed).evaluate_computation(comp, args)


def evaluate(module, *args, seed: int = 0):
    """Evaluate the entry computation of ``module`` on ``args`` (numpy arrays or Python values)."""
    entry = module.entry
    if len(args) != entry.num_parameters:
        raise InvalidArgumentError(f"module {module.name} takes {entry.num_parameters} arguments, got {len(args)}")
    return evaluate_computation(entry, *args, seed=seed)
