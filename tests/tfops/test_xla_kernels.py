"""TF's XLA JIT kernel registry read op by op gives TF's whole list's answers, in the same order, and
switches to the whole list after ``PER_OP_LIMIT`` distinct ops."""
from __future__ import annotations

import pytest

from tfxla_cluster.tf_compat import registered_xla_jit_kernels
from tfxla_cluster.tfops import xla_kernels


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as a new process finds it: nothing read yet."""
    xla_kernels._registry.cache_clear()
    monkeypatch.setattr(xla_kernels, "_per_op", {})
    yield
    xla_kernels._registry.cache_clear()


def _tf_cpu_kernels() -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for k in registered_xla_jit_kernels():
        if k.device_type == "XLA_CPU_JIT":
            out.setdefault(k.op, []).append(k.SerializeToString(deterministic=True))
    return out


def test_per_op_answers_are_tfs_whole_list(fresh_registry):
    truth = _tf_cpu_kernels()
    ops = ["Conv2D", "_Arg", "MatMul", "FusedBatchNormV3", "Where", "NoSuchOp", "PyFunc", "ReadVariableOp"]
    kernels = xla_kernels.jit_kernels("XLA_CPU_JIT")
    for op in ops:
        got = kernels.get(op)
        want = truth.get(op)
        assert (got is None) == (want is None), op
        if got is not None:
            assert [k.SerializeToString(deterministic=True) for k in got] == want, op
    assert not xla_kernels._full_list_loaded()   # answered op by op
    assert set(xla_kernels._per_op) == set(ops)


def test_many_ops_switch_to_the_whole_list(fresh_registry):
    truth = _tf_cpu_kernels()
    kernels = xla_kernels.jit_kernels("XLA_CPU_JIT")
    ops = sorted(truth)[:xla_kernels.PER_OP_LIMIT + 5]
    for op in ops:
        assert [k.SerializeToString(deterministic=True) for k in kernels[op]] == truth[op]
    assert len(xla_kernels._per_op) == xla_kernels.PER_OP_LIMIT and xla_kernels._full_list_loaded()
    assert set(kernels) == set(truth) and len(kernels) == len(truth)
    assert xla_kernels.jit_kernels("XLA_CPU_JIT") is not kernels   # the whole list from now on


def test_prefetch_records_tfs_answers_within_the_budget(fresh_registry, monkeypatch):
    """``prefetch`` (asked while grappler runs) keeps the answers clustering reads later: TF's, per op, and
    never more than ``PER_OP_LIMIT`` ops asked one by one (nor the whole list)."""
    truth = _tf_cpu_kernels()
    ops = ["Conv2D", "NoSuchOp", "MatMul", "_Arg"]
    xla_kernels.prefetch(ops)
    assert set(xla_kernels._per_op) == set(ops) and not xla_kernels._full_list_loaded()
    kernels = xla_kernels.jit_kernels("XLA_CPU_JIT")
    for op in ops:
        got = kernels.get(op)
        assert (got is None) == (op not in truth), op
        if got is not None:
            assert [k.SerializeToString(deterministic=True) for k in got] == truth[op], op
    monkeypatch.setattr(xla_kernels, "PER_OP_LIMIT", 6)
    xla_kernels.prefetch(sorted(truth))
    assert len(xla_kernels._per_op) == 6 and not xla_kernels._full_list_loaded()
