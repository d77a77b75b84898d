"""Expanders and canonicalisers that XLA:CPU runs before simplification (cpu_compiler.cc).

- ``CallInliner`` (xla/service/call_inliner.cc): every ``call`` is replaced by a copy of its callee's
  instructions; the callee is dropped once nothing calls it.
- ``LogisticExpander`` (xla/service/logistic_expander.cc): ``logistic(x)`` becomes
  ``1 / (1 + exp(-x))`` with the constants as broadcast scalars, so fusion and codegen only see exp.
- ``DotDecomposer`` (xla/service/dot_decomposer.cc): a dot is canonical when its batch dimensions are
  the leading dimensions 0..b-1 of both operands (in order), it has exactly one contracting dimension,
  and each operand has at most one non-contracting, non-batch dimension. Others are rewritten as
  ``transpose → reshape → canonical dot → reshape``: each operand is transposed to
  ``[batch..., free..., contracting...]`` (rhs: ``[batch..., contracting..., free...]``) and reshaped to
  ``[batch..., M, K]`` / ``[batch..., K, N]`` (M or N left out when an operand has no free dimension,
  K = 1 when there is no contracting dimension).
- ``TransposeFolding`` (xla/hlo/transforms/simplifiers/transpose_folding.cc), with XLA:CPU's policy:
  a ``transpose {1,0}`` feeding a rank-2, non-batch dot is folded into the dot's contracting
  dimensions (the GEMM reads its operand transposed).
- ``TopkRewriter`` (xla/service/topk_rewriter.cc), with XLA:CPU's policy (f32 data): a sort along the
  last dimension of an f32 rank-1/2 array (alone, or with an s32 iota of the sort dimension), ordered by
  a NaN-safe "greater than" (``compare(p0, p1), direction=GT, type=TOTALORDER``), whose outputs are only
  read through slices of the first k elements, becomes ``custom-call "TopK"`` returning
  ``(values[..., k], s32 indices[..., k])`` — XLA:CPU's top-k runtime routine instead of a full sort.
  Codegen must provide that routine; ``--xla_disable_hlo_passes=topk-rewriter`` keeps the sort.
- ``TopkDecomposer`` (xla/service/topk_decomposer.cc): the ``topk`` opcode (XLA prints it in
  unoptimized modules, e.g. jax's ``lax.top_k``) becomes a stable ``sort`` of ``(x, s32 iota)`` along the
  last dimension by ``compare(p0.lhs, p0.rhs), direction=GT`` (``LT`` with ``largest=false``),
  ``type=TOTALORDER``, read through slices of the first k — the form ``TopkRewriter`` recognises.
- ``ConvolutionGroupConverter`` (xla/service/convolution_group_converter.cc), with XLA:CPU's policy for
  feature groups (after the BF16 float normalisation: not F16, not F32, where Eigen's runtime takes grouped
  convolutions): a grouped convolution whose filter has one input feature per group (depthwise, any
  multiplier) becomes a dense one over ``select(group mask, broadcast(filter), 0)`` (the filter repeated
  over every input feature, zero outside its own group). The dense convolution multiplies the other
  groups' inputs by 0, so a NaN or infinite input element gives NaN in every output feature whose window
  reaches it, as in TF's XLA (f64 ``depthwise_conv2d``). Groups of several input features become a
  base-dilated convolution in XLA, whose holes XLA's loop skips: the same sums, left grouped here.
- ``BatchGroupHoles``: the values that the batch-group part of ``ConvolutionGroupConverter`` changes in
  XLA:CPU (NaN spread through the holes of the base-dilated convolution it makes); the batch-grouped
  convolution itself stays (see the class).
Batch-norm expansion does not apply: the IR has no batch-norm opcodes (tf2xla lowers them already).
"""
from __future__ import annotations

from math import prod

from tfxla_cluster.hlo import attrs as A
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType, Shape
from tfxla_cluster.passes.pass_ import HloPass
from tfxla_cluster.passes.util import UseGraph, constant_instruction, make_scalar_like, non_fusion_computations


class CallInliner(HloPass):
    name = "call-inliner"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        # Callers after callees: inlining the callee's own calls first keeps the copies flat.
        for comp in module.computation_post_order():
            # (not a small call SmallWhileLoopHoisting made: a second run of the pipeline keeps it, as it is)
            calls = [i for i in comp.instructions if i.opcode is O.CALL and not A.is_small_call(i)]
            if not calls:
                continue
            g = UseGraph(comp)
            for call in calls:
                inline_call(g, call)
                changed = True
            g.finish()
        if changed:
            module.remove_unused_computations()
        return changed


def inline_call(g: UseGraph, call: HloInstruction) -> HloInstruction:
    """Copy ``call``'s callee into ``g.comp`` and replace the call by the copied root."""
    callee = call.to_apply
    mapping: dict[int, HloInstruction] = {}
    for instr in callee.post_order():
        if instr.opcode is O.PARAMETER:
            mapping[id(instr)] = call.operands[instr.parameter_number]
            continue
        clone = instr.clone([mapping[id(o)] for o in instr.operands])
        if clone.metadata is None:
            clone.metadata = call.metadata
        mapping[id(instr)] = g.add(clone)
    new_root = mapping[id(callee.root)]
    g.replace(call, new_root)
    return new_root


class LogisticExpander(HloPass):
    name = "logistic-expander"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for instr in comp.post_order():
                if instr.opcode is not O.LOGISTIC or instr.parent is not comp:
                    continue
                x = instr.operands[0]
                one = make_scalar_like(g, x.shape, 1.0, like=instr)
                exp = g.make(O.EXP, [g.make(O.NEGATE, [x], like=instr)], like=instr)
                denominator = g.make(O.ADD, [one, exp], like=instr)
                g.replace(instr, g.make(O.DIVIDE, [one, denominator], instr.shape, like=instr))
                changed = True
            g.finish()
        return changed


def is_canonical_dot(dot: HloInstruction) -> bool:
    dn = dot.dot_dimension_numbers
    batch = len(dn.lhs_batch_dimensions)
    canonical_batch = tuple(range(batch))
    return (len(dn.lhs_contracting_dimensions) == 1
            and dot.operands[0].shape.rank <= batch + 2 and dot.operands[1].shape.rank <= batch + 2
            and tuple(dn.lhs_batch_dimensions) == canonical_batch
            and tuple(dn.rhs_batch_dimensions) == canonical_batch)


def _canonical_operand(g: UseGraph, x: HloInstruction, batch, contracting, lhs: bool,
                       like: HloInstruction) -> tuple[HloInstruction, bool]:
    """Transpose+reshape one dot operand; returns it and whether it kept a free dimension."""
    dims = x.shape.dimensions
    free = [d for d in range(len(dims)) if d not in batch and d not in contracting]
    order = list(batch) + (free + list(contracting) if lhs else list(contracting) + free)
    if order != list(range(len(dims))):
        x = g.make(O.TRANSPOSE, [x], like=like, dimensions=tuple(order))
    free_size, k = prod(dims[d] for d in free), prod(dims[d] for d in contracting)
    new_dims = [dims[d] for d in batch]
    new_dims += ([free_size] if free else []) + [k] if lhs else [k] + ([free_size] if free else [])
    if list(x.shape.dimensions) != new_dims:
        x = g.make(O.RESHAPE, [x], Shape.array(x.shape.element_type, new_dims), like=like)
    return x, bool(free)


def canonicalize_dot(g: UseGraph, dot: HloInstruction) -> HloInstruction:
    dn = dot.dot_dimension_numbers
    lhs, rhs = dot.operands
    batch = len(dn.lhs_batch_dimensions)
    new_lhs, lhs_free = _canonical_operand(g, lhs, dn.lhs_batch_dimensions, dn.lhs_contracting_dimensions,
                                           True, dot)
    new_rhs, rhs_free = _canonical_operand(g, rhs, dn.rhs_batch_dimensions, dn.rhs_contracting_dimensions,
                                           False, dot)
    new_dn = A.DotDimensionNumbers((new_lhs.shape.rank - 1,), (batch,), tuple(range(batch)), tuple(range(batch)))
    out_dims = list(dot.shape.dimensions[:batch])
    if lhs_free:
        out_dims.append(new_lhs.shape.dimensions[batch])
    if rhs_free:
        out_dims.append(new_rhs.shape.dimensions[-1])
    new_dot = g.make(O.DOT, [new_lhs, new_rhs], Shape.array(dot.shape.element_type, out_dims), like=dot,
                     dot_dimension_numbers=new_dn, operand_precision=dot.operand_precision)
    new_dot.raw_attributes = dict(dot.raw_attributes)
    if new_dot.shape.compatible(dot.shape):
        return new_dot
    return g.make(O.RESHAPE, [new_dot], dot.shape, like=dot)


class DotDecomposer(HloPass):
    name = "dot_decomposer"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for instr in comp.post_order():
                if instr.opcode is O.DOT and instr.parent is comp and not is_canonical_dot(instr):
                    g.replace(instr, canonicalize_dot(g, instr))
                    changed = True
            g.finish()
        return changed


class TransposeFolding(HloPass):
    name = "transpose-folding"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for dot in comp.post_order():
                if dot.opcode is not O.DOT or dot.parent is not comp:
                    continue
                dn = dot.dot_dimension_numbers
                if dn.lhs_batch_dimensions or dot.shape.rank != 2 or \
                        any(o.shape.rank != 2 for o in dot.operands):
                    continue
                lhs_c, rhs_c = dn.lhs_contracting_dimensions, dn.rhs_contracting_dimensions
                operands = list(dot.operands)
                for k, contracting in ((0, lhs_c), (1, rhs_c)):
                    t = operands[k]
                    if t.opcode is O.TRANSPOSE and tuple(t.dimensions) == (1, 0):
                        operands[k] = t.operands[0]
                        contracting = tuple(1 - c for c in contracting)
                        if k == 0:
                            lhs_c = contracting
                        else:
                            rhs_c = contracting
                if operands == dot.operands:
                    continue
                new = g.make(O.DOT, operands, dot.shape, like=dot,
                             dot_dimension_numbers=A.DotDimensionNumbers(lhs_c, rhs_c),
                             operand_precision=dot.operand_precision)
                new.raw_attributes = dict(dot.raw_attributes)
                g.replace(dot, new)
                changed = True
            g.finish()
        return changed


def _is_nan_safe_gt(comp: HloComputation) -> bool:
    root = comp.root
    return (root.opcode is O.COMPARE and root.comparison_direction is A.ComparisonDirection.GT
            and root.comparison_type is A.ComparisonType.TOTALORDER
            and [o.opcode for o in root.operands] == [O.PARAMETER, O.PARAMETER]
            and [o.parameter_number for o in root.operands] == [0, 1])


def _topk_k(g: UseGraph, sort: HloInstruction) -> int | None:
    """k if every read of the sort is a slice of its first k elements along the last dimension."""
    rank = sort.operands[0].shape.rank
    readers = []
    if sort.shape.is_tuple:
        for gte in g.users(sort):
            if gte.opcode is not O.GET_TUPLE_ELEMENT:
                return None
            readers.extend(g.users(gte))
    else:
        readers = g.users(sort)
    ks = set()
    for s in readers:
        if s.opcode is not O.SLICE:
            return None
        dims = s.operands[0].shape.dimensions
        for d, r in enumerate(s.slices):
            if r.start != 0 or r.stride != 1 or (d != rank - 1 and r.limit != dims[d]):
                return None
        ks.add(s.slices[-1].limit)
    if len(ks) != 1 or not readers:
        return None
    k = ks.pop()
    return k if k < sort.operands[0].shape.dimensions[-1] else None


class TopkRewriter(HloPass):
    name = "topk-rewriter"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for sort in comp.post_order():
                if sort.opcode is O.SORT and sort.parent is comp:
                    changed |= self._rewrite(g, module, sort)
            g.finish()
        return changed

    def _rewrite(self, g: UseGraph, module: HloModule, sort: HloInstruction) -> bool:
        data = sort.operands[0]
        rank = data.shape.rank
        if data.shape.element_type is not PrimitiveType.F32 or rank not in (1, 2) or \
                sort.dimensions[0] != rank - 1 or len(sort.operands) > 2 or sort is g.comp.root:
            return False
        if len(sort.operands) == 2:
            iota = sort.operands[1]
            if iota.opcode is not O.IOTA or iota.iota_dimension != rank - 1 or \
                    iota.shape.element_type is not PrimitiveType.S32:
                return False
        if not _is_nan_safe_gt(sort.to_apply):
            return False
        k = _topk_k(g, sort)
        if k is None:
            return False
        x = data if rank == 2 else g.make(O.RESHAPE, [data], Shape.array(PrimitiveType.F32, (1,) + data.shape.dimensions),
                                          like=sort)
        batch = x.shape.dimensions[0]
        comparator = _scalar_gt(module)
        shape = Shape.tuple_of([Shape.array(PrimitiveType.F32, (batch, k)), Shape.array(PrimitiveType.S32, (batch, k))])
        topk = g.make(O.CUSTOM_CALL, [x], shape, like=sort, name="custom-call", custom_call_target="TopK",
                      called_computations=[comparator])
        outputs = []
        for index in range(2):
            out = g.make(O.GET_TUPLE_ELEMENT, [topk], shape.tuple_shapes[index], like=sort, tuple_index=index,
                         name="get-tuple-element")
            if rank == 1:
                out = g.make(O.RESHAPE, [out], Shape.array(out.shape.element_type, (k,)), like=sort)
            outputs.append(out)
        readers = [(0, s) for s in g.users(sort)] if not sort.shape.is_tuple else \
            [(gte.tuple_index, s) for gte in g.users(sort) for s in g.users(gte)]
        for index, s in readers:
            g.replace(s, outputs[index])
        return True


class TopkDecomposer(HloPass):
    name = "topk-decomposer"

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for topk in comp.post_order():
                if topk.opcode is O.TOPK and topk.parent is comp:
                    g.replace(topk, self._decompose(g, module, topk))
                    changed = True
            g.finish()
        return changed

    @staticmethod
    def _decompose(g: UseGraph, module: HloModule, topk: HloInstruction) -> HloInstruction:
        from tfxla_cluster.hlo.builder import HloBuilder

        x = topk.operands[0]
        et, dims = x.shape.element_type, x.shape.dimensions
        last = len(dims) - 1
        b = HloBuilder("compare-greater-than" if topk.largest else "compare-less-than")
        params = [b.parameter(n, Shape.scalar(t), f"p.{n // 2}.{'rhs' if n % 2 else 'lhs'}")
                  for n, t in enumerate((et, et, PrimitiveType.S32, PrimitiveType.S32))]
        ctype = A.ComparisonType.TOTALORDER if et.is_float else None
        b.compare(params[0], params[1], "GT" if topk.largest else "LT", ctype)
        comparator = b.build()
        module.add_computation(comparator)
        iota = g.make(O.IOTA, [], Shape.array(PrimitiveType.S32, dims), like=topk, iota_dimension=last)
        sort = g.make(O.SORT, [x, iota], Shape.tuple_of([x.shape.without_layout(), iota.shape]), like=topk,
                      dimensions=(last,), is_stable=True, called_computations=[comparator])
        limits = tuple(A.SliceRange(0, d if i < last else topk.k, 1) for i, d in enumerate(dims))
        parts = []
        for index in range(2):
            gte = g.make(O.GET_TUPLE_ELEMENT, [sort], sort.shape.tuple_shapes[index], like=topk, tuple_index=index)
            parts.append(g.make(O.SLICE, [gte], like=topk, slices=limits))
        return g.make(O.TUPLE, parts, like=topk)


class ConvolutionGroupConverter(HloPass):
    name = "convolution-group-converter"
    KEPT = frozenset({PrimitiveType.F16, PrimitiveType.F32})   # XLA:CPU's feature_group_should_expand

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for conv in comp.post_order():
                if (conv.opcode is O.CONVOLUTION and conv.parent is comp and conv.feature_group_count > 1
                        and conv.batch_group_count == 1 and conv.shape.element_type not in self.KEPT
                        and conv.operands[1].shape.dimensions[
                            conv.convolution_dimension_numbers.kernel_input_feature_dimension] == 1):
                    g.replace(conv, self._expand(g, conv))
                    changed = True
            g.finish()
        return changed

    @staticmethod
    def _expand(g: UseGraph, conv: HloInstruction) -> HloInstruction:
        """The dense convolution over the block-diagonal filter (XLA's HandleConvolution, group size 1 with
        filter expansion): mask ``[kin, kout]`` = (input feature's group == output feature's group)."""
        x, w = conv.operands
        dn, groups = conv.convolution_dimension_numbers, conv.feature_group_count
        kin, kout = dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension
        et, wdims = w.shape.element_type, list(w.shape.dimensions)
        per_group = wdims[kout] // groups
        wdims[kin] = groups
        big = Shape.array(et, wdims)
        s32 = Shape.array(PrimitiveType.S32, wdims)
        ids = [g.add(constant_instruction(v, PrimitiveType.S32, (len(v),), like=conv))
               for v in (list(range(groups)), [o // per_group for o in range(wdims[kout])])]
        masks = [g.make(O.BROADCAST, [c], s32, like=conv, dimensions=(d,)) for c, d in zip(ids, (kin, kout))]
        mask = g.make(O.COMPARE, masks, Shape.array(PrimitiveType.PRED, wdims), like=conv,
                      comparison_direction=A.ComparisonDirection.EQ)
        flat = g.make(O.RESHAPE, [w], Shape.array(et, [d for i, d in enumerate(w.shape.dimensions) if i != kin]),
                      like=conv)
        repeated = g.make(O.BROADCAST, [flat], big, like=conv, dimensions=tuple(i for i in range(len(wdims)) if i != kin))
        zero = make_scalar_like(g, big, 0, like=conv)
        filt = g.make(O.SELECT, [mask, repeated, zero], big, like=conv)
        dense = conv.clone([x, filt])
        dense.feature_group_count = 1
        return g.add(dense)


class BatchGroupHoles(HloPass):
    """The batch-group part of XLA:CPU's ``ConvolutionGroupConverter`` (``convert_batch_groups_only``, run
    on every batch-grouped convolution), as far as it changes values; the grouped convolution itself stays.

    XLA expands a convolution with ``batch_group_count`` G (the depthwise or grouped filter backprop) whose
    output features or input batch differ from G (a depthwise multiplier > 1, groups of several features)
    into a convolution over one more spatial dimension: the input's G batch groups spread out by base
    dilation G, a window of G taps (the filter's G output-feature groups) at stride G - 1, so each output
    group meets its own input group at its own tap and the G - 1 holes (zeros) at the others. Eigen's
    patches (F32, F16, BF16 after normalisation; at most 3 spatial dimensions) multiply the holes: a NaN
    or infinite filter element (an ``out_backprop`` element) of group t makes ``0·inf = NaN`` in every
    output feature of the same place within its group, in every other group, at every output position.
    This pass selects NaN there (measured against TF's XLA: ``tests/passes/test_batch_group_holes.py``).
    With as many output features and input batch as groups (depthwise, multiplier 1) XLA instead masks
    a dense convolution's off-diagonal with ``select`` and sums with ``reduce-window`` from +0: nothing
    spreads, and the sums start from +0 as ours do. F64 (and wider) convolutions are XLA's loop, which
    skips the holes."""
    name = "batch-group-holes"
    EIGEN = frozenset({PrimitiveType.F16, PrimitiveType.F32, PrimitiveType.BF16})

    def run_on_module(self, module: HloModule) -> bool:
        changed = False
        for comp in non_fusion_computations(module):
            g = UseGraph(comp)
            for conv in comp.post_order():
                if conv.opcode is O.CONVOLUTION and conv.parent is comp and self._spreads(conv):
                    nan_conv = self._expand(module, g, conv)
                    g.replace_all_uses(conv, nan_conv)   # (but the select's own use)
                    changed = True
            g.finish()
        return changed

    def _spreads(self, conv: HloInstruction) -> bool:
        G, dn = conv.batch_group_count, conv.convolution_dimension_numbers
        if G <= 1 or conv.shape.element_type not in self.EIGEN or len(dn.input_spatial_dimensions) > 2 \
                or any(w.window_reversal for w in conv.window.dimensions):
            return False
        x, w = conv.operands
        return not (w.shape.dimensions[dn.kernel_output_feature_dimension] == G
                    and x.shape.dimensions[dn.input_batch_dimension] == G)

    @staticmethod
    def _expand(module: HloModule, g: UseGraph, conv: HloInstruction) -> HloInstruction:
        """``select(other group non-finite, NaN, conv)``: per output feature, whether a filter element of
        the same place in another group is NaN or infinite (counts of non-finite elements per feature)."""
        from tfxla_cluster.hlo.builder import HloBuilder
        w, dn, G = conv.operands[1], conv.convolution_dimension_numbers, conv.batch_group_count
        kof, OF = dn.kernel_output_feature_dimension, w.shape.dimensions[dn.kernel_output_feature_dimension]
        s32, pred = PrimitiveType.S32, PrimitiveType.PRED
        b = HloBuilder("add_s32")
        b.binary(O.ADD, b.parameter(0, Shape.scalar(s32), "lhs"), b.parameter(1, Shape.scalar(s32), "rhs"))
        add = b.build()
        module.add_computation(add)
        finite = g.make(O.IS_FINITE, [w], Shape.array(pred, w.shape.dimensions), like=conv)
        bad = g.make(O.CONVERT, [g.make(O.NOT, [finite], like=conv)], Shape.array(s32, w.shape.dimensions), like=conv)
        zero = g.add(constant_instruction(0, s32, (), like=conv))
        per_feature = g.make(O.REDUCE, [bad, zero], Shape.array(s32, (OF,)), like=conv,
                             dimensions=tuple(d for d in range(w.shape.rank) if d != kof), called_computations=[add])
        grouped = g.make(O.RESHAPE, [per_feature], Shape.array(s32, (G, OF // G)), like=conv)
        total = g.make(O.REDUCE, [grouped, zero], Shape.array(s32, (OF // G,)), like=conv, dimensions=(0,),
                       called_computations=[add])
        others = g.make(O.SUBTRACT, [g.make(O.BROADCAST, [total], grouped.shape, like=conv, dimensions=(1,)),
                                     grouped], like=conv)
        spread = g.make(O.COMPARE, [others, g.make(O.BROADCAST, [zero], grouped.shape, like=conv, dimensions=())],
                        Shape.array(pred, (G, OF // G)), like=conv, comparison_direction=A.ComparisonDirection.GT)
        spread = g.make(O.RESHAPE, [spread], Shape.array(pred, (OF,)), like=conv)
        out = conv.shape
        mask = g.make(O.BROADCAST, [spread], Shape.array(pred, out.dimensions), like=conv,
                      dimensions=(dn.output_feature_dimension,))
        nan = make_scalar_like(g, out, float("nan"), like=conv)
        return g.make(O.SELECT, [mask, nan, conv], out, like=conv)


def _scalar_gt(module: HloModule) -> HloComputation:
    """``(lhs: f32[], rhs: f32[]) -> pred[]``: lhs > rhs in total order, TopK's comparator."""
    from tfxla_cluster.hlo.builder import HloBuilder
    b = HloBuilder("compare-greater-than")
    lhs = b.parameter(0, Shape.scalar(PrimitiveType.F32), "p.0.lhs")
    rhs = b.parameter(1, Shape.scalar(PrimitiveType.F32), "p.0.rhs")
    b.compare(lhs, rhs, "GT", A.ComparisonType.TOTALORDER)
    comp = b.build()
    module.add_computation(comp)
    return comp
