"""Stage: codegen — sort kernels: ``sort`` and XLA:CPU's ``custom-call "TopK"``.

Per row along the sort dimension: a stable bottom-up merge sort of an index permutation (in a scratch
buffer), with the comparator computation inlined; outputs then gather their first elements in sorted
order. Stable like XLA's ``is_stable`` sort, so equal keys keep their input order.
"""
from __future__ import annotations

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import leaves
from tfxla_cluster.codegen.elemental import FusedEmitter
from tfxla_cluster.codegen.kernel_builder import KernelBuilder, array_operands, thunk
from tfxla_cluster.codegen.loops import Index, emit_loop_nest, for_range, if_else_value
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T
from tfxla_cluster.hlo.shape import Shape


@thunk(O.SORT)
def _sort(prog, instr, operands, out) -> None:
    operands = array_operands(instr, operands)
    kb = KernelBuilder(prog, instr.name)
    ins = [kb.array(r) for r in operands]
    outs = [(kb.array(r), k) for k, r in enumerate(leaves(out))]
    emit_sort(prog, kb, instr.name, ins, outs, instr.to_apply, instr.dimensions[0], "sort")


def _topk(prog, instr, operands, out) -> None:
    """XLA:CPU's ``custom-call "TopK"``: the first k of a stable sort along the last dim by the attached
    comparator, as (values, s32 indices)."""
    operands = array_operands(instr, operands)
    if not (instr.shape.is_tuple and len(instr.shape.tuple_shapes) == 2 and len(operands) == 1):
        raise UnimplementedError(f"custom-call TopK %{instr.name} must map one operand to (values, indices)")
    kb = KernelBuilder(prog, instr.name)
    values, indices = leaves(out)
    comparator = instr.called_computations[0]
    dim = operands[0].shape.rank - 1
    ins = [kb.array(operands[0])]
    if comparator.num_parameters == 4:  # XLA's form: (values lhs, rhs, indices lhs, rhs)
        ins.append(_Positions(kb.builder, Shape(T.S32, operands[0].shape.dimensions), dim))
    emit_sort(prog, kb, instr.name, ins, [(kb.array(values), 0), (kb.array(indices), "index")], comparator, dim,
              "topk")


class _Positions:
    """An s32 "array" whose element is its own position along ``dim`` (the iota TopK's indices come from),
    read like an ``IrArray`` by ``emit_sort``'s comparator calls."""

    def __init__(self, b, shape: Shape, dim: int) -> None:
        self.b, self.shape, self.dim, self.et = b, shape, dim, T.S32

    def load(self, index):
        return self.b.trunc(index.get_dims(self.b)[self.dim], t.I32)


def emit_sort(prog, kb, name, ins, outs, comp, dim, kind) -> None:
    """Per row along ``dim``: a stable bottom-up merge sort of an index permutation, comparing with
    ``comp`` over all ``ins`` (params: lhs/rhs of input 0, then of input 1, ...); then each output
    (array, source) takes ``ins[source]`` — or, for source "index", the position — for its first
    ``out.dims[dim]`` sorted elements."""
    b, kctx = kb.builder, kb.kctx
    shape = ins[0].shape
    n = shape.dimensions[dim]
    if shape.num_elements == 0:
        prog.call_kernel(kb, name, kind, 0)
        return
    perm_ref = prog.scratch(Shape(T.S64, (2 * n,)), name + ".perm")
    perm = kb.array(perm_ref)
    em = FusedEmitter(kctx, None, [])
    rows = Shape(T.S32, tuple(1 if d == dim else x for d, x in enumerate(shape.dimensions)))

    def at(row_dims, j):
        dims = list(row_dims)
        dims[dim] = j
        return dims

    def less(row_dims, a, c):
        args = []
        for arr in ins:
            args += [arr.load(Index(at(row_dims, a), arr.shape)), arr.load(Index(at(row_dims, c), arr.shape))]
        return em.call(comp, args)

    def row_body(idx):
        rd = idx.get_dims(b)
        with for_range(b, 0, n, "init") as j:
            perm.store_offset(j, j)
        src = kctx.alloca(t.I64, "src")
        b.store(t.i64(0), src)
        width = kctx.alloca(t.I64, "width")
        b.store(t.i64(1), width)
        fn = b.block.function
        head, body, done = (fn.append_basic_block(f"msort.{x}") for x in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        w = b.load(width)
        b.cbranch(b.icmp_signed("<", w, t.i64(n)), body, done)
        b.position_at_end(body)
        s_off = b.load(src)
        d_off = b.sub(t.i64(n), s_off)
        nblocks = b.udiv(b.add(t.i64(n - 1), b.mul(w, t.i64(2))), b.mul(w, t.i64(2)))
        with for_range(b, 0, nblocks, "blk") as blk:
            start = b.mul(blk, b.mul(w, t.i64(2)))

            def clamp(v):
                return b.select(b.icmp_signed(">", v, t.i64(n)), t.i64(n), v)
            mid, end = clamp(b.add(start, w)), clamp(b.add(start, b.mul(w, t.i64(2))))
            i_p, j_p = kctx.alloca(t.I64, "mi"), kctx.alloca(t.I64, "mj")
            b.store(start, i_p)
            b.store(mid, j_p)
            with for_range(b, start, end, "mk") as k:
                i, j = b.load(i_p), b.load(j_p)
                right_done = b.icmp_signed(">=", j, end)
                left_done = b.icmp_signed(">=", i, mid)

                def compare():
                    pi = perm.load_offset(b.add(s_off, i))
                    pj = perm.load_offset(b.add(s_off, j))
                    return less(rd, pj, pi)  # stable: take the right one only if strictly less
                take_right = if_else_value(
                    kctx, right_done, lambda: ir.Constant(t.I1, 0),
                    lambda: if_else_value(kctx, left_done, lambda: ir.Constant(t.I1, 1), compare, t.I1), t.I1)
                pick = b.select(take_right, j, i)
                perm.store_offset(b.add(d_off, k), perm.load_offset(b.add(s_off, pick)))
                b.store(b.select(take_right, i, b.add(i, t.i64(1))), i_p)
                b.store(b.select(take_right, b.add(j, t.i64(1)), j), j_p)
        b.store(d_off, src)
        b.store(b.mul(w, t.i64(2)), width)
        b.branch(head)
        b.position_at_end(done)
        s_off = b.load(src)
        for dst, source in outs:
            with for_range(b, 0, dst.shape.dimensions[dim], "gather") as j:
                p = perm.load_offset(b.add(s_off, j))
                if source == "index":
                    v = b.trunc(p, t.value_type(dst.et)) if dst.et.bit_width < 64 else p
                else:
                    v = ins[source].load(Index(at(rd, p), ins[source].shape))
                dst.store(Index(at(rd, j), dst.shape), v)

    emit_loop_nest(kctx, rows, row_body, 0, rows.num_elements, rows.rank <= 1)
    prog.call_kernel(kb, name, kind, 1)


@thunk(O.CUSTOM_CALL)
def _custom_call(prog, instr, operands, out) -> None:
    if instr.custom_call_target == "TopK":
        return _topk(prog, instr, operands, out)
    raise UnimplementedError(f"native code for custom-call \"{instr.custom_call_target}\" (%{instr.name}) "
                             "is not implemented")
