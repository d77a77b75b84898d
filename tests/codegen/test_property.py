"""Property test: random graphs of elementwise, broadcast, reduce, reshape, transpose and slice ops on
random shapes (size-0 and size-1 dims included) compile to code that agrees with the evaluator, with
bounds checks on. Every example is compiled once as a module whose root holds the graph twice: as
separate kernels, and as ONE loop fusion (all generators composed in one loop nest)."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.codegen.cg_helpers import check
from tfxla_cluster.hlo.attrs import FusionKind
from tfxla_cluster.hlo.builder import HloBuilder, make_scalar_computation
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape

UNARY = [O.NEGATE, O.ABS, O.TANH, O.FLOOR, O.SIGN, O.COPY]
BINARY = [O.ADD, O.SUBTRACT, O.MULTIPLY, O.MAXIMUM, O.MINIMUM]
dims_st = st.lists(st.sampled_from([1, 2, 3, 5, 7, 0]), min_size=0, max_size=3).map(tuple)


def _factorizations(n, rank):
    """A few shapes with ``n`` elements and the given rank."""
    if rank == 0:
        return [()] if n == 1 else []
    out = []
    for first in range(1, n + 1):
        if n % first == 0:
            out += [(first,) + rest for rest in _factorizations(n // first, rank - 1)]
    return out[:8]


@st.composite
def programs(draw):
    """(parameter shapes, steps): a step is a tuple the builder replays."""
    n_params = draw(st.integers(1, 2))
    shapes = [draw(dims_st) for _ in range(n_params)]
    values = list(shapes)
    steps = []
    for _ in range(draw(st.integers(1, 7))):
        k = draw(st.integers(0, len(values) - 1))
        shape = values[k]
        kind = draw(st.sampled_from(["unary", "binary", "broadcast", "reshape", "transpose", "reduce", "slice"]))
        if kind == "unary":
            steps.append(("unary", k, draw(st.sampled_from(UNARY))))
        elif kind == "binary":
            same = [j for j, s in enumerate(values) if s == shape]
            j = draw(st.sampled_from(same))
            steps.append(("binary", k, j, draw(st.sampled_from(BINARY))))
        elif kind == "broadcast":
            if len(shape) >= 4:
                continue
            extra = draw(st.sampled_from([1, 2, 4]))
            pos = draw(st.integers(0, len(shape)))
            new = shape[:pos] + (extra,) + shape[pos:]
            dims = tuple(d if d < pos else d + 1 for d in range(len(shape)))
            steps.append(("broadcast", k, new, dims))
            shape = new
        elif kind == "reshape":
            n = int(np.prod(shape))
            options = [s for r in range(0, 4) for s in _factorizations(n, r)] if n else [(0,), (2, 0), (0, 3)]
            if not options:
                continue
            new = draw(st.sampled_from(options))
            steps.append(("reshape", k, new))
            shape = new
        elif kind == "transpose":
            if not shape:  # (the evaluator returns rank-1 for a rank-0 transpose)
                continue
            perm = tuple(draw(st.permutations(range(len(shape)))))
            steps.append(("transpose", k, perm))
            shape = tuple(shape[p] for p in perm)
        elif kind == "reduce":
            dims = tuple(sorted(draw(st.sets(st.integers(0, max(len(shape) - 1, 0)), max_size=len(shape)))))
            dims = tuple(d for d in dims if d < len(shape))
            # (the evaluator has no identity for max over an empty dimension)
            empty = any(shape[d] == 0 for d in dims)
            op = O.ADD if empty else draw(st.sampled_from([O.ADD, O.MAXIMUM]))
            steps.append(("reduce", k, dims, op))
            shape = tuple(s for d, s in enumerate(shape) if d not in dims)
        else:
            if not shape:
                continue
            d = draw(st.integers(0, len(shape) - 1))
            start = draw(st.integers(0, shape[d]))
            limit = draw(st.integers(start, shape[d]))
            stride = draw(st.integers(1, 3))
            steps.append(("slice", k, d, start, limit, stride))
            shape = shape[:d] + (len(range(start, limit, stride)),) + shape[d + 1:]
        if kind in ("unary", "binary"):
            continue
        values.append(shape)
    return shapes, steps


def _replay(b: HloBuilder, params, steps):
    values = list(params)
    for step in steps:
        kind, k = step[0], step[1]
        x = values[k]
        if kind == "unary":
            values[k] = b.unary(step[2], x)
        elif kind == "binary":
            values[k] = b.binary(step[3], x, values[step[2]])
        elif kind == "broadcast":
            values.append(b.broadcast(x, step[2], step[3]))
        elif kind == "reshape":
            values.append(b.reshape(x, step[2]))
        elif kind == "transpose":
            values.append(b.transpose(x, step[2]))
        elif kind == "reduce":
            init = b.constant(0.0 if step[3] is O.ADD else -np.inf, T.F32)
            values.append(b.reduce(x, init, step[2], make_scalar_computation(step[3], T.F32)))
        else:
            _, _, d, start, limit, stride = step
            starts = [0] * x.shape.rank
            limits = list(x.shape.dimensions)
            strides = [1] * x.shape.rank
            starts[d], limits[d], strides[d] = start, limit, stride
            values.append(b.slice(x, starts, limits, strides))
    return values[-1]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2 ** 16))
def test_random_graphs_unfused_and_fused(program, seed):
    shapes, steps = program
    fb = HloBuilder("fused")
    fparams = [fb.parameter(i, Shape.array(T.F32, s), f"p{i}") for i, s in enumerate(shapes)]
    fused = fb.build(_replay(fb, fparams, steps))
    b = HloBuilder("main")
    params = [b.parameter(i, Shape.array(T.F32, s), f"x{i}") for i, s in enumerate(shapes)]
    plain = _replay(b, params, steps)
    fusion = b.fusion(params, fused, FusionKind.LOOP)
    m = HloModule("prop")
    m.add_entry_computation(b.build(b.tuple([plain, fusion])))
    m = parse_module(m.to_string())
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    check(m, *args, rtol=1e-5, atol=1e-5, signed_zero=False)
