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

from tfxla_cluster._lazy import lazy_attributes

# Names resolve on first use (PEP 562): importing one submodule (the persistent cache's hit path loads
# shape.py) does not import the whole package.
_LAZY = {
    "ComparisonDirection": "tfxla_cluster.hlo.attrs",
    "ComparisonType": "tfxla_cluster.hlo.attrs",
    "ConvolutionDimensionNumbers": "tfxla_cluster.hlo.attrs",
    "DotDimensionNumbers": "tfxla_cluster.hlo.attrs",
    "FusionKind": "tfxla_cluster.hlo.attrs",
    "GatherDimensionNumbers": "tfxla_cluster.hlo.attrs",
    "OpMetadata": "tfxla_cluster.hlo.attrs",
    "PaddingConfig": "tfxla_cluster.hlo.attrs",
    "PaddingDimension": "tfxla_cluster.hlo.attrs",
    "Precision": "tfxla_cluster.hlo.attrs",
    "RandomAlgorithm": "tfxla_cluster.hlo.attrs",
    "RandomDistribution": "tfxla_cluster.hlo.attrs",
    "ScatterDimensionNumbers": "tfxla_cluster.hlo.attrs",
    "SliceRange": "tfxla_cluster.hlo.attrs",
    "Window": "tfxla_cluster.hlo.attrs",
    "WindowDimension": "tfxla_cluster.hlo.attrs",
    "HloBuilder": "tfxla_cluster.hlo.builder",
    "make_comparator": "tfxla_cluster.hlo.builder",
    "make_scalar_computation": "tfxla_cluster.hlo.builder",
    "evaluate": "tfxla_cluster.hlo.evaluator",
    "evaluate_computation": "tfxla_cluster.hlo.evaluator",
    "HloComputation": "tfxla_cluster.hlo.ir",
    "HloInstruction": "tfxla_cluster.hlo.ir",
    "HloModule": "tfxla_cluster.hlo.ir",
    "NameUniquer": "tfxla_cluster.hlo.ir",
    "HloOpcode": "tfxla_cluster.hlo.opcode",
    "is_expensive": "tfxla_cluster.hlo.opcode",
    "parse_module": "tfxla_cluster.hlo.parser",
    "parse_shape": "tfxla_cluster.hlo.parser",
    "computation_to_string": "tfxla_cluster.hlo.printer",
    "instruction_to_string": "tfxla_cluster.hlo.printer",
    "module_to_string": "tfxla_cluster.hlo.printer",
    "PrimitiveType": "tfxla_cluster.hlo.shape",
    "Shape": "tfxla_cluster.hlo.shape",
    "primitive_type_from_dtype": "tfxla_cluster.hlo.shape",
    "infer_shape": "tfxla_cluster.hlo.shape_inference",
    "verify_computation": "tfxla_cluster.hlo.verifier",
    "verify_module": "tfxla_cluster.hlo.verifier",
}

__all__ = [
    "ComparisonDirection", "ComparisonType", "ConvolutionDimensionNumbers", "DotDimensionNumbers", "FusionKind",
    "GatherDimensionNumbers", "OpMetadata", "PaddingConfig", "PaddingDimension", "Precision", "RandomAlgorithm",
    "RandomDistribution", "ScatterDimensionNumbers", "SliceRange", "Window", "WindowDimension", "HloBuilder",
    "make_comparator", "make_scalar_computation", "evaluate", "evaluate_computation", "HloComputation",
    "HloInstruction", "HloModule", "NameUniquer", "HloOpcode", "is_expensive", "parse_module", "parse_shape",
    "computation_to_string", "instruction_to_string", "module_to_string", "PrimitiveType", "Shape",
    "primitive_type_from_dtype", "infer_shape", "verify_computation", "verify_module"
]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
