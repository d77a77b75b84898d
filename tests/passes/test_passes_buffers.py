"""Buffer assignment: XLA's in-place dot+epilogue sharing, no two simultaneously live buffers share
bytes (on every sample module), dead buffers are reused, views resolve to what they alias."""
import random
from types import SimpleNamespace

import pytest

from tests.passes.passes_helpers import load_tf_golden, load_tf_graph, tf_golden_modules, tf_graph_modules
from tests.passes.test_passes_fusion import RELU_DENSE
from tfxla_cluster.flags import Flags
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes import assign_buffers, optimize, unfused_intermediate_bytes
from tfxla_cluster.passes.buffer_assignment import ALIGNMENT, _align, _best_fit, can_share_operand_buffer

FLAGS = Flags.parse()


def test_dot_and_epilogue_fusion_share_the_result_allocation():
    module, ba = optimize(parse_module(RELU_DENSE), FLAGS)
    root = module.entry.root
    dot = root.operands[0]
    assert dot.opcode is O.DOT and root.opcode is O.FUSION
    assert ba.slice_of(root) == ba.slice_of(dot)
    alloc = ba.allocations[ba.slice_of(root).allocation]
    assert alloc.kind == "maybe-live-out" and alloc.size == 128 * 32 * 4
    assert ba.temp_bytes == 0
    assert [a.kind for a in ba.allocations].count("parameter") == 3


def test_dead_buffers_are_reused():
    """Values separated by sorts (which do not fuse) die one after another and share the arena."""
    text = ["HloModule m", "%lt (x: f32[], y: f32[]) -> pred[] {", "  %x = f32[] parameter(0)",
            "  %y = f32[] parameter(1)", "  ROOT %l = pred[] compare(%x, %y), direction=LT", "}", "",
            "ENTRY e {", "  p = f32[256] parameter(0)"]
    prev = "p"
    for k in range(6):
        text.append(f"  s{k} = f32[256] sort({prev}), dimensions={{0}}, to_apply=%lt")
        prev = f"s{k}"
    text += [f"  ROOT out = f32[256] negate({prev})", "}"]
    module = parse_module("\n".join(text))
    ba = assign_buffers(module)
    assert unfused_intermediate_bytes(module) == 6 * 1024
    assert ba.temp_bytes == 2 * 1024  # two live at a time: a sort's operand and its result


def test_views_alias_their_operand():
    module = parse_module("""HloModule m
ENTRY e {
  p = f32[2,3] parameter(0)
  n = f32[2,3] negate(p)
  b = f32[6] bitcast(n)
  t = (f32[6], f32[2,3]) tuple(b, n)
  g = f32[6] get-tuple-element(t), index=0
  ROOT e = f32[6] exponential(g)
}""")
    ba = assign_buffers(module)
    comp = module.entry
    n, b, g = (comp.get_instruction(x) for x in ("n", "b", "g"))
    assert ba.slice_of(b) == ba.slice_of(n) == ba.slice_of(g)
    # exp reads n (through the views) as its last use and has n's shape: it runs in place
    assert ba.slice_of(comp.root).allocation == ba.slice_of(n).allocation


def test_in_place_rules():
    module = parse_module("""HloModule m
%f (a: f32[4], b: f32[8]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %b = f32[8]{0} parameter(1)
  %s = f32[4]{0} slice(%b), slice={[0:4]}
  ROOT %r = f32[4]{0} add(%a, %s)
}

ENTRY e {
  p = f32[4] parameter(0)
  q = f32[8] parameter(1)
  n = f32[4] negate(p)
  m = f32[8] negate(q)
  ROOT f = f32[4] fusion(n, m), kind=kLoop, calls=%f
}""")
    f = module.entry.root
    assert can_share_operand_buffer(f, 0)          # read elementwise, same shape
    assert not can_share_operand_buffer(f, 1)      # read through a slice: a different shape


def _check_no_overlap(ba):
    for alloc in ba.allocations:
        placed = sorted(alloc.assigned, key=lambda t: t[1])
        for i, (b1, o1) in enumerate(placed):
            for b2, o2 in placed[i + 1:]:
                if o2 >= o1 + max(b1.size, 1) or o1 >= o2 + max(b2.size, 1):
                    continue
                if b1 is b2 or alloc.kind in ("parameter", "constant"):
                    continue
                first, second = (b1, b2) if b1.defined_at <= b2.defined_at else (b2, b1)
                # bytes are shared only by an in-place chain: the first dies where the second is made
                assert first.last_use <= second.defined_at, (
                    f"{first.label} live {first.defined_at}-{first.last_use} overlaps {second.label} "
                    f"live {second.defined_at}-{second.last_use} in allocation {alloc.index}")
        if alloc.kind == "preallocated-temp":
            assert all(off % ALIGNMENT == 0 for _, off in alloc.assigned)


SAMPLES = [("graph", n) for n in tf_graph_modules()] + [("golden", n) for n in tf_golden_modules()]


@pytest.mark.parametrize("kind,name", SAMPLES, ids=[f"{k}-{n}" for k, n in SAMPLES])
def test_no_two_live_buffers_share_bytes(kind, name):
    module, _ = load_tf_graph(name) if kind == "graph" else load_tf_golden(name)
    unfused = unfused_intermediate_bytes(module)
    module, ba = optimize(module, FLAGS)
    _check_no_overlap(ba)
    assert ba.temp_bytes <= max(unfused, 0) + ALIGNMENT * len(module.entry.instructions)
    text = ba.to_text()
    assert text.startswith("BufferAssignment:\nallocation 0: size ")
    assert "Total bytes used: " in text and "Used values:" in text


def _best_fit_by_walk(groups):
    """The heap's rule walked group by group over every placed group (what _best_fit vectorizes)."""
    order = sorted(range(len(groups)), key=lambda g: (-_align(groups[g].size), -(groups[g].end - groups[g].start), g))
    placed, offsets, heap = [], {}, 0
    for gi in order:
        group, size = groups[gi], _align(groups[gi].size)
        busy = sorted((off, sz) for off, sz, other in placed if other.start <= group.end and group.start <= other.end)
        best, best_gap, cursor = None, None, 0
        for off, sz in busy:
            if off - cursor >= size and (best_gap is None or off - cursor < best_gap):
                best, best_gap = cursor, off - cursor
            cursor = max(cursor, off + sz)
        offsets[gi] = best if best is not None else cursor
        placed.append((offsets[gi], size, group))
        heap = max(heap, offsets[gi] + size)
    return offsets, heap


def test_best_fit_places_groups_as_the_walk_does():
    """Smallest fitting gap, lowest first, among the overlapping live ranges; ties of size and range in
    group order (GlobalDecreasingSizeBestFitHeap), on random live ranges and sizes."""
    rng = random.Random(7)
    for _ in range(200):
        groups = []
        for _ in range(rng.randint(0, 40)):
            start = rng.randint(0, 40)
            groups.append(SimpleNamespace(size=rng.choice([1, 64, 100, 4096, rng.randint(0, 5000)]),
                                          start=start, end=start + rng.randint(0, 20)))
        assert _best_fit(groups) == _best_fit_by_walk(groups)
