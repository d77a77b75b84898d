"""Opcode table, shapes, names, IR helpers and the builder's shape inference."""
import numpy as np
import pytest

from tfxla_cluster.errors import InternalError, InvalidArgumentError
from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo import opcode as ops
from tfxla_cluster.hlo.builder import HloBuilder, make_comparator, make_scalar_computation
from tfxla_cluster.hlo.ir import HloModule, NameUniquer
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape, primitive_type_from_dtype
from tfxla_cluster.hlo.verifier import verify_module


def test_opcode_table():
    assert O("count-leading-zeros") is O.CLZ and O.CLZ.text == "count-leading-zeros"
    assert O.ADD.arity == 2 and O.TUPLE.arity == ops.VARIADIC and O.TUPLE.is_variadic
    assert O.from_text("exponential-minus-one") is O.EXPM1
    assert len({o.text for o in O}) == len(O)
    assert ops.ELEMENTWISE_UNARY.isdisjoint(ops.ELEMENTWISE_BINARY)
    assert ops.COMMUTATIVE <= ops.ELEMENTWISE_BINARY
    assert all(o.arity == 1 for o in ops.ELEMENTWISE_UNARY) and all(o.arity == 2 for o in ops.ELEMENTWISE_BINARY)


def test_is_expensive_follows_instruction_fusion():
    b = HloBuilder("e")
    f = b.parameter(0, Shape.array(T.F32, [4]), "f")
    i = b.parameter(1, Shape.array(T.S32, [4]), "i")
    c = b.parameter(2, Shape.array(T.C64, [4]), "c")
    assert ops.is_expensive(b.exp(f)) and not ops.is_expensive(b.add(f, f))
    assert not ops.is_expensive(b.sin(f)) and ops.is_expensive(b.sin(c))
    assert ops.is_expensive(b.divide(f, f)) and ops.is_expensive(b.divide(i, i))
    assert not ops.is_expensive(b.divide(i, b.full(3, T.S32, [4])))


def test_shapes():
    s = Shape.array(T.F32, [2, 3])
    assert str(s) == "f32[2,3]{1,0}" and s.to_string(layout=False) == "f32[2,3]"
    assert str(Shape.scalar(T.PRED)) == "pred[]"
    t = Shape.tuple_of([Shape.array(T.F32, [2]), Shape.scalar(T.S32)])
    assert str(t) == "(f32[2]{0}, s32[])" and t.leaves() == [Shape.array(T.F32, [2]), Shape.scalar(T.S32)]
    assert Shape.array(T.F32, [2, 3], [0, 1]) != s and Shape.array(T.F32, [2, 3], [0, 1]).compatible(s)
    assert s.num_elements == 6 and s.byte_size() == 24 and Shape.array(T.BF16, [4]).byte_size() == 8
    assert primitive_type_from_dtype(np.float16) is T.F16 and T.BF16.dtype.name == "bfloat16"
    assert T.C64.component_type is T.F32 and T.F32.mantissa_bits == 23 and T.BF16.exponent_bits == 8
    with pytest.raises(InvalidArgumentError):
        Shape.array(T.F32, [2], [1])
    with pytest.raises(InvalidArgumentError):
        primitive_type_from_dtype(np.dtype("U3"))


def test_name_uniquer_matches_xla():
    u = NameUniquer()
    got = [u.get_unique_name(n) for n in ["add", "add", "add.1", "add", "x.3", "x.3", "x", "f32", "3d", "a b"]]
    assert got == ["add", "add.1", "add.2", "add.3", "x.3", "x.0", "x.1", "f32_", "_3d", "a_b"]


def test_builder_infers_shapes_and_names():
    b = HloBuilder("main")
    x = b.parameter(0, Shape.array(T.F32, [8, 16]), "x")
    w = b.parameter(1, Shape.array(T.F32, [16, 4]), "w")
    with b.metadata(op_type="MatMul", op_name="dense/MatMul"):
        y = b.dot(x, w)
    assert str(y.shape) == "f32[8,4]{1,0}" and y.metadata.op_name == "dense/MatMul"
    z = b.full(0.0, T.F32, y.shape.dimensions)
    r = b.maximum(y, z)
    s = b.reduce(r, b.constant(0.0, T.F32), [1], make_scalar_computation(O.ADD, T.F32))
    assert s.shape == Shape.array(T.F32, [8]) and s.metadata is None
    t = b.tuple([r, s])
    m = HloModule("m")
    m.add_entry_computation(b.build(t))
    verify_module(m)
    names = [i.name for i in m.entry.instructions]
    assert names[:3] == ["x.1", "w", "dot"]  # "x" is taken by the add reducer's parameter
    assert "constant.1" in names
    assert m.to_string().count("ENTRY") == 1 and "%add_F32" in m.to_string()


def test_builder_rejects_bad_shapes():
    b = HloBuilder("main")
    x = b.parameter(0, Shape.array(T.F32, [2, 3]), "x")
    v = b.parameter(1, Shape.array(T.F32, [3]), "v")
    with pytest.raises(InvalidArgumentError, match="identical dimensions"):
        b.add(x, v)
    with pytest.raises(InvalidArgumentError, match="contracting dimension sizes differ"):
        b.dot(x, x)
    with pytest.raises(InvalidArgumentError, match="does not match output dimension"):
        b.broadcast(v, [3, 2], [1])
    with pytest.raises(InvalidArgumentError, match="floating-point"):
        b.floor(b.convert(x, T.S32))
    other = HloBuilder("other")
    y = other.parameter(0, Shape.array(T.F32, [2, 3]), "y")
    with pytest.raises(InvalidArgumentError, match="another computation"):
        b.add(x, y)


def test_builder_covers_structured_ops():
    b = HloBuilder("main")
    img = b.parameter(0, Shape.array(T.F32, [1, 8, 8, 3]), "img")
    k = b.parameter(1, Shape.array(T.F32, [3, 3, 3, 5]), "k")
    conv = b.convolution(img, k, A.Window.make([3, 3], strides=[2, 2], padding=[(1, 1), (1, 1)]),
                         "b01f_01io->b01f")
    assert conv.shape.dimensions == (1, 4, 4, 5)
    pool = b.reduce_window(conv, b.constant(np.float32(-np.inf)),
                           A.Window.make([1, 2, 2, 1], strides=[1, 2, 2, 1]),
                           make_scalar_computation(O.MAXIMUM, T.F32))
    assert pool.shape.dimensions == (1, 2, 2, 5)
    idx = b.constant(np.array([[0], [3]], np.int32))
    g = b.gather(img, idx, A.GatherDimensionNumbers((1, 2, 3), (0,), (1,), 1), [1, 1, 8, 3])
    assert g.shape.dimensions == (2, 1, 8, 3)
    srt = b.sort([conv, b.iota(Shape.array(T.S32, [1, 4, 4, 5]), 3)], 3,
                 make_comparator("GT", [T.F32, T.S32]))
    assert srt.shape.is_tuple and len(srt.shape.tuple_shapes) == 2
    sl = b.slice(conv, [0, 0, 1, 0], [1, 4, 4, 5], [1, 2, 1, 1])
    assert sl.shape.dimensions == (1, 2, 3, 5)
    pd = b.pad(sl, b.constant(np.float32(0)), [(0, 0), (1, -1), (0, 0, 2), (0, 0)])
    assert pd.shape.dimensions == (1, 2, 7, 5)
    bc = b.bitcast_convert(pd, T.U8)
    assert bc.shape.dimensions == (1, 2, 7, 5, 4)
    rbg = b.rng_bit_generator(b.constant(np.zeros(3, np.uint64)), Shape.array(T.U32, [4]),
                              A.RandomAlgorithm.PHILOX)
    assert str(rbg.shape) == "(u64[3]{0}, u32[4]{0})"
    m = HloModule("m")
    m.add_entry_computation(b.build(b.tuple([pool, g, sl, pd])))
    verify_module(m)
    assert parse_module(m.to_string()).to_string() == m.to_string()


def test_ir_helpers():
    b = HloBuilder("main")
    x = b.parameter(0, Shape.array(T.F32, [4]), "x")
    n = b.negate(x)
    dead = b.exp(x)
    r = b.add(n, n)
    comp = b.build(r)
    assert comp.users()[n] == [r] and comp.users()[x] == [n, dead]
    n2 = b.abs(x)
    comp.replace_all_uses(n, n2)
    assert r.operands == [n2, n2]
    assert comp.remove_dead_instructions()
    assert dead not in comp.instructions and n not in comp.instructions
    # post_order puts n2 (appended after r) before its user.
    assert [i.name for i in comp.post_order()] == ["x", "abs", "add"]
    with pytest.raises(InternalError, match="shapes differ"):
        comp.replace_all_uses(r, b.convert(x, T.S32))
    with pytest.raises(InternalError, match="cannot remove root"):
        comp.remove_instruction(r)


def test_module_computation_order_is_callees_first():
    text = """HloModule m

ENTRY %main (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  ROOT %c = f32[] call(%a), to_apply=%f
}
"""
    with pytest.raises(InvalidArgumentError, match="computation does not exist: f"):
        parse_module(text)
    b = HloBuilder("main")
    a = b.parameter(0, Shape.scalar(T.F32), "a")
    inner = HloBuilder("f")
    inner.negate(inner.parameter(0, Shape.scalar(T.F32), "p"))
    f = inner.build()
    b.call(f, [a])
    m = HloModule("m")
    m.add_entry_computation(b.build())
    assert [c.name for c in m.computation_post_order()] == ["f", "main"]
    text = m.to_string()
    assert text.index("%f (") < text.index("ENTRY %main")
    unused = make_scalar_computation(O.ADD, T.F32)
    m.add_computation(unused)
    assert m.remove_unused_computations() and unused not in m.computations


def test_clone_instruction_and_module():
    from tfxla_cluster.hlo import evaluate
    b = HloBuilder("main")
    x = b.parameter(0, Shape.array(T.F32, [3]), "x")
    r = b.reduce(x, b.constant(np.float32(0)), [0], make_scalar_computation(O.ADD, T.F32))
    m = HloModule("m")
    m.add_entry_computation(b.build(r))
    c = r.clone()
    assert c.parent is None and c.operands == r.operands and c.called_computations == r.called_computations
    assert c.dimensions == (0,) and c.name == r.name
    copy = m.clone()
    copy.entry.root.operands[1].literal = np.float32(10)
    arg = np.ones(3, np.float32)
    assert evaluate(m, arg) == 3 and evaluate(copy, arg) == 13
    assert parse_module(copy.to_string()).computations[0].is_fusion_computation is False


def _reference_post_order(comp) -> list:
    """The plain DFS ``post_order`` must equal: list order, each instruction after its unvisited operands
    and control predecessors (first operand first), every instruction once."""
    order, done = [], set()

    def visit(instr):
        if id(instr) in done:
            return
        for pred in instr.operands + instr.control_predecessors:
            visit(pred)
        if id(instr) not in done:
            done.add(id(instr))
            order.append(instr)
    for instr in comp.instructions:
        visit(instr)
    return order


@pytest.mark.parametrize("seed", range(40))
def test_post_order_equals_a_plain_dfs_on_shuffled_lists(seed):
    """post_order keeps the ordered prefix of the list and emits an instruction whose operands are out at
    once: the same order as a DFS from every instruction in list order, on lists a pass leaves behind
    (instructions appended after their users, moved, listed twice; control predecessors)."""
    rng = np.random.default_rng(seed)
    b = HloBuilder("main")
    nodes = [b.parameter(k, Shape.scalar(T.F32), f"p{k}") for k in range(3)]
    for _ in range(int(rng.integers(5, 40))):
        picks = rng.choice(len(nodes), size=2)
        nodes.append(b.add(nodes[picks[0]], nodes[picks[1]]) if rng.random() < 0.7 else b.negate(nodes[picks[0]]))
    comp = b.build(nodes[-1])
    instrs = list(comp.instructions)
    if seed % 4 == 1:      # a few instructions moved to the end (appended after their users)
        for _ in range(3):
            instrs.append(instrs.pop(int(rng.integers(0, len(instrs)))))
    elif seed % 4 == 2:    # shuffled
        rng.shuffle(instrs)
    elif seed % 4 == 3:    # listed twice, and a control predecessor
        instrs.insert(int(rng.integers(0, len(instrs))), instrs[int(rng.integers(0, len(instrs)))])
        late = nodes.index(instrs[-1])   # (made after its control predecessor: no cycle)
        if late > 0:
            nodes[late].control_predecessors = [nodes[int(rng.integers(0, late))]]
    comp.instructions = instrs
    got = comp.post_order()
    assert [i.name for i in got] == [i.name for i in _reference_post_order(comp)]
    if seed % 4 == 0:
        assert got == comp.instructions and got is not comp.instructions
