"""HLO optimization passes: XLA:CPU's HLO pipeline in Python.

    pass_.py               HloPass, Pipeline, FixedPoint, PassContext (verify, disable, dump, error naming)
    algsimp.py             AlgebraicSimplifier: one named rule per rewrite (RULES)
    dce.py cse.py          HloDCE, HloCSE
    constant_folding.py    HloConstantFolding (evaluated with the reference evaluator)
    expanders.py           CallInliner, LogisticExpander, DotDecomposer, TransposeFolding, TopkRewriter
    rng_expander.py        RngExpander (stateful rng), RngBitGeneratorExpander (Philox as HLO arithmetic)
    reshape_mover.py       ReshapeMover (sinks reshapes/transposes below elementwise ops)
    scatter_expander.py    ScatterExpander (one-index scatters, as XLA:CPU's kEliminateSimpleScatters)
    while_loop_simplifier.py WhileLoopSimplifier (loops of 0 or 1 trips removed / inlined)
    control_flow.py        ConditionalSimplifier, SortSimplifier, TupleSimplifier
    layout_assignment.py   CpuLayoutAssignment (row-major everywhere)
    fusion.py              CpuInstructionFusion with FusionDecision reasons (fusion_ir.py edits fusions)
    multi_output_fusion.py CpuMultiOutputFusion (opt-in, as in XLA:CPU)
    fusion_naming.py       FusionNamer
    buffer_assignment.py   liveness, in-place reuse, best-fit temp arena, buffer-assignment.txt
    dump.py                XLA_FLAGS dumps: module_NNNN.<name>.*.txt and manifest.json
    pipeline.py            cpu_pipeline(flags), optimize(module, flags) -> (module, BufferAssignment)
"""
from tfxla_cluster.passes.algsimp import RULES, AlgebraicSimplifier
from tfxla_cluster.passes.buffer_assignment import BufferAssignment, assign_buffers, unfused_intermediate_bytes
from tfxla_cluster.passes.constant_folding import HloConstantFolding
from tfxla_cluster.passes.control_flow import ConditionalSimplifier, SortSimplifier, TupleSimplifier
from tfxla_cluster.passes.cse import HloCSE
from tfxla_cluster.passes.dce import HloDCE
from tfxla_cluster.passes.expanders import (CallInliner, DotDecomposer, LogisticExpander, TopkRewriter,
                                            TransposeFolding)
from tfxla_cluster.passes.fusion import CpuInstructionFusion, FusionDecision, FusionRecord
from tfxla_cluster.passes.fusion_naming import FusionNamer
from tfxla_cluster.passes.layout_assignment import CpuLayoutAssignment
from tfxla_cluster.passes.multi_output_fusion import CpuMultiOutputFusion
from tfxla_cluster.passes.reshape_mover import ReshapeMover
from tfxla_cluster.passes.rng_expander import RngBitGeneratorExpander, RngExpander
from tfxla_cluster.passes.scatter_expander import ScatterExpander
from tfxla_cluster.passes.while_loop_simplifier import WhileLoopSimplifier
from tfxla_cluster.passes.pass_ import FixedPoint, HloPass, IfChanged, PassContext, PassRecord, Pipeline
from tfxla_cluster.passes.pipeline import OptimizeReport, cpu_pipeline, optimize, optimize_with_report

__all__ = [
    "RULES", "AlgebraicSimplifier", "BufferAssignment", "assign_buffers", "unfused_intermediate_bytes",
    "HloConstantFolding", "ConditionalSimplifier", "SortSimplifier", "TupleSimplifier", "HloCSE", "HloDCE", "CallInliner",
    "DotDecomposer", "LogisticExpander", "TopkRewriter", "TransposeFolding", "CpuInstructionFusion", "FusionDecision",
    "FusionRecord", "FusionNamer", "CpuLayoutAssignment", "CpuMultiOutputFusion", "FixedPoint", "HloPass",
    "IfChanged", "PassContext", "PassRecord", "ReshapeMover", "ScatterExpander", "WhileLoopSimplifier", "RngBitGeneratorExpander", "RngExpander", "Pipeline", "OptimizeReport", "cpu_pipeline", "optimize", "optimize_with_report",
]
