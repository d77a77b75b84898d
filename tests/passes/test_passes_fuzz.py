"""Random modules (elementwise chains with broadcasts, reductions, reshapes, transposes, slices,
concatenations, constants and dots) keep their values through the whole CPU pipeline."""
import numpy as np
import pytest

from tests.passes.passes_helpers import assert_same_values, random_args
from tfxla_cluster.flags import Flags
from tfxla_cluster.hlo.builder import HloBuilder, make_scalar_computation
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T, Shape
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.passes import optimize

FLAGS = Flags.parse()
SHAPE = (4, 6)


def random_module(seed: int) -> HloModule:
    rng = np.random.default_rng(seed)
    b = HloBuilder(f"fuzz_{seed}")
    add = make_scalar_computation(O.ADD, T.F32, "add")
    mx = make_scalar_computation(O.MAXIMUM, T.F32, "max")
    values = [b.parameter(k, Shape.array(T.F32, SHAPE), f"p{k}") for k in range(2)]
    vec = b.parameter(2, Shape.array(T.F32, (SHAPE[1],)), "v")

    def pick():
        return values[rng.integers(max(0, len(values) - 4), len(values))]

    def scalar(value):
        return b.broadcast(b.constant(np.float32(value)), SHAPE)

    for _ in range(int(rng.integers(6, 14))):
        kind = rng.integers(0, 12)
        x, y = pick(), pick()
        if kind == 0:
            v = b.add(x, y)
        elif kind == 1:
            v = b.multiply(x, scalar(rng.choice([0.5, 1.0, 2.0, 3.0])))
        elif kind == 2:
            v = b.subtract(x, scalar(rng.choice([0.0, 1.5])))
        elif kind == 3:
            v = b.divide(x, scalar(rng.choice([1.0, 4.0, 3.0])))
        elif kind == 4:
            v = b.exp(b.neg(b.abs(x)))
        elif kind == 5:
            v = b.maximum(x, b.broadcast(vec, SHAPE, (1,)))
        elif kind == 6:  # softmax-like row normalization
            r = b.reduce(x, b.constant(np.float32(-np.inf)), (1,), mx)
            v = b.subtract(x, b.broadcast(b.reshape(b.reshape(r, (SHAPE[0], 1)), (SHAPE[0],)), SHAPE, (0,)))
        elif kind == 7:
            r = b.reduce(x, b.constant(np.float32(0)), (0,), add)
            v = b.add(y, b.broadcast(r, SHAPE, (1,)))
        elif kind == 8:
            t = b.transpose(x, (1, 0))
            v = b.transpose(b.negate(t), (1, 0))
        elif kind == 9:
            s1 = b.slice(x, (0, 0), (2, SHAPE[1]))
            s2 = b.slice(y, (2, 0), (4, SHAPE[1]))
            v = b.concatenate([s1, s2], 0)
        elif kind == 10:
            w = b.constant(rng.standard_normal((SHAPE[1], SHAPE[1])).astype(np.float32))
            v = b.dot(x, w)
        else:
            c = b.constant(np.tile(np.arange(SHAPE[1], dtype=np.float32), (SHAPE[0], 1)))
            v = b.select(b.compare(x, y, "GT"), b.multiply(x, c), y)
        values.append(v)
    outs = [values[-1], values[int(rng.integers(3, len(values)))]]
    b.tuple(outs)
    module = HloModule(f"fuzz_{seed}")
    module.add_entry_computation(b.build())
    verify_module(module)
    return module


@pytest.mark.parametrize("seed", range(40))
def test_random_module_keeps_values(seed):
    module = random_module(seed)
    args = random_args(module, seed)
    want = evaluate(module, *args)
    module, ba = optimize(module, FLAGS)
    verify_module(module)
    assert_same_values(evaluate(module, *args), want, rtol=1e-4, atol=1e-5, context=f"seed {seed}")
    assert ba.temp_bytes >= 0
