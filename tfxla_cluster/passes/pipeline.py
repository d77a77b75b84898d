"""The XLA:CPU HLO pipeline (xla/service/cpu/cpu_compiler.cc) and ``optimize``.

``cpu_pipeline(flags)`` lists the passes in XLA:CPU's order — the one table of pass names:

    dce                                   start clean
    call-inliner, dot_decomposer, float-normalization-bf16, batch-group-holes, convolution-group-converter,
    logistic-expander,
    rng-expander, rng-bit-generator-expander,
    topk-decomposer, topk-rewriter (only when the backend lists the "TopK" runtime routine)
                                                           expanders (RunHloPassesThroughLayoutAssn 2-4)
    simplification (fixed point, <= 25):  algsimp, simplify-sorts, simplify-conditional, tuple-simplifier,
                                          simplify-while-loops, dce, reshape-mover, constant_folding
    scatter_expander                      one-index scatters (kEliminateSimpleScatters), then, only if it
    post_scatter_expansion_simplification expanded one, the simplification fixed point again
    transpose-folding, cse                                 (step 6)
    layout-assignment                                      (CpuLayoutAssignment)
    hlo_normalization: reshape-decomposer                  reshapes (and order-keeping transposes) -> bitcast
    fusion                                                 (RunHloPassesAfterLayoutAssn 2)
    cpu-multi-output-fusion, tuple-simplifier              only with the backend option
                                          xla_cpu_use_multi_output_fusion (then fusion may not duplicate),
                                          as in XLA:CPU, where it is off by default
    simplification_after_layout_assignment (fixed point): algsimp (layout-sensitive: reshape -> bitcast;
                                          non-fusion computations only), dce, cse — TF 2.21 runs it after
                                          fusion and no simplifier between layout assignment and fusion
    fusion-namer                                           names fusions like XLA's dumps
    small-while-loop-hoisting                              a small while becomes a call tagged
                                          xla_cpu_small_call (XLA runs it last, after copy insertion)
then ``buffer assignment`` on the optimized module.

``optimize(module, flags=None) -> (module, BufferAssignment)`` runs it on ``module`` in place. With
``XLA_FLAGS=--xla_dump_to=DIR`` (text is the default format, as in XLA) it writes
``module_NNNN.<name>.before_optimizations.txt``, ``...after_optimizations.txt``,
``...buffer-assignment.txt``, ``...fusion-decisions.txt``, per-pass files for passes matching
``--xla_dump_hlo_pass_re`` and ``manifest.json``; nothing at all is written without ``xla_dump_to``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tfxla_cluster import compile_profile
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.opcode import HloOpcode
from tfxla_cluster.passes.algsimp import AlgebraicSimplifier, ReshapeDecomposer
from tfxla_cluster.passes.buffer_assignment import BufferAssignment, assign_buffers
from tfxla_cluster.passes.constant_folding import HloConstantFolding
from tfxla_cluster.passes.control_flow import ConditionalSimplifier, SortSimplifier, TupleSimplifier
from tfxla_cluster.passes.cse import HloCSE
from tfxla_cluster.passes.dce import HloDCE
from tfxla_cluster.passes.dump import Dumper
from tfxla_cluster.passes.dynamic_padder import DynamicPadder
from tfxla_cluster.passes.float_normalization import FloatNormalization
from tfxla_cluster.passes.expanders import (BatchGroupHoles, CallInliner, ConvolutionGroupConverter, DotDecomposer,
                                            LogisticExpander, TopkDecomposer, TopkRewriter, TransposeFolding)
from tfxla_cluster.passes.fusion import CpuInstructionFusion
from tfxla_cluster.passes.fusion_naming import FusionNamer
from tfxla_cluster.passes.layout_assignment import CpuLayoutAssignment
from tfxla_cluster.passes.multi_output_fusion import CpuMultiOutputFusion
from tfxla_cluster.passes.reshape_mover import ReshapeMover
from tfxla_cluster.passes.rng_expander import RngBitGeneratorExpander, RngExpander
from tfxla_cluster.passes.scatter_expander import ScatterExpander
from tfxla_cluster.passes.small_while_loop_hoisting import SmallWhileLoopHoisting
from tfxla_cluster.passes.small_while_loop_hoisting import threshold as small_while_threshold
from tfxla_cluster.passes.while_loop_simplifier import WhileLoopSimplifier
from tfxla_cluster.passes.pass_ import FixedPoint, IfChanged, PassContext, Pipeline


# Opcodes that never reach codegen, each with the pass of ``cpu_pipeline`` that rewrites it away (codegen
# has no emitter for them; tests/hlo/test_opcode_coverage.py checks every other opcode has one).
EXPANDED_BEFORE_CODEGEN: dict[HloOpcode, type] = {
    HloOpcode.TOPK: TopkDecomposer,   # sort + slice (+ TopkRewriter's custom-call "TopK" when enabled)
    HloOpcode.RNG: RngExpander,       # rng-get-and-update-state + Philox rng-bit-generator + distribution
}


def use_multi_output_fusion(flags) -> bool:
    """XLA's options::UseMultiOutputFusion: the backend extra option xla_cpu_use_multi_output_fusion."""
    try:
        extra = str(flags["xla_backend_extra_options"] or "")
    except (KeyError, TypeError):
        return False
    return "xla_cpu_use_multi_output_fusion" in extra


def simplification(name: str) -> FixedPoint:
    """CreateSimplificationPipeline: the fixed point cpu_compiler.cc runs before and after scatter expansion."""
    return FixedPoint(name, [
        AlgebraicSimplifier(),
        SortSimplifier(),
        ConditionalSimplifier(),
        TupleSimplifier(),
        WhileLoopSimplifier(),
        HloDCE(),
        ReshapeMover(),
        HloConstantFolding(),
    ])


def cpu_pipeline(flags=None, *, multi_output_fusion: bool | None = None,
                 runtime_targets: frozenset[str] = frozenset()) -> Pipeline:
    """A fresh XLA:CPU pipeline (pass objects keep per-run state such as fusion decisions).

    ``runtime_targets`` names the custom-call routines the backend provides: with ``"TopK"`` in it,
    sort+slice top-k becomes XLA:CPU's TopK call (``topk-rewriter``); without it the sort stays.
    """
    mof = use_multi_output_fusion(flags) if multi_output_fusion is None and flags is not None \
        else bool(multi_output_fusion)
    fusion = [CpuInstructionFusion(may_duplicate=not mof)]
    if mof:
        fusion += [CpuMultiOutputFusion(), TupleSimplifier()]
    topk = [TopkRewriter()] if "TopK" in runtime_targets else []
    return Pipeline("cpu", [
        DynamicPadder(),
        HloDCE(),
        CallInliner(),
        DotDecomposer(),
        FloatNormalization(),
        BatchGroupHoles(),
        ConvolutionGroupConverter(),
        LogisticExpander(),
        RngExpander(),
        RngBitGeneratorExpander(),
        TopkDecomposer(),
        *topk,
        simplification("simplification"),
        # XLA: "Scatter expander is sandwiched between two simplification pipelines to enable constant
        # folding with the original scatter instructions ... but then to also ensure that the resulting
        # while loops are simplified." (only when it expanded one: see IfChanged)
        IfChanged("scatter-expansion", [ScatterExpander(), simplification("post_scatter_expansion_simplification")]),
        TransposeFolding(),
        HloCSE(),
        CpuLayoutAssignment(),
        # TF 2.21 runs no algsimp between layout assignment and fusion, only its "hlo normalization"
        # (reshape -> bitcast): the after-layout algsimp+DCE+CSE fixed point comes after fusion, on
        # non-fusion computations, so nothing CSE made one instruction is folded inside a fusion
        # (select(P, A, A) of seed 115001251; sqrt((a*1e20)*(a*1e20)) stays inf as in TF)
        Pipeline("hlo_normalization", [ReshapeDecomposer()]),
        *fusion,
        FixedPoint("simplification_after_layout_assignment", [
            AlgebraicSimplifier(layout_sensitive=True), HloDCE(), HloCSE(layout_sensitive=True)]),
        FusionNamer(),
        SmallWhileLoopHoisting(small_while_threshold(flags)),
    ])


@dataclass
class OptimizeReport:
    """Everything one ``optimize`` run produced."""

    module: HloModule
    assignment: BufferAssignment
    pipeline: Pipeline
    history: list = field(default_factory=list)   # PassRecord per pass run
    dump_files: list[str] = field(default_factory=list)
    dumper: Dumper | None = None   # the module's dumper: its LLVM IR is dumped under the same module id

    def fusion_decisions(self) -> list:
        return [d for f in find_passes(self.pipeline, CpuInstructionFusion) for d in f.decisions]


def find_passes(p: Pipeline, cls) -> list:
    """The passes of type ``cls`` in ``p``, depth first."""
    out = []
    for x in p.passes:
        if isinstance(x, cls):
            out.append(x)
        if isinstance(x, Pipeline):
            out.extend(find_passes(x, cls))
    return out


def optimize_with_report(module: HloModule, flags=None, *, function: str | None = None,
                         cluster: str | None = None, pipeline: Pipeline | None = None,
                         runtime_targets: frozenset[str] = frozenset()) -> OptimizeReport:
    """``optimize`` that also returns the pipeline (fusion decisions, pass history) and dump file names."""
    if flags is None:
        from tfxla_cluster.flags import get_flags
        flags = get_flags()
    pipeline = pipeline or cpu_pipeline(flags, runtime_targets=runtime_targets)
    dumper = Dumper.create(flags, module, function=function, cluster=cluster)
    if dumper is not None:
        dumper.before_optimizations(module)
    ctx = PassContext.from_flags(flags, dumper=dumper)
    pipeline.run(module, ctx)
    # The instruction order is now the sequential schedule buffer assignment uses (XLA marks it too).
    module.is_scheduled = True
    with compile_profile.stage("buffer-assignment"):
        assignment = assign_buffers(module)
    if dumper is not None:
        fusion_log = "".join(f.decision_log() for f in find_passes(pipeline, CpuInstructionFusion))
        fusion_log += "".join(line + "\n" for m in find_passes(pipeline, CpuMultiOutputFusion) for line in m.decisions)
        dumper.after_optimizations(module, assignment, fusion_log, ctx.history)
    return OptimizeReport(module, assignment, pipeline, ctx.history, dumper.files if dumper else [], dumper)


def optimize(module: HloModule, flags=None, *, function: str | None = None, cluster: str | None = None,
             runtime_targets: frozenset[str] = frozenset()) -> tuple[HloModule, BufferAssignment]:
    """Run the CPU pipeline on ``module`` (in place), assign buffers, and dump if the flags say so.
    ``function``/``cluster`` label the dumps' manifest; ``runtime_targets`` see ``cpu_pipeline``."""
    report = optimize_with_report(module, flags, function=function, cluster=cluster,
                                  runtime_targets=runtime_targets)
    return report.module, report.assignment
