"""The issue-7 proof sweep: every corpus function (tests/e2e/e2e_corpus.py) end to end against TF.

For each function, in auto mode (``--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit
--tf_xla_min_cluster_size=1``) and with ``jit_compile=True`` where TF itself compiles it:

* outputs and variable values after every call equal TF's (eager, or TF's own XLA result where XLA's
  numbers legitimately differ from TF's kernels) within the case's tolerance;
* something is clustered, and no launcher fell back to TF's kernels: in auto mode TF only clusters
  ops with XLA kernels, so every cluster must lower and compile. A fallback is a failure unless the
  case names it as a known lowering/codegen gap (``xfail``, strict, matched by its exact text);
* where TF refuses ``jit_compile=True`` (strings, py_function), we refuse too, with TF's error.
"""
from __future__ import annotations

import logging

import pytest

from tests.e2e import e2e_corpus as corpus
from tests.e2e.e2e_corpus import Case


class KnownGap(Exception):
    """A failure whose text is the case's known lowering/codegen gap (what its xfail expects)."""


def _params(select, xfail_field: str) -> list:
    out = []
    for c in corpus.CASES.values():
        if not select(c):
            continue
        marks = [pytest.mark.tfsweep] if c.heavy else []
        reason = getattr(c, xfail_field) if xfail_field else ""
        if reason:
            marks.append(pytest.mark.xfail(strict=True, raises=KnownGap, reason=reason))
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


def _check_gap(c: Case, failures: list[str]) -> None:
    """Raise KnownGap if every failure is one of the case's known gaps, else AssertionError."""
    unknown = [f for f in failures if not any(g in f for g in c.gaps)]
    if unknown:
        raise AssertionError("\n".join(unknown))
    raise KnownGap("; ".join(failures))


def _run_ours(c: Case, jit_compile: bool | None) -> corpus.Outcome:
    try:
        return corpus.run_ours(c, jit_compile)
    except Exception as e:  # a launch node's error reaches us wrapped in TF's UnknownError
        if c.gaps and any(g in str(e) for g in c.gaps):
            raise KnownGap(str(e).strip().splitlines()[-1]) from e
        raise


@pytest.fixture(autouse=True)
def _quiet_fallback_warnings():
    logging.getLogger("tfxla_cluster.runtime").setLevel(logging.ERROR)
    yield
    logging.getLogger("tfxla_cluster.runtime").setLevel(logging.NOTSET)


@pytest.mark.parametrize("c", _params(lambda c: True, "xfail_auto"))
def test_auto_clustering_equals_tf(c: Case) -> None:
    want = corpus.run_tf(c, c.reference_auto or None)
    got = _run_ours(c, None)
    assert got.clusters > 0, "auto-clustering with min cluster size 1 must cluster something"
    if got.fallbacks:
        _check_gap(c, [f"{name} fell back: {reason}" for name, reason in got.fallbacks.items()])
    problems = corpus.compare(got, want, c.tol)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("c", _params(lambda c: c.jit, "xfail_jit"))
def test_jit_compile_equals_tf(c: Case) -> None:
    want = corpus.run_tf(c)
    got = _run_ours(c, True)
    assert (got.clusters > 1 if c.jit_split else got.clusters == 1) and not got.fallbacks
    problems = corpus.compare(got, want, c.tol)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("c", _params(lambda c: not c.jit, "xfail_jit"))
def test_jit_compile_refused_like_tf(c: Case) -> None:
    import tensorflow as tf

    from tfxla_cluster.jit.must_compile import MustCompileError

    with pytest.raises(tf.errors.InvalidArgumentError) as tf_err:
        corpus.run_tf(c, "xla")
    with pytest.raises(MustCompileError) as ours:
        corpus.run_ours(c, True)
    text = str(ours.value)
    assert text.startswith("Detected unsupported operations when trying to compile graph ")
    # TF names the first offending op; we list every one, that one included.
    first = str(tf_err.value).split("on XLA_CPU_JIT: ", 1)[1].split(" ", 1)[0]
    assert first in {p.op for p in ours.value.problems}, (first, text)


def test_corpus_covers_the_issue() -> None:
    """At least 40 functions of our own (besides the bundled samples), across the issue's areas."""
    own = [n for n in corpus.CASES if not n.startswith("sample_")]
    assert len(own) >= 40, len(own)
    for needed in ("cond_branches", "while_matmul", "switch_case", "tf_case", "var_updates", "strings_mid",
                   "unique_mid", "py_function_mid", "stateless_random", "keras_dense", "keras_conv2d",
                   "keras_layer_norm", "keras_mha", "keras_batchnorm_train", "train_keras_sgd",
                   "size_zero_dims", "dtype_f16_bf16", "dtype_f64_i64"):
        assert needed in corpus.CASES, needed
    assert any(c.calls >= 5 for c in corpus.CASES.values()), "a training loop of at least 5 steps"
    assert len([n for n in corpus.CASES if n.startswith("sample_")]) >= 11


@pytest.mark.parametrize("c", _params(lambda c: True, "xfail_auto"))
def test_auto_clustering_on_the_evaluator_backend(c: Case) -> None:
    """The same in auto mode with clusters run by the numpy HLO evaluator (lowering alone, no codegen)."""
    want = corpus.run_tf(c, c.reference_auto or None)
    try:
        got = corpus.run_ours(c, None, backend="evaluator")
    except Exception as e:
        if c.gaps and any(g in str(e) for g in c.gaps):
            raise KnownGap(str(e)) from e
        raise
    if got.fallbacks:
        _check_gap(c, [f"{name} fell back: {reason}" for name, reason in got.fallbacks.items()])
    problems = corpus.compare(got, want, c.tol)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("c", _params(lambda c: True, ""))
def test_auto_clustering_with_every_cluster_on_tf_equals_tf(c: Case, monkeypatch) -> None:
    """Every cluster falls back (compile forced to fail): TF's kernels run each cluster's nodes, and
    results and variables still equal TF's (its own kernels: eager is the reference)."""
    from tfxla_cluster.errors import UnimplementedError
    from tfxla_cluster.runtime.launcher import Launcher

    def fail(self, arrays, key):
        raise UnimplementedError("forced fallback")
    monkeypatch.setattr(Launcher, "compile_signature", fail)
    want = corpus.run_tf(c, "eager")
    got = corpus.run_ours(c, None)
    assert got.clusters > 0 and got.fallbacks
    assert all(r == "UnimplementedError: forced fallback" for r in got.fallbacks.values())
    problems = corpus.compare(got, want, c.tol)
    assert not problems, "\n".join(problems)
