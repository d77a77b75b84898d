"""Stage: codegen — an unfused ``concatenate`` as copies of contiguous runs (XLA:CPU's EmitFastConcatenate).

When every operand has the output's layout, the concatenated dimension splits the output's physical order
into outer dimensions (more major) and a run: the concatenated dimension and the ones minor to it. Along the
outer index the output's run is the operands' runs one after the other, each contiguous in its operand. A
work item is one outer index; it copies each operand's run into place with ``memcpy`` (XLA's
``EmitTransferElements`` does the same, per outer index and operand).

The run lengths (in bytes) come from the kernel's table (``KernelBuilder.count``): every concatenation of
the same number of operands — DenseNet's 58, of 96 to 1,024 channels; InceptionV3's branches of any
element type — is one function, optimised and compiled once (issue 17). A kernel that no other size shares
gets them back as constants (``ProgramEmitter._fix_counts``).

Guarantee: the output holds the operands' bytes unchanged (a copy, as the elemental loop's load and store).
Other concatenations (mixed layouts, sub-byte element types, an operand in the output's own buffer) take the
elemental loop kernel of ``loop.py``.
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import BufferRef
from tfxla_cluster.codegen.kernel_builder import array_operands, thunk
from tfxla_cluster.codegen.kernels.loop import emit_loop_thunk
from tfxla_cluster.codegen.loops import for_range, major_to_minor
from tfxla_cluster.hlo.opcode import HloOpcode as O


def _runs(instr, operands: list[BufferRef], out) -> tuple[int, list[int]] | None:
    """(outer items, each operand's run in bytes) when ``instr`` concatenates by copies, else None."""
    if not isinstance(out, BufferRef):
        return None
    shape = out.shape
    bits = shape.element_type.bit_width
    if bits < 8 or bits % 8 or any(r.shape.minor_to_major != shape.minor_to_major or r.slot is out.slot
                                   for r in operands):
        return None
    order = major_to_minor(shape)
    cut = order.index(instr.dimensions[0])
    outer = prod(shape.dimensions[d] for d in order[:cut])
    return outer, [prod(r.shape.dimensions[d] for d in order[cut:]) * (bits // 8) for r in operands]


@thunk(O.CONCATENATE)
def emit_concatenate(prog, instr, operands, out) -> None:
    """``out := concatenate(operands)`` by copies of runs (see the module docstring), else the loop kernel."""
    refs = array_operands(instr, operands)
    plan = _runs(instr, refs, out)
    if plan is None:
        return emit_loop_thunk(prog, instr, operands, out)
    outer, runs = plan
    parts = [(r, n) for r, n in zip(refs, runs) if n]
    nbytes = out.shape.byte_size()
    kb = prog.kernel(instr.name)
    b = kb.builder
    if outer == 0 or not parts:
        prog.call_kernel(kb, instr.name, "concatenate", 0)
        return
    dst = kb.ptr(out.slot)
    srcs = [kb.ptr(r.slot) for r, _ in parts]
    counts = [kb.count(n) for _, n in parts]
    row = counts[0]
    for n in counts[1:]:
        row = b.add(row, n, flags=["nsw", "nuw"])
    memcpy = kb.kctx.mctx.function("llvm.memcpy.p0.p0.i64", t.VOID, [t.PTR, t.PTR, t.I64, t.I1])
    tasks = prog.tasks_for(outer, 2 * nbytes)
    with for_range(b, kb.lo, kb.hi, "cat") as item:
        at = b.mul(item, row, flags=["nsw", "nuw"])
        for src, n in zip(srcs, counts):
            from_ = b.gep(src, [b.mul(item, n, flags=["nsw", "nuw"])], inbounds=True, source_etype=t.I8)
            b.call(memcpy, [b.gep(dst, [at], inbounds=True, source_etype=t.I8), from_, n, ir.Constant(t.I1, 0)])
            at = b.add(at, n, flags=["nsw", "nuw"])
    prog.call_kernel(kb, instr.name, "concatenate", outer, tasks, 2 * nbytes)
