"""Every HLO opcode is covered by each stage that must handle it, read from the stages' own registries:

- the evaluator: a rule in ``hlo.evaluator.HANDLERS``;
- codegen: an emitter in ``codegen.program.PROGRAM_HANDLERS`` (entry-level), ``codegen.kernel_builder.THUNKS``
  (kernels) or ``codegen.elemental.GENERATORS`` (elemental code) — or an expansion in
  ``passes.pipeline.EXPANDED_BEFORE_CODEGEN`` whose pass is in ``cpu_pipeline`` and really removes the opcode
  (``native_code_table()`` says which, opcode by opcode). ``codegen.kernels.NO_NATIVE_KERNEL``, the list of
  opcodes without native code (compiling one would be an UnimplementedError naming the instruction), is
  empty: seedless ``rng`` is expanded by the rng-expander, ``complex``/``real``/``imag`` and complex
  arithmetic have elemental code;
- the printer and parser: an instruction of the opcode in the HLO corpus prints, parses and prints again
  to the same text.

A new opcode without one of these fails here, named in the test id.
"""
from __future__ import annotations

import pytest

from tests.hlo.hlo_corpus import MODULES
from tfxla_cluster.codegen import elemental, kernel_builder, program
from tfxla_cluster.codegen.kernels import NO_NATIVE_KERNEL
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo import evaluator
from tfxla_cluster.hlo.opcode import HloOpcode
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes.pipeline import EXPANDED_BEFORE_CODEGEN, cpu_pipeline

OPCODES = sorted(HloOpcode, key=lambda o: o.text)


def _ids(ops):
    return [o.text for o in ops]


def _opcodes(module) -> set[HloOpcode]:
    return {i.opcode for comp in module.computations for i in comp.instructions}


def _corpus_module_with(op: HloOpcode) -> str | None:
    return next((name for name, text in sorted(MODULES.items()) if op in _opcodes(parse_module(text))), None)


def _native_emitters() -> set[HloOpcode]:
    thunks = {op for op, fn in kernel_builder.THUNKS.items() if op not in NO_NATIVE_KERNEL}
    return set(program.PROGRAM_HANDLERS) | thunks | set(elemental.GENERATORS)


@pytest.mark.parametrize("op", OPCODES, ids=_ids(OPCODES))
def test_evaluator_has_a_rule(op):
    assert callable(evaluator.HANDLERS.get(op)), f"the evaluator has no rule for {op.text}"


def native_code_table() -> dict[str, str]:
    """opcode -> how native code handles it: 'entry' (the program's control flow), 'kernel' (a thunk of
    codegen/kernels), 'elemental' (an index -> value generator, fused or in the loop kernel), or
    'expanded by <pass>'."""
    out = {}
    for op in OPCODES:
        if op in EXPANDED_BEFORE_CODEGEN:
            out[op.text] = f"expanded by {EXPANDED_BEFORE_CODEGEN[op].name}"
        elif op in program.PROGRAM_HANDLERS:
            out[op.text] = "entry"
        elif op in kernel_builder.THUNKS and op not in NO_NATIVE_KERNEL:
            out[op.text] = "kernel"
        elif op in elemental.GENERATORS:
            out[op.text] = "elemental"
        else:
            out[op.text] = "no native code"
    return out


def test_every_opcode_has_native_code():
    table = native_code_table()
    assert NO_NATIVE_KERNEL == ()
    assert [op for op, how in table.items() if how == "no native code"] == []
    # the opcodes issue 18 brought to native code
    assert table["rng"] == "expanded by rng-expander"
    assert table["rng-get-and-update-state"] == "kernel" and table["rng-bit-generator"] == "kernel"
    assert table["complex"] == table["real"] == table["imag"] == "elemental"


@pytest.mark.parametrize("op", OPCODES, ids=_ids(OPCODES))
def test_codegen_has_an_emitter_or_an_expansion(op):
    ways = [op in _native_emitters(), op in EXPANDED_BEFORE_CODEGEN, op in NO_NATIVE_KERNEL]
    assert sum(ways) == 1, (f"{op.text}: needs exactly one of a codegen emitter, an entry in "
                            f"EXPANDED_BEFORE_CODEGEN, an entry in NO_NATIVE_KERNEL; has {ways}")


@pytest.mark.parametrize("op", sorted(EXPANDED_BEFORE_CODEGEN, key=lambda o: o.text),
                         ids=_ids(sorted(EXPANDED_BEFORE_CODEGEN, key=lambda o: o.text)))
def test_expansion_pass_runs_in_the_cpu_pipeline_and_removes_the_opcode(op):
    pass_type = EXPANDED_BEFORE_CODEGEN[op]
    assert pass_type.name in cpu_pipeline().pass_names(), f"{pass_type.name} is not in cpu_pipeline"
    name = _corpus_module_with(op)
    assert name is not None, f"no corpus module has {op.text}"
    module = parse_module(MODULES[name])
    assert pass_type().run(module), f"{pass_type.name} left {name} unchanged"
    assert op not in _opcodes(module), f"{op.text} is still in {name} after {pass_type.name}"


def test_no_native_kernel_would_be_a_typed_error_naming_the_instruction():
    """The documented fallback for an opcode without native code (none today): UnimplementedError naming
    the instruction, which the launcher's fallback to TF's kernels depends on."""
    from tfxla_cluster.codegen.kernels import _unsupported

    class _Instr:
        opcode, name = HloOpcode.RNG, "the_instruction"

    with pytest.raises(UnimplementedError, match="rng.*%the_instruction"):
        _unsupported(None, _Instr(), [], None)


@pytest.mark.parametrize("op", OPCODES, ids=_ids(OPCODES))
def test_printer_and_parser_round_trip(op):
    name = _corpus_module_with(op)
    assert name is not None, f"no module of tests/hlo/hlo_corpus.py has a {op.text} instruction"
    printed = parse_module(MODULES[name]).to_string()
    reparsed = parse_module(printed)
    assert op in _opcodes(reparsed), f"{op.text} was lost printing and parsing {name}"
    assert reparsed.to_string() == printed
