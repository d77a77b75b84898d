"""HLO text printer: XLA's ``HloModule::ToString`` syntax.

Guarantees: the output parses with our parser and with XLA's (``hlo_module_from_text``) and reads back
to the same module; for modules whose names are already module-unique, XLA re-prints each instruction
line identically. The format:

    HloModule m, entry_computation_layout={(f32[2]{0})->f32[2]{0}}

    %callee (x: f32[], y: f32[]) -> f32[] { ... }

    ENTRY %main (a: f32[2]) -> f32[2] {
      %a = f32[2]{0} parameter(0)
      ROOT %n = f32[2]{0} negate(%a), metadata={op_type="Neg" op_name="n"}
    }

Operands print as ``%name`` (current XLA dumps); ``operand_shapes=True`` gives the older
``f32[2]{0} %name`` form that TF's ``experimental_get_compiler_ir`` shows. Lists of more than five
operands or parameters carry ``/*index=5*/`` markers like XLA's. Constants are always printed in full.
"""
from __future__ import annotations

from tfxla_cluster.hlo import attr_table as T
from tfxla_cluster.hlo.literal import literal_to_text
from tfxla_cluster.hlo.opcode import HloOpcode as O


def _indexed(items: list[str]) -> str:
    """Join with ", ", prefixing every fifth item with ``/*index=N*/`` as XLA does."""
    return ", ".join(f"/*index={i}*/{s}" if i and i % 5 == 0 else s for i, s in enumerate(items))


def _operands_text(instr, operand_shapes: bool) -> str:
    op = instr.opcode
    if op is O.PARAMETER:
        return str(instr.parameter_number)
    if op is O.CONSTANT:
        if instr.literal_elided:
            return "{...}"
        return literal_to_text(instr.literal, instr.shape)
    items = [(f"{o.shape} %{o.name}" if operand_shapes else f"%{o.name}") for o in instr.operands]
    return _indexed(items)


def attributes_text(instr) -> list[str]:
    """The ``name=value`` attributes of ``instr`` in XLA's order (without metadata)."""
    typed, calls = [], []
    for entry in T.attrs_for(instr.opcode):
        is_call = isinstance(entry, (T.Comp, T.CompList, T.Branches))
        (calls if is_call else typed).extend(entry.print(instr))
    raw = instr.raw_attributes
    pre = [f"{k}={v}" for k, v in raw.items() if k not in T.RAW_ATTRIBUTE_PLACES]
    post = [f"{k}={v}" for k, v in raw.items() if T.RAW_ATTRIBUTE_PLACES.get(k) == "post"]
    out = typed + pre + calls + post
    if instr.control_predecessors:
        out.append("control-predecessors={" + ", ".join(f"%{p.name}" for p in instr.control_predecessors) + "}")
    return out


def instruction_to_string(instr, *, operand_shapes: bool = False, metadata: bool = True,
                          backend_config: bool = True) -> str:
    """One instruction line without indentation: ``[ROOT ]%name = shape opcode(operands), attrs``."""
    parts = [f"%{instr.name} = {instr.shape} {instr.opcode.text}({_operands_text(instr, operand_shapes)})"]
    parts += attributes_text(instr)
    if metadata and instr.metadata is not None and not instr.metadata.is_empty():
        parts.append(f"metadata={instr.metadata.to_text()}")
    if backend_config:
        parts += [f"{k}={v}" for k, v in instr.raw_attributes.items() if T.RAW_ATTRIBUTE_PLACES.get(k) == "tail"]
    text = ", ".join(parts)
    return ("ROOT " + text) if instr.is_root() else text


def computation_to_string(comp, *, is_entry: bool = False, **options) -> str:
    params = ", ".join(f"{p.name}: {p.shape.to_string(layout=False)}" for p in comp.parameters)
    header = f"{'ENTRY ' if is_entry else ''}%{comp.name} ({params}) -> {comp.root.shape.to_string(layout=False)} {{"
    lines = [header]
    lines += ["  " + instruction_to_string(i, **options) for i in comp.post_order()]
    lines.append("}")
    return "\n".join(lines)


def entry_computation_layout(module) -> str:
    params, result = module.entry.program_shape()
    return "{(" + _indexed([str(p) for p in params]) + ")->" + str(result) + "}"


def module_to_string(module, **options) -> str:
    """The whole module: header, callees first, the entry last, computations separated by blank lines."""
    header = f"HloModule {module.name}"
    if module.is_scheduled:
        header += ", is_scheduled=true"
    header += "".join(f", {k}={v}" for k, v in module.raw_attributes.items())
    header += f", entry_computation_layout={entry_computation_layout(module)}"
    blocks = [header]
    if module.stack_frames:
        blocks.append(module.stack_frames)
    for comp in module.computation_post_order():
        blocks.append(computation_to_string(comp, is_entry=comp is module.entry, **options))
    return "\n\n".join(blocks) + "\n"
