"""Op-by-op coverage of TF's XLA_CPU_JIT registry (issue 18, deliverable 2), from ONE table
(``tests/tf2hlo/op_table.py``):

* every op TF's registry has is lowered or excluded in ``registry.NOT_LOWERED`` with a reason, and no
  excluded op has a lowering (the table would be stale);
* every op TF's registry has is covered by a program of the table or named in its short ``EXCLUDED`` list
  (or ``NOT_LOWERED``) with a reason — cheap, always run;
* every program of the table is run by TF's XLA (``jit_compile=True``) and by our lowering + evaluator and
  compared, several programs per ``tf.function`` (each group also checks its graph holds the ops its
  programs name). The table but its few ``HEAVY`` programs (TF's XLA compiles each for seconds; other tests
  compare them with TF) runs by default, ~30 s of CPU; all of it with ``-m tfsweep``.
"""
from __future__ import annotations

import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops as gx

from tests.tf2hlo import op_table
from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values

from tfxla_cluster.tf2hlo.registry import NOT_LOWERED, lowered_ops
from tfxla_cluster.tfops.xla_kernels import all_xla_ops

R = tf.raw_ops
RE_IM = [values("f32", (2, 3)), values("f32", (2, 3), seed=1)]
GROUPS = op_table.groups()


def test_every_registry_op_is_lowered_or_excluded_with_a_reason() -> None:
    registry, lowered = all_xla_ops(), lowered_ops()
    uncovered = sorted(registry - lowered - set(NOT_LOWERED))
    assert not uncovered, f"TF's XLA registry has ops neither lowered nor in registry.NOT_LOWERED: {uncovered}"
    stale = sorted(set(NOT_LOWERED) & lowered)
    assert not stale, f"registry.NOT_LOWERED lists ops that now have a lowering: {stale}"
    unknown = sorted(set(NOT_LOWERED) - registry)
    assert not unknown, f"registry.NOT_LOWERED lists ops TF's XLA registry does not have: {unknown}"
    assert all(len(why) > 30 for why in NOT_LOWERED.values())


def test_every_registry_op_is_in_the_table_or_excluded() -> None:
    registry = all_xla_ops()
    in_table = {op for group in GROUPS for e in group for op in e.ops}
    excluded = op_table.excluded()
    missing = sorted(registry - in_table - set(excluded))
    assert not missing, f"TF's XLA registry has ops neither op_table.py's table nor its EXCLUDED covers: {missing}"
    unknown = sorted((in_table | set(excluded)) - registry)
    assert not unknown, f"op_table.py names ops TF's XLA_CPU_JIT registry does not have: {unknown}"
    both = sorted(in_table & set(excluded))
    assert not both, f"op_table.py both tests and excludes: {both}"
    assert len(op_table.EXCLUDED) <= 15 and all(len(why) > 30 for why in excluded.values())


def _group_param(k: int, group: list) -> object:
    heavy = group[0].heavy
    return pytest.param(k, id=f"{k:02d}-{group[0].ops[0]}" + ("-sweep" if heavy else ""),
                        marks=[pytest.mark.tfsweep] if heavy else [])


@pytest.mark.parametrize("group", [_group_param(k, g) for k, g in enumerate(GROUPS)])
def test_table_equals_tf_xla(group: int, request) -> None:
    if GROUPS[group][0].heavy and "tfsweep" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("programs TF's XLA compiles slowly run with -m tfsweep (op_table.HEAVY)")
    op_table.run_entries(GROUPS[group])


def test_conjugate_transpose_of_reals_equals_tf() -> None:
    """Against TF eager: TF's XLA conjugates a real input into a c64 buffer it then returns as f32 (its
    HLO ends in ``c64[3,2] complex(...)`` for an f32 output), which reads back as interleaved garbage."""
    run_batch([Case("ConjugateTranspose real", lambda re: R.ConjugateTranspose(x=re, perm=[1, 0]), RE_IM[:1])])


def test_xla_send_refused_as_tf_xla_refuses_it() -> None:
    """XLA:CPU has no ``send``: TF's XLA fails to compile it, and we refuse it with a typed error."""
    from tfxla_cluster.errors import UnimplementedError
    from tfxla_cluster.tf2hlo import lower_function

    fn = lambda x: (gx.xla_send(tensor=x, tensor_name="t"), x + 1.0)[1]  # noqa: E731
    with pytest.raises(tf.errors.OpError):
        tf.function(fn, jit_compile=True, autograph=False)(tf.constant([1.0]))
    with pytest.raises(UnimplementedError, match="`send` is not supported"):
        lower_function(tf.function(fn, autograph=False).get_concrete_function(tf.TensorSpec([1], tf.float32)))
