"""Layout assignment for XLA:CPU (xla/service/cpu/cpu_layout_assignment.cc), simplified.

Stage: after CSE, before fusion. XLA:CPU gives dots (Eigen and tiled GEMM), batch dots and Eigen
convolutions row-major operands and results, and everything else the default row-major layout
``{rank-1, ..., 0}`` too; only matrix-vector products with a constant matrix may prefer column-major,
which our codegen does not exploit. So every array shape in the module — entry parameters and result
included (TF hands XLA row-major buffers and wants row-major results back) — gets the row-major layout.

A ``bitcast`` is the one instruction whose meaning depends on layouts (it reinterprets the physical
buffer), so a bitcast whose layouts are about to change is first rewritten into the logical
``transpose -> reshape -> transpose`` it stands for. After this pass every ``reshape`` is a physical
no-op, which ``ReshapeDecomposer`` (algsimp.py) then turns into a ``bitcast``.
"""
from __future__ import annotations

from tfxla_cluster.hlo.ir import HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import Shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph


def row_major(shape: Shape) -> Shape:
    if shape.is_tuple:
        return Shape.tuple_of(row_major(s) for s in shape.tuple_shapes)
    if not shape.is_array or shape.is_token:
        return shape
    return Shape.array(shape.element_type, shape.dimensions)


def _logical_bitcast(g: UseGraph, bc: HloInstruction) -> HloInstruction:
    """The layout-independent equivalent of ``bc``: read the operand in physical order, reshape, and
    lay the result out logically (element types must match)."""
    x = bc.operands[0]
    src, dst = x.shape, bc.shape
    src_major = tuple(reversed(src.minor_to_major))
    dst_major = tuple(reversed(dst.minor_to_major))
    if src_major != tuple(range(src.rank)):
        x = g.make(O.TRANSPOSE, [x], like=bc, dimensions=src_major)
    physical = Shape.array(dst.element_type, [dst.dimensions[d] for d in dst_major])
    x = g.make(O.RESHAPE, [x], physical, like=bc)
    if dst_major != tuple(range(dst.rank)):
        inverse = [0] * dst.rank
        for k, d in enumerate(dst_major):
            inverse[d] = k
        x = g.make(O.TRANSPOSE, [x], like=bc, dimensions=tuple(inverse))
    return x


class CpuLayoutAssignment(HloPass):
    name = "layout-assignment"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computation_post_order():
            bitcasts = [i for i in comp.instructions if i.opcode is O.BITCAST and
                        (i.shape != row_major(i.shape) or i.operands[0].shape != row_major(i.operands[0].shape))
                        and i.shape.element_type is i.operands[0].shape.element_type]
            if bitcasts:
                g = UseGraph(comp)
                for bc in bitcasts:
                    g.replace(bc, _logical_bitcast(g, bc))
                g.finish()
                changed = True
            for instr in comp.instructions:
                fixed = row_major(instr.shape)
                if fixed != instr.shape:
                    instr.shape = fixed
                    changed = True
        return changed
