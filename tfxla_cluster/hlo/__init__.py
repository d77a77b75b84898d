"""The HLO layer: XLA's high-level IR in Python.

    opcode.py          the opcode table and property sets (ELEMENTWISE, COMMUTATIVE, is_expensive, ...)
    shape.py           element types and shapes;      attrs.py   typed attributes and their text
    ir.py              HloInstruction / HloComputation / HloModule, the module-wide name uniquer
    shape_inference.py per-opcode result shapes;      builder.py HloBuilder (what the lowering uses)
    printer.py         XLA text;                      parser.py  XLA text (ours and XLA's dumps)
    attr_table.py      which attributes each opcode has — shared by printer and parser
    verifier.py        structural and shape checks
    evaluator.py       numpy reference evaluator (+ eval_elementwise / eval_data / eval_compute / eval_random)

Invariants: a verified module's text parses back to the same text, and XLA's parser accepts it.
"""
from tfxla_cluster.hlo.attrs import (ComparisonDirection, ComparisonType, ConvolutionDimensionNumbers,
                                     DotDimensionNumbers, FusionKind, GatherDimensionNumbers, OpMetadata,
                                     PaddingConfig, PaddingDimension, Precision, RandomAlgorithm,
                                     RandomDistribution, ScatterDimensionNumbers, SliceRange, Window,
                                     WindowDimension)
from tfxla_cluster.hlo.builder import HloBuilder, make_comparator, make_scalar_computation
from tfxla_cluster.hlo.evaluator import evaluate, evaluate_computation
from tfxla_cluster.hlo.ir import HloComputation, HloInstruction, HloModule, NameUniquer
from tfxla_cluster.hlo.opcode import HloOpcode, is_expensive
from tfxla_cluster.hlo.parser import parse_module, parse_shape
from tfxla_cluster.hlo.printer import computation_to_string, instruction_to_string, module_to_string
from tfxla_cluster.hlo.shape import PrimitiveType, Shape, primitive_type_from_dtype
from tfxla_cluster.hlo.shape_inference import infer_shape
from tfxla_cluster.hlo.verifier import verify_computation, verify_module

__all__ = [
    "ComparisonDirection", "ComparisonType", "ConvolutionDimensionNumbers", "DotDimensionNumbers", "FusionKind",
    "GatherDimensionNumbers", "OpMetadata", "PaddingConfig", "PaddingDimension", "Precision", "RandomAlgorithm",
    "RandomDistribution", "ScatterDimensionNumbers", "SliceRange", "Window", "WindowDimension",
    "HloBuilder", "make_comparator", "make_scalar_computation", "evaluate", "evaluate_computation",
    "HloComputation", "HloInstruction", "HloModule", "NameUniquer", "HloOpcode", "is_expensive",
    "parse_module", "parse_shape", "computation_to_string", "instruction_to_string", "module_to_string",
    "PrimitiveType", "Shape", "primitive_type_from_dtype", "infer_shape", "verify_computation", "verify_module",
]
