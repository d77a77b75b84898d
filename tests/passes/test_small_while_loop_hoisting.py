"""SmallWhileLoopHoistingPass against TF 2.21's XLA: which while loops become a ``call`` tagged
``xla_cpu_small_call``, read from TF's optimised HLO (``experimental_get_compiler_ir``).

Exact decisions: TF's optimised module with each small call put back as its while, then our pass, must
outline the same loops (the byte count of HloCostAnalysis on TF's own HLO, threshold edges included).
End to end: our optimised HLO tags the same loops as TF's where our lowering gives the same loop state
(near the edge ours carries a second s32 counter that TF's WhileLoopSimplifier removes: 12 bytes more).
"""
from __future__ import annotations

import re

import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tests.passes.small_while_programs import PROGRAMS
from tfxla_cluster.flags import Flags
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes.expanders import inline_call
from tfxla_cluster.passes.pipeline import cpu_pipeline, find_passes
from tfxla_cluster.passes.small_while_loop_hoisting import (DEFAULT_THRESHOLD, SmallWhileLoopHoisting, bytes_accessed,
                                                            is_small_call, threshold)
from tfxla_cluster.passes.util import UseGraph

_TF_HLO: dict[str, str] = {}


def _tf_optimized(name: str) -> str:
    if name not in _TF_HLO:
        fn, args = PROGRAMS[name]
        _TF_HLO[name] = tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    return _TF_HLO[name]


def _small_calls(module) -> list:
    return [i for c in module.computations for i in c.instructions if is_small_call(i)]


def _unhoist(module) -> int:
    """Put every small call of ``module`` back as the while it holds; returns how many."""
    calls = _small_calls(module)
    for call in calls:
        g = UseGraph(call.parent)
        inline_call(g, call)
        g.finish()
    module.remove_unused_computations()
    return len(calls)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_decision_on_tf_hlo_equals_tf(name):
    module = parse_module(_tf_optimized(name))
    tf_small = _unhoist(module)
    whiles = [i for c in module.computations for i in c.instructions if i.opcode is O.WHILE]
    assert whiles and not _small_calls(module)
    p = SmallWhileLoopHoisting()
    p.run(module)
    assert len(_small_calls(module)) == tf_small, (p.decisions, [bytes_accessed(w) for w in whiles])
    assert all(re.fullmatch(r".+: \d+ bytes accessed per iteration < 1024", d) for d in p.decisions)


def test_threshold_edge_bytes():
    """f32[n] relu loop in TF's HLO: a tuple (16), the relu (8n), the add (12) and the compare (9)."""
    for name, n in (("relu_f32_123", 123), ("relu_f32_124", 124)):
        module = parse_module(_tf_optimized(name))
        _unhoist(module)
        (w,) = [i for c in module.computations for i in c.instructions if i.opcode is O.WHILE]
        assert bytes_accessed(w) == 8 * n + 37


@pytest.mark.parametrize("name", ["relu_f64_3x1", "relu_f32_1000", "sort_f32_4", "matmul_f32_2x2", "reduce_f32_8",
                                  "cond_in_loop_f32_6", "cond_in_loop_f32_200", "nested_f32_5", "data_trip_f32_4"])
def test_our_hlo_tags_like_tf(name):
    fn, args = PROGRAMS[name]
    ours = txc.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    theirs = _tf_optimized(name)
    assert ours.count('xla_cpu_small_call="true"') == theirs.count('xla_cpu_small_call="true"')
    # and the loops still compute what TF's do
    want, got = tf.function(fn, jit_compile=True)(*args), txc.function(fn, jit_compile=True)(*args)
    assert want.numpy().tobytes() == got.numpy().tobytes()


def test_threshold_option():
    assert threshold(None) == DEFAULT_THRESHOLD == threshold(Flags.parse())
    flags = Flags.parse(xla_flags="--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=0")
    assert threshold(flags) == 0
    (p,) = find_passes(cpu_pipeline(flags), SmallWhileLoopHoisting)
    assert p.limit == 0
    module = parse_module(_tf_optimized("relu_f64_3x1"))
    assert _unhoist(module) == 1
    assert not p.run(module) and not _small_calls(module)
