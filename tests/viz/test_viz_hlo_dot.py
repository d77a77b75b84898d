"""HLO pictures: XLA's optimized modules for the sample graphs (graphs/tf/*/optimized_hlo.txt, from real
TF) drawn with fusions as nested boxes of their fused computations, and called computations as boxes."""
from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

import pytest

from tfxla_cluster.hlo import HloOpcode, parse_module
from tfxla_cluster.viz.dot_text import safe_id
from tfxla_cluster.viz.hlo_dot import hlo_to_dot, scalar_op

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.parent.name for p in (ROOT / "graphs" / "tf").glob("*/optimized_hlo.txt"))


def load(name: str):
    return parse_module((ROOT / "graphs" / "tf" / name / "optimized_hlo.txt").read_text(encoding="utf-8"))


def node_ids(dot: str) -> dict[str, str]:
    """SVG id (hlo_<name>) -> DOT id."""
    return {m.group(2): m.group(1) for m in re.finditer(r'^\s*(i\d+) \[id="(hlo_[^"]+)"', dot, re.M)}


def edges(dot: str) -> set[tuple[str, str]]:
    return set(re.findall(r"^\s*(i\d+) -> (i\d+)", dot, re.M))


def box_body(dot: str, box_id: str) -> str:
    """The text of the subgraph whose graph id is ``box_id`` (balanced braces)."""
    start = dot.index(f'id="{box_id}"')
    open_at = dot.rindex("{", 0, start)
    depth, i = 0, open_at
    while True:
        if dot[i] == "{":
            depth += 1
        elif dot[i] == "}":
            depth -= 1
            if depth == 0:
                return dot[open_at:i]
        i += 1


def entry_fusions(module):
    return [i for i in module.entry.instructions if i.opcode is HloOpcode.FUSION]


@pytest.mark.parametrize("name", MODULES)
def test_fusions_are_boxes_of_their_fused_instructions(name):
    module = load(name)
    dot = hlo_to_dot(module)
    ids = node_ids(dot)
    assert dot == hlo_to_dot(module)                      # deterministic
    for fusion in entry_fusions(module):
        assert f'hlo_{safe_id(fusion.name)}"' not in dot   # a fusion is a box, not a node
        body = box_body(dot, f"fusion_{safe_id(fusion.name)}")
        for instr in fusion.fused_computation.instructions:
            if instr.opcode is not HloOpcode.FUSION:
                assert f'id="hlo_{safe_id(instr.name)}"' in body, (fusion.name, instr.name)
        # Operand k of the fusion flows into the fused parameter k; the value leaves from the fused root.
        for k, operand in enumerate(fusion.operands):
            if operand.opcode is HloOpcode.FUSION:
                continue
            param = fusion.fused_computation.parameter(k)
            assert (ids[f"hlo_{safe_id(operand.name)}"], ids[f"hlo_{safe_id(param.name)}"]) in edges(dot)
    # Every non-fusion instruction of the entry is a node.
    for instr in module.entry.instructions:
        if instr.opcode is not HloOpcode.FUSION:
            assert f"hlo_{safe_id(instr.name)}" in ids


def test_node_labels_and_reducers():
    module = load("mlp")
    dot = hlo_to_dot(module)
    # reduce names its scalar reducer; constants show small values; parameters their number.
    assert re.search(r'label="Softmax\.8\\nreduce dims=\{1\} \(maximum\)\\nf32\[2\]"', dot)
    assert 'label="Softmax.9\\nconstant -inf\\nf32[]"' in dot
    assert 'label="arg0.1\\nparameter 0\\nf32[2,8]"' in dot
    assert 'class="hlo-dot"' in dot and 'class="hlo-maximum root"' in dot
    region = module.get_computation("region_0.1")
    assert scalar_op(region) == "maximum"
    assert "region_0.1" not in re.sub(r'tooltip="[^"]*"', "", dot)   # summarized, not drawn


def test_while_and_call_computations_are_boxes_joined_by_role():
    module = load("while_loop")
    dot = hlo_to_dot(module)
    for role, comp in [("to_apply", "while_computation"), ("condition", "cond_wrapper.4.clone"),
                       ("body", "while_body_101_const_0__.5.clone")]:
        assert f'id="computation_{safe_id(comp)}"' in dot and f'label="{role}: %{comp}"' in dot
        assert re.search(rf'-> i\d+ \[ltail="cluster_comp_\d+", style="dashed".*label="{role}"', dot)
    # A fusion inside the while body is nested in the body's box.
    body = box_body(dot, "computation_while_body_101_const_0__.5.clone")
    assert 'id="fusion_broadcast_add_fusion"' in body and 'id="hlo_Tanh.2"' in body


def test_pick_a_computation_by_name():
    module = load("mlp")
    dot = hlo_to_dot(module, "fused_computation.2")
    assert 'id="hlo_Softmax.8"' in dot and 'id="hlo_arg0.1"' not in dot


@pytest.mark.parametrize("name", ["unique_in_middle", "while_loop", "transformer_block"])
def test_graphviz_lays_it_out_without_warnings(name, needs_graphviz):
    proc = subprocess.run(["dot", "-Tsvg"], input=hlo_to_dot(load(name)), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    svg = html.unescape(proc.stdout)   # Graphviz writes '-' in attribute values as &#45;
    assert svg.count('class="cluster hlo-fusion"') >= len(entry_fusions(load(name)))
