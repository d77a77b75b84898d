"""Test harness for the TF→HLO lowering: lower tiny tf.functions, evaluate, compare with TF eager.

One *batch* is a list of cases (each: a callable on TF tensors plus numpy arguments). All cases of a
batch are traced into ONE tf.function (their inputs concatenated, their outputs concatenated), lowered
once with ``lower_function``, evaluated once with the reference evaluator, and — when jax is importable —
parsed and run once by real XLA. That keeps the directory fast while still checking, per case:

* the evaluator's result against TF eager (exact for ints and bools, ``rtol``/``atol`` for floats);
* the printer→parser round trip of the module;
* XLA's parser accepting the text, and XLA:CPU's result against the evaluator.

A case TF eager cannot run (no CPU kernel for that dtype) is compared with XLA only. A case whose TF CPU
kernel rejects what TF's XLA compiles — which depends on TF's oneDNN mode: without oneDNN, TF's CPU kernels
refuse dilated Conv2DBackpropInput and NCHW pooling — is compared with TF's own XLA
(``tf.function(jit_compile=True)``) on the same machine instead, and so is any output that TF's CPU kernel
leaves undefined (``Case.tf_undefined``).
"""
from __future__ import annotations

import importlib.util
import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import op_def_registry

from tfxla_cluster.hlo import parse_module
from tfxla_cluster.tf2hlo import LoweredCluster, lower_function

HAVE_JAX = importlib.util.find_spec("jax") is not None

DTYPES: dict[str, Any] = {
    "f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
    "i32": np.int32, "i64": np.int64, "bool": np.bool_,
}
_TF_ENUM = {
    "f32": types_pb2.DT_FLOAT, "f64": types_pb2.DT_DOUBLE, "f16": types_pb2.DT_HALF,
    "bf16": types_pb2.DT_BFLOAT16, "i32": types_pb2.DT_INT32, "i64": types_pb2.DT_INT64, "bool": types_pb2.DT_BOOL,
}
FLOATS = ("f32", "f64", "f16", "bf16")
INTS = ("i32", "i64")

# Default float tolerances: a few ulps of each type (ops override where their math needs more).
TOL = {"f32": (2e-6, 1e-6), "f64": (1e-12, 1e-12), "f16": (2e-3, 1e-3), "bf16": (1.6e-2, 1e-2)}


def xla_dtypes(op: str, attr: str = "T", among: Sequence[str] = tuple(DTYPES)) -> list[str]:
    """Our dtypes that TF's XLA_CPU_JIT registry allows for ``op``'s type attr ``attr``."""
    from tfxla_cluster.tfops.xla_kernels import jit_kernels

    op_def = op_def_registry.get(op)
    if op_def is not None and attr not in {a.name for a in op_def.attr}:
        fixed = {a.type for a in op_def.input_arg if a.type}
        return [d for d in among if _TF_ENUM[d] in fixed]
    allowed: set[int] = set()
    for kdef in jit_kernels("XLA_CPU_JIT").get(op, []):
        cons = [c for c in kdef.constraint if c.name == attr]
        if not cons:
            return list(among)
        allowed |= set(cons[0].allowed_values.list.type)
    return [d for d in among if _TF_ENUM[d] in allowed]


def raw(op: str, **attrs) -> Callable:
    """``tf.raw_ops.<op>`` called with positional inputs (names from the OpDef) and fixed attrs."""
    fn = getattr(tf.raw_ops, op)
    n_inputs = len(op_def_registry.get(op).input_arg)
    names = list(inspect.signature(fn).parameters)[:n_inputs]  # raw_ops may rename inputs (Select: x, y)

    def call(*inputs):
        return fn(**dict(zip(names, inputs)), **attrs)
    call.__name__ = op
    return call


@dataclass
class Case:
    label: str
    fn: Callable
    args: list[np.ndarray]
    rtol: float | None = None
    atol: float | None = None
    xla_rtol: float | None = None   # XLA:CPU vs evaluator (XLA's own approximations)
    outputs: list[str] = field(default_factory=list)
    # Outputs TF's CPU kernel leaves uninitialised in some oneDNN mode (FusedBatchNormV3's inference-mode
    # reserve spaces without oneDNN); their reference is TF's XLA, which defines them.
    tf_undefined: tuple[int, ...] = ()


@dataclass
class BatchResult:
    lowered: LoweredCluster
    text: str
    skipped_tf: list[str]
    # cases whose reference is TF's XLA because TF's CPU kernel rejects them in this oneDNN mode, with why
    tf_xla_reference: list[str] = field(default_factory=list)


def _flatten(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _spec(a: np.ndarray) -> tf.TensorSpec:
    return tf.TensorSpec(a.shape, tf.as_dtype(a.dtype))


def _close(label: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{label}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu" and got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=label)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=label)


def _tol(case: Case, dtype: np.dtype) -> tuple[float, float]:
    name = {np.dtype(v): k for k, v in DTYPES.items()}.get(np.dtype(dtype), "f32")
    rtol, atol = TOL.get(name, (0.0, 0.0))
    return (case.rtol if case.rtol is not None else rtol), (case.atol if case.atol is not None else atol)


def _lower_and_eval(cases: Sequence[Case]):
    flat_args = [a for c in cases for a in c.args]

    def whole(*inputs):
        outs, k = [], 0
        for c in cases:
            outs.extend(_flatten(c.fn(*inputs[k:k + len(c.args)])))
            k += len(c.args)
        return outs

    concrete = tf.function(whole, autograph=False).get_concrete_function(*[_spec(a) for a in flat_args])
    lowered = lower_function(concrete, *flat_args)
    return lowered, flat_args, lowered.run(*flat_args)


def _xla_sample(cases: Sequence[Case]) -> list[Case]:
    """One representative case per input dtype: the one with the most input elements."""
    best: dict[str, Case] = {}
    for c in cases:
        key = ",".join(str(a.dtype) for a in c.args)
        size = sum(a.size for a in c.args)
        if key not in best or size > sum(a.size for a in best[key].args):
            best[key] = c
    return list(best.values())


def run_batch(cases: Sequence[Case], *, xla: str | None = None, reference: str = "tf") -> BatchResult:
    """Lower, evaluate and check every case of the batch (see the module docstring).

    ``xla``: "all" runs the whole module on XLA:CPU; "sample" (the default, for speed) runs a module
    of one representative case per dtype; "none" skips execution. XLA's parser always sees the
    whole module. The environment variable ``TF2HLO_XLA`` overrides the default.
    ``reference``: "tf" (TF eager, falling back to TF's XLA as described above) or "tf_xla" (TF's own
    XLA for every case: ops with no TF CPU kernel, or whose CPU kernel TF's XLA does not follow).
    """
    xla = xla or os.environ.get("TF2HLO_XLA", "sample")
    lowered, flat_args, got = _lower_and_eval(cases)
    text = lowered.module.to_string()
    assert parse_module(text).to_string() == text, "printer→parser round trip changed the module"

    skipped, referenced_xla, k = [], [], 0
    counts = []
    xla_wants = _tf_xla_batch(cases) if reference == "tf_xla" else None
    for ci, c in enumerate(cases):
        want, why = (xla_wants[ci], "TF's XLA is the reference") if xla_wants is not None else _tf_reference(c)
        if want is None:
            skipped.append(c.label)
        elif why is not None:
            referenced_xla.append(f"{c.label}: {why}")
        n = len(want) if want is not None else _count_outputs(c)
        counts.append(n)
        for j in range(n):
            if want is not None:
                rtol, atol = _tol(c, want[j].dtype)
                _close(f"{c.label} output {j}", got[k + j], want[j], rtol, atol)
        k += n
    assert k == len(got), f"batch produced {len(got)} outputs, cases expect {k}"

    if HAVE_JAX:
        from tests.tf2hlo.tf2hlo_xla import xla_parse, xla_run

        xla_parse(text)
        if xla != "none":
            sample = list(cases) if xla == "all" else _xla_sample(cases)
            if xla == "all":
                s_lowered, s_args, s_got, s_text, s_counts = lowered, flat_args, got, text, counts
            else:
                s_lowered, s_args, s_got = _lower_and_eval(sample)
                s_text = s_lowered.module.to_string()
                s_counts = [counts[list(cases).index(c)] for c in sample]
            params = [np.asarray(s_args[i.index]).astype(i.element_type.dtype) for i in s_lowered.parameters]
            theirs = xla_run(s_text, *params)
            assert len(theirs) == len(s_got)
            k = 0
            for c, n in zip(sample, s_counts):
                for j in range(n):
                    rtol, atol = _tol(c, s_got[k + j].dtype)
                    if c.xla_rtol is not None:
                        rtol = max(rtol, c.xla_rtol)
                    _close(f"XLA vs evaluator: {c.label} output {j}", theirs[k + j], s_got[k + j], rtol, atol)
                k += n
    return BatchResult(lowered, text, skipped, referenced_xla)


def _tf_xla(case: Case) -> list[np.ndarray]:
    """The case run by TF's own XLA (``jit_compile=True``) on this machine."""
    fn = tf.function(case.fn, jit_compile=True, autograph=False)
    return [np.asarray(w.numpy()) for w in _flatten(fn(*[tf.constant(a) for a in case.args]))]


def _tf_xla_batch(cases: Sequence[Case]) -> list[list[np.ndarray]]:
    """Every case run by TF's own XLA in ONE ``jit_compile=True`` function (one XLA compilation)."""
    counts = [_count_outputs(c) for c in cases]

    def whole(*inputs):
        outs, k = [], 0
        for c in cases:
            outs.extend(_flatten(c.fn(*inputs[k:k + len(c.args)])))
            k += len(c.args)
        return outs
    flat = tf.function(whole, jit_compile=True, autograph=False)(*[tf.constant(a) for c in cases for a in c.args])
    flat = [np.asarray(w.numpy()) for w in _flatten(flat)]
    out, k = [], 0
    for n in counts:
        out.append(flat[k:k + n])
        k += n
    return out


def _tf_reference(case: Case) -> tuple[list[np.ndarray] | None, str | None]:
    """TF's result for ``case`` and, when it is not TF eager's, why.

    None: TF has no CPU kernel for these dtypes (compared with XLA only). When TF's CPU kernel rejects the
    arguments (a limit of the kernel in this oneDNN mode: "Current CPU implementations do not yet support
    dilation rates larger than 1" without oneDNN, "could not create a primitive descriptor" from a
    oneDNN kernel), TF's XLA is the reference; if XLA rejects them too, the kernel's error stands.
    """
    try:
        want = [np.asarray(w.numpy()) for w in _flatten(case.fn(*[tf.constant(a) for a in case.args]))]
    except (tf.errors.NotFoundError, tf.errors.UnimplementedError):  # no CPU kernel for this dtype
        return None, "no TF CPU kernel"
    except (tf.errors.InvalidArgumentError, tf.errors.AbortedError) as kernel_error:  # oneDNN kernels abort
        try:
            return _tf_xla(case), f"TF's CPU kernel rejects it: {kernel_error.message.splitlines()[-1]}"
        except tf.errors.OpError:
            raise kernel_error from None
    if case.tf_undefined:
        xla = _tf_xla(case)
        for j in case.tf_undefined:
            want[j] = xla[j]
    return want, None


def _count_outputs(case: Case) -> int:
    g = tf.function(case.fn, autograph=False).get_concrete_function(*[_spec(a) for a in case.args])
    return len(g.outputs)


# ---------------------------------------------------------------- input generators
def values(dtype: str, shape: Sequence[int], domain: str = "any", seed: int = 0) -> np.ndarray:
    """Deterministic test values of ``dtype`` in ``domain`` (no denormals)."""
    rng = np.random.default_rng(seed + 7919 * len(shape) + sum(shape))
    n = int(np.prod(shape, dtype=np.int64))
    np_dtype = DTYPES[dtype]
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(np.bool_).reshape(shape)
    if dtype in INTS:
        lo, hi = {"any": (-9, 10), "pos": (1, 10), "nonzero": (1, 10), "shift": (0, 5), "small": (-3, 4),
                  "nonneg": (0, 10)}.get(domain, (-9, 10))
        v = rng.integers(lo, hi, n)
        if domain == "nonzero":
            v = v * rng.choice([-1, 1], n)
        return v.astype(np_dtype).reshape(shape)
    lo, hi = {"any": (-3.0, 3.0), "pos": (0.1, 3.0), "unit": (-0.95, 0.95), "ge1": (1.05, 4.0),
              "nonzero": (0.25, 3.0), "small": (-0.9, 0.9), "wide": (-9.0, 9.0)}[domain] \
        if domain in ("any", "pos", "unit", "ge1", "nonzero", "small", "wide") else (-3.0, 3.0)
    v = rng.uniform(lo, hi, n)
    if domain == "nonzero":
        v = v * rng.choice([-1, 1], n)
    return v.astype(np_dtype).reshape(shape)
