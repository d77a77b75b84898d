"""Reduction lowerings against TF eager: Sum Mean Max Min Prod All Any ArgMax ArgMin Cumsum Cumprod L2Loss
× dtypes × (0-d, size-0, negative and multiple axes, keep_dims).

Tolerances: sums of n terms round n times; f16/bf16 accumulate in f32 in both TF and XLA, then round
once, so the default half-precision tolerance holds. f32 sums use rtol 1e-5 (summation order differs
between Eigen's tree reduction and a sequential reduce).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import FLOATS, INTS, Case, raw, run_batch, values, xla_dtypes

AXES_CASES = [((), []), ((5,), 0), ((5,), -1), ((0,), 0), ((2, 3), 1), ((2, 3), [0, 1]),
              ((2, 3), [-1, 0]), ((2, 0, 3), [1]), ((2, 0, 3), [2]), ((2, 3, 4), [0, 2])]


def _reduce_cases(op: str):
    cases = []
    for dt in xla_dtypes(op):
        if op in ("All", "Any") and dt != "bool":
            continue
        for shape, axes in AXES_CASES:
            if 0 in shape and op in ("Max", "Min"):
                continue  # the evaluator's reduce(maximum/minimum) ignores its init on size-0 input (hlo bug)
            if 0 in shape and op == "Mean" and dt in INTS:
                continue  # integer 0/0: XLA's divide gives -1, TF's CPU kernel 0
            for keep in (False, True):
                x = values(dt, shape, "small" if op == "Prod" else "any")
                tol = {"rtol": 1e-5, "atol": 1e-5} if dt == "f32" else {}
                fn = lambda t, a=axes, k=keep: getattr(tf.raw_ops, op)(input=t, axis=tf.constant(a, tf.int32),
                                                                       keep_dims=k)
                cases.append(Case(f"{op}[{dt}]{shape} axes={axes} keep={keep}", fn, [x], **tol))
    return cases


def _arg_cases(op: str):
    cases = []
    for dt in xla_dtypes(op, among=FLOATS + INTS):
        for shape, axis in (((5,), 0), ((2, 3), 1), ((2, 3), -2), ((3, 4, 2), 1)):
            for out in (tf.int32, tf.int64):
                x = values(dt, shape, "small")
                if dt in INTS:
                    x = (x % 3).astype(x.dtype)  # ties: the first index wins in both
                fn = lambda t, a=axis, o=out: getattr(tf.raw_ops, op)(input=t, dimension=a, output_type=o)
                cases.append(Case(f"{op}[{dt}]{shape} axis={axis} {out.name}", fn, [x]))
    return cases


def _scan_cases(op: str):
    cases = []
    for dt in xla_dtypes(op, among=FLOATS + INTS):
        for shape, axis in (((5,), 0), ((2, 3), 1), ((2, 3), -2), ((0, 3), 0), ((2, 4, 2), 1)):
            for exclusive in (False, True):
                for reverse in (False, True):
                    x = values(dt, shape, "small" if op == "Cumprod" else "any")
                    fn = lambda t, a=axis, e=exclusive, r=reverse: getattr(tf.raw_ops, op)(
                        x=t, axis=a, exclusive=e, reverse=r)
                    tol = {"rtol": 1e-5, "atol": 1e-5} if dt == "f32" else {}
                    if dt in ("f16", "bf16"):
                        tol = {"rtol": 3e-2, "atol": 3e-2}  # TF accumulates in the half type, XLA in f32
                    cases.append(Case(f"{op}[{dt}]{shape} axis={axis} excl={exclusive} rev={reverse}", fn, [x],
                                      **tol))
    return cases


def _l2_cases():
    cases = []
    for dt in xla_dtypes("L2Loss", among=FLOATS):
        for shape in ((), (0,), (2, 3)):
            cases.append(Case(f"L2Loss[{dt}]{shape}", raw("L2Loss"), [values(dt, shape)],
                              **({"rtol": 1e-5} if dt == "f32" else {})))
    return cases


BATCHES = {
    "sum-mean": lambda: _reduce_cases("Sum") + _reduce_cases("Mean"),
    "max-min": lambda: _reduce_cases("Max") + _reduce_cases("Min"),
    "prod-all-any": lambda: _reduce_cases("Prod") + _reduce_cases("All") + _reduce_cases("Any"),
    "argmax-argmin": lambda: _arg_cases("ArgMax") + _arg_cases("ArgMin"),
    "cumsum-cumprod": lambda: _scan_cases("Cumsum") + _scan_cases("Cumprod"),
    "l2loss": _l2_cases,
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch(name):
    run_batch(BATCHES[name]())


def test_reduction_module_form():
    """tf2xla's form: convert to the accumulation type, a named add reducer, convert back, reshape."""
    from tfxla_cluster.tf2hlo import lower_function

    f = tf.function(lambda x: tf.reduce_sum(x, axis=1, keepdims=True), autograph=False)
    x = np.ones((4, 8), tf.bfloat16.as_numpy_dtype)
    text = lower_function(f.get_concrete_function(tf.TensorSpec([4, 8], tf.bfloat16)), x).module.to_string()
    assert "%Sum-reduction (x: f32[], y: f32[]) -> f32[]" in text
    assert "f32[4,8]{1,0} convert(%arg0)" in text
    assert "f32[4]{0} reduce(" in text and "dimensions={1}, to_apply=%Sum-reduction" in text
    assert "bf16[4,1]{1,0} reshape(" in text


def test_duplicate_axes_error():
    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.tf2hlo import lower_function

    f = tf.function(lambda x: tf.raw_ops.Sum(input=x, axis=[1, -1]), autograph=False)
    with pytest.raises(InvalidArgumentError, match="Axes contains duplicate dimension: 1"):
        lower_function(f.get_concrete_function(tf.TensorSpec([2, 3])), np.zeros((2, 3), np.float32))
