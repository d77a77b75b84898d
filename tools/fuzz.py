"""Differential fuzzer: random small TF programs run by TF eager, TF's XLA, ours jit and ours auto.

Stage: testing tool (not part of the package). A *program* is a small SSA list of TF ops over inputs
(function arguments, constants baked into the graph, or ``tf.Variable``s read and updated inside),
with a little control flow (``tf.cond`` / ``tf.while_loop``). Every program is run four ways:

``eager``     TF's kernels, op by op (recorded, not compared: TF's kernels and TF's XLA differ),
``xla``       ``tf.function(jit_compile=True)`` — TF's XLA, *the oracle*,
``jit``       ``tfxla_cluster.function(fn, jit_compile=True)``,
``auto``      ``tfxla_cluster.function(fn, flags=AUTO_FLAGS)`` (auto-clustering, min cluster size 1).

A result must equal TF's XLA: integers and bools exactly; floats within a per-op ulp budget summed
along the value's dependency cone (plus the same budget relative to the largest magnitude that fed it,
for cancellation), NaN positions identical, signed zeros compared where the chain is exact. A value
computed by a discontinuous op (floor, compare, cast to int, ...) from an inexact input is not compared
(either rounding is right). A program TF's XLA rejects is counted as rejected and not run further;
ours must not error where TF's XLA does not. Ours auto-clustered is held to TF's own auto-clustering
(:func:`tf_auto`, a child process) where that differs from TF's XLA: a constant-only cluster TF folds
with its kernels, an op TF leaves to a kernel that does not exist for its dtype.

Known and left open (reported, not hidden): an f64 ``matmul`` (f32 likely alike) whose single products overflow
(operands near ±max). TF's XLA rounds each product (to ±inf) before adding it (TF's binary is built
without FMA), so +inf and -inf products give NaN. Ours calls OpenBLAS's FMA kernels, where
``fma(a, b, acc)`` never rounds the product: the same row gives -inf, inf or a finite value. Matching needs a
GEMM without FMA in Eigen's summation order (codegen/gemm.py), at a large cost on every dot.

Also left open, because TF's XLA is not consistent with itself on this machine (its result depends on which
code path LLVM chose for an element, so no single semantics matches it; measured against TF 2.21's XLA):

- bf16 results that are denormal in f32 (min/max of a -denormal and 0, products with denormals): TF's XLA
  keeps the denormal where its f32→bf16 rounding is integer code and flushes it to ±0 where LLVM selected
  AVX512_BF16's ``vcvtneps2bf16`` (denormals are zero for it): max(-d, 0) keeps -d on 2..65 contiguous
  elements but gives -0 on one element and inside a broadcasting loop (seeds 5001448, 21000080); a
  scalar bf16 sin of a -denormal, beside a second output, is the -denormal in TF's XLA and -0 in ours
  (seed 32001846; alone, the two agree).
- f32 ``log`` of a negative denormal argument: -inf (DAZ makes it ±0) on loops of 1, 2, 4, 8, 9, 16, 17, 31
  elements, NaN on loops of 3, 5, 6, 7 elements and on the 7-element tail of 15 (seeds 12000056, 21000263).
- ``reduce_prod`` (and a sum that overflows) whose result depends on the order 0 and ±inf meet, over a reduced
  dimension longer than 32: XLA's TreeReductionRewriter (reduce-window of 32, padding split low/high, then a
  reduce) is not modelled. Reductions whose reduced dims are all <= 32 multiply in order as XLA:CPU does
  (seed 15000363, fixed).

Open and ours (other areas): an If/Case branch whose arguments are constants is compiled by TF with the
arguments as ``Const`` nodes, so TF's graph folding computes the branch body with TF's kernels (Eigen's
``sign`` of a -denormal is +denormal, of -0 is +0; seed 21001517); ours lowers the body with XLA's semantics
(tf2hlo). Auto-clustered, a bf16 ``relu6`` of a constant beside a ``tf.while_loop`` over constants is TF's
kernel's value in TF (-0) and +0 in ours (seed 4000602, replayed under jit only).
Not yet fixed: an f32 ``reduce_min`` of a constant [-denormal, 0, 0] beside a ``tf.while_loop`` over
its result is the -denormal in TF's XLA and +0 in ours (seed 32006846, program 20435); alone the two agree, so it
likely belongs with the control-flow-over-constants graph folding above.

A failure is shrunk (failing output's cone only, ops bypassed, input values zeroed) to a minimal
program, printed as a JSON spec that ``tests/e2e/test_fuzz.py`` replays as a regression test.

    python tools/fuzz.py --seed 0 --count 200          # bounded run
    python tools/fuzz.py --long --seed 7 --count 10000 # nightly: bigger programs and shapes
    python tools/fuzz.py --seed 60 --count 300 --batch 25 --hang-seconds 1800 --json s60.json
    python tools/fuzz.py --replay spec.json            # run one stored program

``--batch``: programs are compiled side by side, one module per runner for the whole batch (measured
2026-11-27, seed 97, 25 programs: 12.7 s CPU batched, 14.8 s one by one, ~8 s of it TF's start-up); a batch
with a failure or a rejection is rerun program by program. It skips TF eager (recorded only) and cannot
see a difference that shows only when a program runs alone (a cluster's other members change what TF
folds or fuses). Under ``nice -n 19`` on the shared 2-core machine: 170 programs/min at load 1, 30-45 per
process at load 15-20.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# every program is compiled fresh: a persistent cache shared with other checkouts could answer with code
# compiled by other sources
os.environ.setdefault("TFXLA_COMPILE_CACHE", "off")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensorflow as tf  # noqa: E402

AUTO_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
RUNNERS = ("eager", "xla", "jit", "auto")

FLOATS = ("float16", "bfloat16", "float32", "float64")
SINTS = ("int8", "int16", "int32", "int64")
UINTS = ("uint8", "uint16")
INTS = SINTS + UINTS
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ("bool",)
COMPLEX = ("complex64", "complex128")
PART = {"complex64": "float32", "complex128": "float64"}  # a complex dtype's real and imaginary parts
UNCHECKED = math.inf  # tolerance of a value no runner is held to


def np_dtype(name: str) -> np.dtype:
    return np.dtype(tf.as_dtype(name).as_numpy_dtype)


# ----------------------------------------------------------------------------- the op table

@dataclasses.dataclass(frozen=True)
class Op:
    """One fuzzed op: how many operands and of which dtypes, how to apply it, its error budget.

    ``ulps``: error of one application in ulps of the result (0: exact). ``cont``: the op is
    continuous, so an inexact operand gives a proportionally inexact result (else the result of an
    inexact operand is unchecked). ``kind`` drives operand selection (see :func:`_gen_node`).
    """
    kind: str
    fn: Callable
    dtypes: tuple[str, ...]
    ulps: float = 0
    cont: bool = True
    out: str | None = None  # result dtype when it is not the operand's ("part": a complex operand's part)

    def result(self, dtype: str) -> str:
        """The result dtype of the op on operands of ``dtype``."""
        if self.out == "part":
            return PART.get(dtype, dtype)
        if self.out == "complex":
            return {"float32": "complex64", "float64": "complex128"}[dtype]
        return self.out or dtype


def _gelu_exact(x):
    return tf.nn.gelu(x, approximate=False)


def _gelu_tanh(x):
    return tf.nn.gelu(x, approximate=True)


OPS: dict[str, Op] = {
    # unary, float
    "abs": Op("unary", tf.abs, NUMERIC[:4] + SINTS),
    "neg": Op("unary", tf.negative, FLOATS + SINTS),
    "sign": Op("unary", tf.sign, FLOATS + SINTS, cont=False),
    "floor": Op("unary", tf.floor, FLOATS, cont=False),
    "ceil": Op("unary", tf.math.ceil, FLOATS, cont=False),
    "round": Op("unary", tf.round, FLOATS, cont=False),
    "rint": Op("unary", tf.math.rint, FLOATS, cont=False),
    "sqrt": Op("unary", tf.sqrt, FLOATS, 1),
    "rsqrt": Op("unary", tf.math.rsqrt, FLOATS, 2),
    "exp": Op("unary", tf.exp, FLOATS, 2),
    "expm1": Op("unary", tf.math.expm1, FLOATS, 3),
    "log": Op("unary", tf.math.log, FLOATS, 2),
    "log1p": Op("unary", tf.math.log1p, FLOATS, 3),
    "tanh": Op("unary", tf.tanh, FLOATS, 3),
    "sigmoid": Op("unary", tf.sigmoid, FLOATS, 4),
    "sin": Op("unary", tf.sin, FLOATS, 3),
    "cos": Op("unary", tf.cos, FLOATS, 3),
    "erf": Op("unary", tf.math.erf, FLOATS, 4),
    "reciprocal": Op("unary", tf.math.reciprocal, FLOATS, 1),
    "square": Op("unary", tf.square, FLOATS + SINTS, 0),
    "relu": Op("unary", tf.nn.relu, FLOATS + SINTS),
    "relu6": Op("unary", tf.nn.relu6, FLOATS),
    "elu": Op("unary", tf.nn.elu, FLOATS, 3),
    "softplus": Op("unary", tf.nn.softplus, FLOATS, 4),
    "gelu": Op("unary", _gelu_exact, FLOATS, 8),
    "gelu_tanh": Op("unary", _gelu_tanh, FLOATS, 8),
    "is_nan": Op("unary", tf.math.is_nan, FLOATS, cont=False, out="bool"),
    "is_inf": Op("unary", tf.math.is_inf, FLOATS, cont=False, out="bool"),
    "is_finite": Op("unary", tf.math.is_finite, FLOATS, cont=False, out="bool"),
    "invert": Op("unary", tf.bitwise.invert, INTS),
    "not": Op("unary", tf.logical_not, ("bool",)),
    # binary, broadcasting
    "add": Op("binary", tf.add, NUMERIC, 1),
    "sub": Op("binary", tf.subtract, NUMERIC, 1),
    "mul": Op("binary", tf.multiply, NUMERIC, 1),
    "div": Op("binary", tf.math.truediv, FLOATS, 1),
    "floordiv": Op("binary", tf.math.floordiv, NUMERIC, cont=False),
    "floormod": Op("binary", tf.math.floormod, NUMERIC, cont=False),
    "truncatediv": Op("binary", tf.truncatediv, INTS, cont=False),
    "maximum": Op("binary", tf.maximum, NUMERIC),
    "minimum": Op("binary", tf.minimum, NUMERIC),
    "pow": Op("binary", tf.pow, FLOATS[2:] + ("int32", "int64"), 4),
    "squared_difference": Op("binary", tf.math.squared_difference, FLOATS + ("int32", "int64"), 2),
    "atan2": Op("binary", tf.atan2, FLOATS, 4),
    "xlogy": Op("binary", tf.math.xlogy, FLOATS, 4),
    "xdivy": Op("binary", tf.math.xdivy, FLOATS, 2),
    "bitwise_and": Op("binary", tf.bitwise.bitwise_and, INTS),
    "bitwise_xor": Op("binary", tf.bitwise.bitwise_xor, INTS),
    "equal": Op("binary", tf.equal, ALL, cont=False, out="bool"),
    "less": Op("binary", tf.less, NUMERIC, cont=False, out="bool"),
    "greater_equal": Op("binary", tf.greater_equal, NUMERIC, cont=False, out="bool"),
    "logical_and": Op("binary", tf.logical_and, ("bool",)),
    "logical_xor": Op("binary", tf.math.logical_xor, ("bool",)),
    # others (operands chosen by kind)
    "select": Op("select", tf.where, ALL),
    "clip": Op("clip", tf.clip_by_value, NUMERIC),
    "cast": Op("cast", tf.cast, ALL, cont=False),
    "reduce_sum": Op("reduce", tf.reduce_sum, NUMERIC, 2),
    "reduce_prod": Op("reduce", tf.reduce_prod, FLOATS[2:] + ("int32", "int64"), 4),
    "reduce_max": Op("reduce", tf.reduce_max, NUMERIC),
    "reduce_min": Op("reduce", tf.reduce_min, NUMERIC),
    "reduce_mean": Op("reduce", tf.reduce_mean, NUMERIC, 2),
    "reduce_any": Op("reduce", tf.reduce_any, ("bool",)),
    "reduce_all": Op("reduce", tf.reduce_all, ("bool",)),
    "argmax": Op("argreduce", tf.argmax, FLOATS[2:] + INTS, cont=False, out="int64"),
    "argmin": Op("argreduce", tf.argmin, FLOATS[2:] + INTS, cont=False, out="int64"),
    "cumsum": Op("scan", tf.cumsum, FLOATS[2:] + ("int32", "int64"), 2),
    "transpose": Op("transpose", tf.transpose, ALL),
    "reverse": Op("reverse", tf.reverse, ALL),
    "concat": Op("concat", tf.concat, ALL),
    "slice": Op("slice", tf.slice, ALL),
    "gather": Op("gather", tf.gather, ALL),
    "tile": Op("tile", tf.tile, ALL),
    "reshape": Op("reshape", tf.reshape, ALL),
    "roll": Op("roll", tf.roll, ALL),
    "pad": Op("pad", tf.pad, NUMERIC),
    "matmul": Op("matmul", tf.matmul, ("float32", "float64", "int32"), 2),
    "softmax": Op("softmax", tf.nn.softmax, ("float32", "float64"), 8),
    "cond": Op("cond", None, FLOATS + SINTS),
    "while": Op("while", None, FLOATS + SINTS),
    "assign_add": Op("assign_add", None, ("float32", "int32", "float64", "float16", "int8", "complex64")),
}

# A second table (kept apart so the first keeps its order): more float functions, integer bit ops,
# complex numbers, shape ops, sorting, segments, convolutions and pooling, more control flow, and
# variables updated by assign/assign_sub as well.
OPS.update({
    "tan": Op("unary", tf.tan, FLOATS, 4),
    "asin": Op("unary", tf.asin, FLOATS + COMPLEX, 4),
    "acos": Op("unary", tf.acos, FLOATS + COMPLEX, 4),
    "atan": Op("unary", tf.atan, FLOATS, 4),
    "sinh": Op("unary", tf.sinh, FLOATS, 4),
    "cosh": Op("unary", tf.cosh, FLOATS, 4),
    "asinh": Op("unary", tf.asinh, FLOATS + COMPLEX, 4),
    "acosh": Op("unary", tf.acosh, FLOATS + COMPLEX, 4),
    "atanh": Op("unary", tf.atanh, FLOATS, 4),
    "erfc": Op("unary", tf.math.erfc, FLOATS, 8),
    "log_sigmoid": Op("unary", tf.math.log_sigmoid, FLOATS, 4),
    "softsign": Op("unary", tf.nn.softsign, FLOATS, 2),
    "selu": Op("unary", tf.nn.selu, FLOATS, 4),
    "leaky_relu": Op("unary", tf.nn.leaky_relu, FLOATS, 1),
    "bitwise_or": Op("binary", tf.bitwise.bitwise_or, INTS),
    "left_shift": Op("binary", tf.bitwise.left_shift, INTS),
    "right_shift": Op("binary", tf.bitwise.right_shift, INTS),
    "truncatemod": Op("binary", tf.truncatemod, FLOATS[2:] + ("int32", "int64"), cont=False),
    "not_equal": Op("binary", tf.not_equal, ALL + COMPLEX, cont=False, out="bool"),
    "less_equal": Op("binary", tf.less_equal, NUMERIC, cont=False, out="bool"),
    # complex
    "cadd": Op("binary", tf.add, COMPLEX, 1),
    "cmul": Op("binary", tf.multiply, COMPLEX, 2),
    "csub": Op("binary", tf.subtract, COMPLEX, 1),
    "cneg": Op("unary", tf.negative, COMPLEX),
    "conj": Op("unary", tf.math.conj, COMPLEX),
    "real": Op("unary", tf.math.real, COMPLEX, out="part"),
    "imag": Op("unary", tf.math.imag, COMPLEX, out="part"),
    "cabs": Op("unary", tf.abs, COMPLEX, 2, out="part"),
    "complex": Op("binary", tf.complex, ("float32", "float64"), out="complex"),
    "cselect": Op("select", tf.where, COMPLEX),
    "creduce_sum": Op("reduce", tf.reduce_sum, COMPLEX, 2),
    "ctranspose": Op("transpose", tf.transpose, COMPLEX),
    "cconcat": Op("concat", tf.concat, COMPLEX),
    # shapes
    "expand_dims": Op("expand_dims", tf.expand_dims, ALL),
    "squeeze": Op("squeeze", tf.squeeze, ALL),
    "broadcast_to": Op("broadcast_to", tf.broadcast_to, ALL),
    "stack": Op("stack", tf.stack, ALL),
    "strided_slice": Op("strided_slice", None, ALL),
    "mirror_pad": Op("mirror_pad", tf.pad, NUMERIC),
    "one_hot": Op("one_hot", tf.one_hot, ("int32", "int64", "uint8")),
    "cumprod": Op("scan", tf.math.cumprod, FLOATS[2:] + ("int32", "int64"), 4),
    "log_softmax": Op("softmax", tf.nn.log_softmax, ("float32", "float64"), 8),
    "l2_normalize": Op("softmax", tf.math.l2_normalize, ("float32", "float64"), 4),
    "bias_add": Op("bias_add", tf.nn.bias_add, FLOATS + ("int32",), 1),
    "sort": Op("sort", tf.sort, FLOATS[2:] + ("int32", "int64")),
    "top_k": Op("top_k", tf.math.top_k, FLOATS[2:] + ("int32",)),
    "segment_sum": Op("segment", tf.math.unsorted_segment_sum, FLOATS[2:] + ("int32",), 1),
    "segment_max": Op("segment", tf.math.unsorted_segment_max, FLOATS[2:] + ("int32",)),
    "batch_matmul": Op("batch_matmul", tf.matmul, ("float32", "float64"), 2),
    "conv2d": Op("conv2d", tf.nn.conv2d, ("float32",), 4),
    "max_pool": Op("pool", tf.nn.max_pool2d, ("float32", "float64", "float16")),
    "avg_pool": Op("pool", tf.nn.avg_pool2d, ("float32", "float64"), 2),
    "while2": Op("while2", None, FLOATS[2:] + ("int32", "int64")),
    "case": Op("case", None, FLOATS + SINTS),
})

# A third table (issue 19's families the first two left thin): complex division and casts to and from
# complex, dots and convolutions in f16/bf16/f64, depthwise convolutions, bf16 pooling, variables of every
# dtype (bool by assign), variables updated inside tf.cond / tf.while_loop, a cond nested in a while, and
# tf.where broadcasting its condition.
OPS.update({
    "cdiv": Op("binary", tf.math.truediv, COMPLEX, 4),
    "ccast": Op("ccast", tf.cast, ALL + COMPLEX, cont=False),
    "matmul_more": Op("matmul", tf.matmul, ("float16", "bfloat16", "int64"), 2),
    "conv2d_more": Op("conv2d", tf.nn.conv2d, ("float16", "bfloat16", "float64"), 4),
    "depthwise_conv2d": Op("depthwise", tf.nn.depthwise_conv2d, ("float32", "float64", "float16"), 4),
    "max_pool_bf16": Op("pool", tf.nn.max_pool2d, ("bfloat16",)),
    "assign_more": Op("assign_add", None, ("bfloat16", "uint8", "int16", "uint16", "int64", "complex128",
                                           "bool")),
    "cond_assign": Op("cond_assign", None, ("float32", "float64", "int32", "float16", "complex64")),
    "while_assign": Op("while_assign", None, ("float32", "float64", "int32", "int64", "bfloat16")),
    "while_cond": Op("while_cond", None, FLOATS + SINTS),
    "where_bcast": Op("where_bcast", tf.where, ALL + COMPLEX),
})
# node kinds that update a variable (their first operand): the variable's tolerance is theirs
ASSIGN_KINDS = ("assign_add", "cond_assign", "while_assign")

# Ops the branches of cond/while apply (shape- and dtype-preserving unary ops).
BRANCH_OPS = ("abs", "neg", "square", "relu", "sign")


# ----------------------------------------------------------------------------- programs

@dataclasses.dataclass
class Input:
    """A program input. ``kind``: 'arg' (a tensor argument), 'np' / 'list' (an argument given as a numpy
    array of the widest dtype of its kind / as a Python list, which ``input_signature`` converts: with
    one of them, the program's function has an input signature), 'const' (baked into the graph), 'var'
    (a ``tf.Variable`` the function captures), 'vararg' (a ``tf.Variable`` passed as an argument)."""
    kind: str
    dtype: str
    shape: tuple[int, ...]
    values: list  # flat, Python scalars (NaN/inf as floats; complex numbers as [re, im])

    def array(self) -> np.ndarray:
        if self.dtype in COMPLEX:
            vals = [complex(*v) if isinstance(v, (list, tuple)) else complex(v) for v in self.values]
            return np.array(vals, np.complex128).astype(np_dtype(self.dtype)).reshape(self.shape)
        return np.array(self.values, dtype=np.float64 if self.dtype in FLOATS else None) \
            .astype(np_dtype(self.dtype)).reshape(self.shape)

    def call_value(self) -> Any:
        """What the caller passes for an argument of kind 'arg', 'np' or 'list'."""
        a = self.array()
        if self.kind == "arg":
            return tf.constant(a)
        wide = a.astype(np.float64 if self.dtype in FLOATS else np.complex128 if self.dtype in COMPLEX
                        else bool if self.dtype == "bool" else np.int64)
        return wide if self.kind == "np" else wide.tolist()


ARG_KINDS = ("arg", "np", "list", "vararg")
VAR_KINDS = ("var", "vararg")


@dataclasses.dataclass
class Node:
    op: str
    args: list[int]
    attrs: dict
    dtype: str
    shape: tuple[int, ...]


@dataclasses.dataclass
class Program:
    inputs: list[Input]
    nodes: list[Node]
    outputs: list[int]

    def value_info(self, i: int) -> tuple[str, tuple[int, ...]]:
        if i < len(self.inputs):
            return self.inputs[i].dtype, self.inputs[i].shape
        n = self.nodes[i - len(self.inputs)]
        return n.dtype, n.shape

    def to_json(self) -> dict:
        return {"inputs": [dataclasses.asdict(i) for i in self.inputs],
                "nodes": [dataclasses.asdict(n) for n in self.nodes], "outputs": self.outputs}

    @staticmethod
    def from_json(d: dict) -> "Program":
        ins = [Input(i["kind"], i["dtype"], tuple(i["shape"]), list(i["values"])) for i in d["inputs"]]
        nodes = [Node(n["op"], list(n["args"]), dict(n["attrs"]), n["dtype"], tuple(n["shape"]))
                 for n in d["nodes"]]
        return Program(ins, nodes, list(d["outputs"]))

    def text(self) -> str:
        lines = []
        for i, x in enumerate(self.inputs):
            vals = x.values if len(x.values) <= 12 else x.values[:12] + ["..."]
            lines.append(f"v{i} = {x.kind} {x.dtype}{list(x.shape)} {vals}")
        for j, n in enumerate(self.nodes):
            args = ", ".join(f"v{a}" for a in n.args)
            lines.append(f"v{len(self.inputs) + j} = {n.op}({args}{', ' if n.attrs else ''}"
                         f"{', '.join(f'{k}={v!r}' for k, v in n.attrs.items())}) -> {n.dtype}{list(n.shape)}")
        lines.append("return " + ", ".join(f"v{o}" for o in self.outputs))
        return "\n".join(lines)


# ----------------------------------------------------------------------------- building TF functions

def _apply(node: Node, a: list, variables: dict) -> Any:
    op, at = node.op, node.attrs
    spec = OPS[op]
    if spec.kind in ("unary", "binary", "select"):
        return spec.fn(*a)
    if op == "clip":
        return tf.clip_by_value(a[0], a[1], a[2])
    if spec.kind in ("cast", "ccast"):
        return tf.cast(a[0], at["to"])
    if spec.kind == "reduce":
        return spec.fn(a[0], axis=at["axis"], keepdims=at["keepdims"])
    if spec.kind == "argreduce":
        return spec.fn(a[0], axis=at["axis"])
    if spec.kind == "scan":
        return spec.fn(a[0], axis=at["axis"], exclusive=at["exclusive"], reverse=at["reverse"])
    if spec.kind == "transpose":
        return tf.transpose(a[0], at["perm"])
    if op == "reverse":
        return tf.reverse(a[0], at["axis"])
    if spec.kind == "concat":
        return tf.concat(a, axis=at["axis"])
    if op == "slice":
        return tf.slice(a[0], at["begin"], at["size"])
    if op == "gather":
        return tf.gather(a[0], tf.constant(at["indices"], dtype=tf.int32), axis=at["axis"])
    if op == "tile":
        return tf.tile(a[0], at["multiples"])
    if op == "reshape":
        return tf.reshape(a[0], at["shape"])
    if op == "roll":
        shift = tf.constant(at["shift"])
        if at.get("computed"):  # a shift the graph computes (not a Const)
            shift = tf.cast(tf.size(a[0]) * 0, tf.int32) + shift
        return tf.roll(a[0], shift, at["axis"])
    if op == "pad":
        return tf.pad(a[0], at["paddings"], constant_values=at["value"])
    if spec.kind == "matmul":
        return tf.matmul(a[0], a[1])
    if spec.kind == "softmax":
        return spec.fn(a[0], axis=-1)
    if op == "cond":
        pred = tf.reduce_any(tf.cast(a[0], tf.bool)) if node.attrs["pred_any"] else \
            tf.reduce_all(tf.cast(a[0], tf.bool))
        return tf.cond(pred, lambda: OPS[at["then"]].fn(a[1]), lambda: OPS[at["else"]].fn(a[1]))
    if op == "while":
        body = OPS[at["body"]].fn
        _, r = tf.while_loop(lambda i, x: i < at["n"], lambda i, x: (i + 1, body(x)), (tf.constant(0), a[0]))
        return r
    if spec.kind == "assign_add":
        v = variables[node.args[0]]
        getattr(v, at.get("method", "assign_add"))(a[1])
        return v.read_value()
    if op == "expand_dims":
        return tf.expand_dims(a[0], at["axis"])
    if op == "squeeze":
        return tf.squeeze(a[0], at["axis"])
    if op == "broadcast_to":
        return tf.broadcast_to(a[0], at["shape"])
    if op == "stack":
        return tf.stack(a, axis=at["axis"])
    if op == "strided_slice":
        return a[0][tuple(slice(*t) for t in at["slices"])]
    if op == "mirror_pad":
        return tf.pad(a[0], at["paddings"], mode=at["mode"])
    if op == "one_hot":
        return tf.one_hot(a[0], at["depth"], on_value=at["on"], off_value=at["off"], axis=at["axis"])
    if op == "bias_add":
        return tf.nn.bias_add(a[0], a[1])
    if op == "sort":
        return tf.sort(a[0], axis=-1, direction=at["direction"])
    if op == "top_k":
        values, indices = tf.math.top_k(a[0], k=at["k"])
        return indices if at["indices"] else values
    if spec.kind == "segment":
        return spec.fn(a[0], tf.constant(at["ids"], tf.int32), at["num"])
    if op == "batch_matmul":
        return tf.matmul(a[0], a[1])
    if spec.kind == "conv2d":
        return tf.nn.conv2d(a[0], a[1], at["strides"], at["padding"])
    if spec.kind == "depthwise":
        return tf.nn.depthwise_conv2d(a[0], a[1], [1, at["strides"], at["strides"], 1], at["padding"])
    if spec.kind == "cond_assign":  # a variable updated in the branches of a tf.cond
        v = variables[node.args[0]]

        def branch(method):
            def f():
                getattr(v, method)(a[1])
                return tf.constant(0)
            return f
        tf.cond(tf.reduce_any(tf.cast(a[2], tf.bool)), branch(at["then"]), branch(at["else"]))
        return v.read_value()
    if spec.kind == "while_assign":  # a variable updated in every trip of a tf.while_loop
        v = variables[node.args[0]]

        def trip(i):
            v.assign_add(a[1])
            return i + 1
        tf.while_loop(lambda i: i < at["n"], trip, [tf.constant(0)])
        return v.read_value()
    if spec.kind == "while_cond":  # a tf.cond nested in a tf.while_loop's body
        then, other = OPS[at["then"]].fn, OPS[at["else"]].fn

        def body(i, x):
            return i + 1, tf.cond(tf.reduce_any(x > tf.zeros_like(x)), lambda: then(x), lambda: other(x))
        _, r = tf.while_loop(lambda i, x: i < at["n"], body, (tf.constant(0), a[0]))
        return r
    if spec.kind == "where_bcast":
        return tf.where(a[0], a[1], a[2])
    if spec.kind == "pool":
        return spec.fn(a[0], at["ksize"], at["strides"], at["padding"])
    if op == "while2":
        body = OPS[at["body"]].fn
        n = tf.minimum(tf.reduce_sum(tf.cast(a[0] > 0, tf.int32)), at["n"])  # a trip count the data decides
        _, _, acc = tf.while_loop(lambda i, x, acc: i < n, lambda i, x, acc: (i + 1, body(x), acc + x),
                                  (tf.constant(0), a[0], a[0]))
        return acc
    if op == "case":
        index = tf.math.floormod(tf.reduce_sum(tf.cast(tf.cast(a[0], tf.bool), tf.int32)), len(at["branches"]))
        return tf.switch_case(index, [lambda b=b: OPS[b].fn(a[1]) for b in at["branches"]])
    raise ValueError(op)


def build(prog: Program) -> tuple[Callable, list, dict]:
    """A Python function of the program's argument inputs, what its caller passes, fresh variables and
    the input signature (None unless an argument is given as a numpy array or a list: then every
    argument has one, and a variable argument is captured instead)."""
    sig = any(x.kind in ("np", "list") for x in prog.inputs)
    variables = {i: tf.Variable(x.array()) for i, x in enumerate(prog.inputs) if x.kind in VAR_KINDS}
    arg_ids = [i for i, x in enumerate(prog.inputs)
               if x.kind in ARG_KINDS and not (sig and x.kind == "vararg")]
    consts = {i: x.array() for i, x in enumerate(prog.inputs) if x.kind == "const"}

    def fn(*args):
        env: list = []
        for i, x in enumerate(prog.inputs):
            if i in arg_ids:
                a = args[arg_ids.index(i)]
                env.append(a.read_value() if x.kind == "vararg" else a)
            elif x.kind == "const":
                env.append(tf.constant(consts[i]))
            else:
                env.append(variables[i].read_value())
        for n in prog.nodes:
            env.append(_apply(n, [env[a] for a in n.args], variables))
        return [env[o] for o in prog.outputs]

    call = [variables[i] if prog.inputs[i].kind == "vararg" else prog.inputs[i].call_value() for i in arg_ids]
    signature = [tf.TensorSpec(prog.inputs[i].shape, prog.inputs[i].dtype) for i in arg_ids] if sig else None
    return fn, call, variables, signature


@dataclasses.dataclass
class Run:
    ok: bool
    values: list | None = None  # outputs then final variable values, numpy
    error: str = ""


def run(prog: Program, runner: str) -> Run:
    """Run ``prog`` by one runner; never raises."""
    import tfxla_cluster as txc

    try:
        fn, args, variables, sig = build(prog)
        if runner == "eager":
            f = fn
            if sig:
                args = [tf.convert_to_tensor(a, s.dtype) for a, s in zip(args, sig)]
        elif runner == "xla":
            f = tf.function(fn, jit_compile=True, input_signature=sig)
        elif runner == "jit":
            f = txc.function(fn, jit_compile=True, input_signature=sig)
        else:
            f = txc.function(fn, flags=AUTO_FLAGS, input_signature=sig)
        outs = f(*args)
        vals = [np.asarray(o.numpy()) for o in outs] + [np.asarray(v.numpy()) for v in variables.values()]
        return Run(True, vals)
    except Exception as e:  # noqa: BLE001 - every failure is a result here
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return Run(False, error=msg[:300])


# ----------------------------------------------------------------------------- comparison

def _ulp(x: np.ndarray, dtype: str) -> np.ndarray:
    """One ulp at |x| in ``dtype`` (flushed range: the smallest normal's ulp)."""
    mant = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}[dtype]
    tiny = {"float16": -14, "bfloat16": -126, "float32": -126, "float64": -1022}[dtype]
    ax = np.abs(x.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where(ax > 0, ax, 1.0)))
    e = np.maximum(np.where(ax > 0, e, tiny), tiny)
    return np.exp2(e - mant)


def tolerances(prog: Program, ref: list) -> tuple[list, list]:
    """Per value: ulp budget (``UNCHECKED`` when not comparable) and the magnitude that fed it."""
    n_in = len(prog.inputs)
    tol = [0.0] * n_in
    scale = [0.0] * n_in
    for i, x in enumerate(prog.inputs):
        a = np.abs(x.array()).astype(np.float64) if x.dtype in FLOATS + COMPLEX else np.zeros(1)
        f = a[np.isfinite(a)]
        scale[i] = float(np.max(np.abs(f))) if f.size else 0.0
    out_index = {o: k for k, o in enumerate(prog.outputs)}
    for j, n in enumerate(prog.nodes):
        spec = OPS[n.op]
        ins = [tol[a] for a in n.args]
        worst = max(ins) if ins else 0.0
        own = spec.ulps if n.dtype in FLOATS + COMPLEX else 0.0
        if n.dtype in ("float16", "bfloat16") and own:
            own += 1  # computed in f32 and rounded
        if spec.kind in ("reduce", "scan", "matmul", "softmax", "batch_matmul", "conv2d", "depthwise", "pool",
                         "segment") and own:
            own += _reduced_count(prog, n)
        if worst == UNCHECKED or (worst > 0 and not (spec.cont and not n.attrs.get("indices"))):
            t = UNCHECKED
        else:
            t = own + (worst * (4 if spec.ulps else 1))
        tol.append(t)
        s = max([scale[a] for a in n.args] + [0.0])
        k = n_in + j
        if k in out_index and ref[out_index[k]].dtype.kind in "fc" or (
                k in out_index and n.dtype == "bfloat16"):
            v = np.abs(ref[out_index[k]]).astype(np.float64)
            v = v[np.isfinite(v)]
            if v.size:
                s = max(s, float(np.max(np.abs(v))))
        scale.append(s)
    return tol, scale


def _reduced_count(prog: Program, n: Node) -> int:
    _, shape = prog.value_info(n.args[0])
    return int(np.prod(shape)) if shape else 1


def compare(exp: np.ndarray, got: np.ndarray, dtype: str, tol: float, scale: float) -> str:
    """'' when ``got`` matches ``exp`` (TF's XLA) under the budget, else why not."""
    if exp.shape != got.shape:
        return f"shape {got.shape} != {exp.shape}"
    if exp.dtype != got.dtype:
        return f"dtype {got.dtype} != {exp.dtype}"
    if tol == UNCHECKED or exp.size == 0:
        return ""
    if dtype in COMPLEX:  # the real and imaginary parts, each as a float
        for part, name in ((np.real, "real"), (np.imag, "imag")):
            why = compare(part(exp), part(got), PART[dtype], tol, scale)
            if why:
                return f"{name} part: {why}"
        return ""
    if dtype not in FLOATS:
        bad = exp != got
        if bad.any():
            k = int(np.argmax(bad.ravel()))
            return f"at {k}: {got.ravel()[k]!r} != {exp.ravel()[k]!r}"
        return ""
    e, g = exp.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    en, gn = np.isnan(e), np.isnan(g)
    if (en != gn).any():
        k = int(np.argmax(en != gn))
        return f"NaN position at {k}: {g[k]!r} != {e[k]!r}"
    m = ~en
    e, g = e[m], g[m]
    ei, gi = np.isinf(e), np.isinf(g)
    big = np.float64(np.finfo(np_dtype(dtype)).max) if dtype != "bfloat16" else 3.3895e38
    bad_inf = (ei | gi) & (e != g)
    if tol:  # an inexact chain may overflow at the edge
        bad_inf &= ~((np.abs(np.where(ei, g, e)) >= big * (1 - 2 ** -6)) & (np.sign(e) == np.sign(g)))
    if bad_inf.any():
        k = int(np.argmax(bad_inf))
        return f"inf at {k}: {g[k]!r} != {e[k]!r}"
    f = ~(ei | gi)
    e, g = e[f], g[f]
    if tol == 0:
        zero = (e == 0) & (g == 0) & (np.signbit(e) != np.signbit(g))
        if zero.any():
            k = int(np.argmax(zero))
            return f"signed zero: {g[k]!r} != {e[k]!r}"
    allowed = tol * np.maximum(_ulp(e, dtype), _ulp(np.array([scale]), dtype)[0] if tol else 0)
    diff = np.abs(e - g)
    bad = diff > allowed
    if bad.any():
        k = int(np.argmax(bad))
        return f"value {g[k]!r} != {e[k]!r} (tol {tol:g} ulp)"
    return ""


@dataclasses.dataclass
class Failure:
    runner: str
    category: str  # 'error' | 'mismatch'
    detail: str
    output: int | None = None  # index into outputs (+variables) for mismatches

    def key(self) -> tuple:
        return (self.runner, self.category, self.output is not None)


def check(prog: Program, runners=("jit", "auto"), eager: bool = True) -> tuple[str, list[Failure], dict]:
    """Run ``prog``; status 'ok' | 'rejected' (TF's XLA errors) and the failures of ours."""
    ref = run(prog, "xla")
    results = {"xla": ref}
    if eager:
        results["eager"] = run(prog, "eager")
    if not ref.ok:
        return "rejected", [], results
    tol, scale = tolerances(prog, ref.values)
    out_ids = prog.outputs + [i for i, x in enumerate(prog.inputs) if x.kind in VAR_KINDS]
    fails = []
    for r in runners:
        res = run(prog, r)
        results[r] = res
        if not res.ok:
            if r == "auto":
                tfa = tf_auto(prog)
                if not tfa.ok and tfa.error.split(":")[0] == res.error.split(":")[0]:
                    results["tf_auto"] = tfa  # TF's own auto-clustering errors the same way
                    continue
            fails.append(Failure(r, "error", res.error))
            continue
        why = _first_difference(prog, ref.values, res.values, tol, scale, out_ids)
        if why and r == "auto":
            tfa = tf_auto(prog)
            if tfa.ok and not _first_difference(prog, tfa.values, res.values, tol, scale, out_ids):
                results["tf_auto"] = tfa  # ours equals TF's own auto-clustering
                why = None
        if why:
            fails.append(Failure(r, "mismatch", why[1], why[0]))
    return "ok", fails, results


def _first_difference(prog: Program, ref: list, got: list, tol: list, scale: list, out_ids: list):
    """(output index, why) of the first output of ``got`` that differs from ``ref``, else None."""
    for k, (e, g) in enumerate(zip(ref, got)):
        vid = out_ids[k]
        dtype, _ = prog.value_info(vid)
        t = tol[vid] if k < len(prog.outputs) else _var_tol(prog, tol, vid)
        why = compare(e, g, dtype, t, scale[vid])
        if why:
            return k, f"output {k} (v{vid}, {dtype}): {why}"
    return None


def tf_auto(prog: Program) -> Run:
    """``prog`` under TF's own auto-clustering (``AUTO_FLAGS`` in ``TF_XLA_FLAGS``, which TF reads once per
    process, so in a child process). What our auto-clustered run must equal where TF's auto-clustering
    and TF's XLA disagree (TF folds a constant-only cluster with its kernels; an op left outside any
    cluster runs TF's kernel, or fails for want of one)."""
    import subprocess
    import tempfile

    env = {**os.environ, "TF_XLA_FLAGS": AUTO_FLAGS}
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "values.npz")
        try:
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--tf-auto", out_path],
                                  input=json.dumps(prog.to_json()), capture_output=True, text=True,
                                  env=env, timeout=600)
            reply = json.loads(proc.stdout.strip().splitlines()[-1])
            if reply["error"]:
                return Run(False, error=reply["error"])
            with np.load(out_path) as z:  # bf16 is stored as raw 2-byte records: view it back
                return Run(True, [z[f"v{i}"].view(np_dtype(d)) for i, d in enumerate(reply["dtypes"])])
        except (subprocess.SubprocessError, OSError, ValueError, IndexError, KeyError) as e:
            return Run(False, error=f"(TF's auto-clustering could not be run: {type(e).__name__})")


def _run_tf_auto_child(out_path: str) -> int:
    prog = Program.from_json(json.loads(sys.stdin.read()))
    try:
        fn, args, variables, sig = build(prog)
        outs = tf.function(fn, input_signature=sig)(*args)
        vals = [np.asarray(o.numpy()) for o in outs] + [np.asarray(v.numpy()) for v in variables.values()]
        np.savez(out_path, **{f"v{i}": v for i, v in enumerate(vals)})
        err, dtypes = "", [tf.as_dtype(v.dtype).name for v in vals]
    except Exception as e:  # noqa: BLE001 - reported to the parent
        err = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300] or "error"
        dtypes = []
    print(json.dumps({"error": err, "dtypes": dtypes}))
    return 0


def _var_tol(prog: Program, tol: list, vid: int) -> float:
    ts = [tol[len(prog.inputs) + j] for j, n in enumerate(prog.nodes) if OPS[n.op].kind in ASSIGN_KINDS and n.args[0] == vid]
    return max(ts) if ts else 0.0


# ----------------------------------------------------------------------------- generation

def special_values(dtype: str) -> list:
    if dtype == "bool":
        return [True, False]
    if dtype in COMPLEX:  # pairs of the part's special values
        f = special_values(PART[dtype])
        return [[f[0], 0.0], [f[1], 0.0], [0.0, f[1]], [f[2], f[0]], [f[3], f[4]], [f[10], f[11]],
                [f[8], f[8]], [f[5], f[10]], [f[12], f[13]], [f[1], f[2]], [f[14], f[7]]]
    if dtype in FLOATS:
        fi = tf.as_dtype(dtype)
        mx = float(fi.max)
        tiny = float(np.finfo(np.float32).tiny) if dtype == "bfloat16" else float(np.finfo(np_dtype(dtype)).tiny)
        return [math.nan, math.inf, -math.inf, 0.0, -0.0, tiny / 4, -tiny / 2, tiny, mx, -mx,
                1.0, -1.0, 0.5, -2.5, 3.0]
    info = np.iinfo(np_dtype(dtype))
    return [int(info.min), int(info.max), 0, 1, -1 if info.min < 0 else 2, int(info.max) // 2, 7, 3]


@dataclasses.dataclass
class Draft:
    """A program being generated: inputs and nodes in creation order (stable value ids)."""
    items: list

    def value_info(self, i: int) -> tuple[str, tuple[int, ...]]:
        x = self.items[i]
        return x.dtype, x.shape

    def finish(self) -> Program:
        """Inputs first, then nodes; every node is an output."""
        ins = [i for i, x in enumerate(self.items) if isinstance(x, Input)]
        nodes = [i for i, x in enumerate(self.items) if isinstance(x, Node)]
        remap = {old: new for new, old in enumerate(ins + nodes)}
        return Program([self.items[i] for i in ins],
                       [dataclasses.replace(self.items[i], args=[remap[a] for a in self.items[i].args])
                        for i in nodes], [remap[i] for i in nodes])


class Gen:
    """Random program generator (``long`` makes bigger programs and shapes)."""

    def __init__(self, rng: np.random.Generator, long: bool = False) -> None:
        self.rng, self.long = rng, long

    def choice(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def shape(self) -> tuple[int, ...]:
        rank = int(self.rng.integers(0, 4))
        dims = (1, 2, 3, 5, 7, 0) if not self.long else (1, 2, 3, 5, 7, 0, 17, 64)
        p = np.array([3, 3, 3, 2, 1, 0.4] + ([1, 0.5] if self.long else []))
        return tuple(int(self.rng.choice(dims, p=p / p.sum())) for _ in range(rank))

    def values(self, dtype: str, shape) -> list:
        n = int(np.prod(shape)) if shape else 1
        sp = special_values(dtype)
        p_special = self.choice((0.0, 0.2, 0.6))
        out = []
        for _ in range(n):
            if self.rng.random() < p_special:
                out.append(self.choice(sp))
            elif dtype == "bool":
                out.append(bool(self.rng.integers(2)))
            elif dtype in COMPLEX:
                out.append([float(np.float32(v)) if dtype == "complex64" else float(v)
                            for v in self.rng.standard_normal(2) * self.choice((1, 4))])
            elif dtype in FLOATS:
                v = float(self.rng.standard_normal() * self.choice((1, 1, 4, 100)))
                out.append(float(np.asarray(v, np.float64).astype(np_dtype(dtype)).astype(np.float64)))
            else:
                info = np.iinfo(np_dtype(dtype))
                out.append(int(self.rng.integers(max(info.min, -20), min(info.max, 20) + 1)))
        return out

    def new_input(self, p: "Draft", dtype: str, shape, kind: str | None = None) -> int:
        kind = kind or self.choice(("arg",) * 7 + ("const",) * 3 + ("np", "list"))
        if kind == "list" and 0 in shape and len(shape) > 1:
            kind = "np"  # TF cannot convert a nested empty list
        p.items.append(Input(kind, dtype, tuple(shape), self.values(dtype, shape)))
        return len(p.items) - 1

    def pick(self, p: "Draft", dtypes, want_shape=None) -> int:
        cands = [i for i in range(len(p.items))
                 if p.value_info(i)[0] in dtypes
                 and (want_shape is None or p.value_info(i)[1] == tuple(want_shape))
                 and not (isinstance(p.items[i], Input) and p.items[i].kind in VAR_KINDS)]
        if cands and self.rng.random() < 0.7:
            # prefer recent values: chains exercise fusion
            return cands[-1 - int(self.rng.integers(min(3, len(cands))))]
        return self.new_input(p, self.choice(dtypes), self.shape() if want_shape is None else want_shape)

    def program(self) -> Program:
        p = Draft([])
        n_ops = int(self.rng.integers(1, 9 if self.long else 5))
        names = list(OPS)
        for _ in range(n_ops):
            for _attempt in range(5):
                node = self.node(p, self.choice(names))
                if node is not None:
                    p.items.append(node)
                    break
        if not any(isinstance(x, Node) for x in p.items):
            x = self.pick(p, FLOATS)
            p.items.append(Node("abs", [x], {}, *p.value_info(x)))
        if self.long and self.rng.random() < 0.05:  # a big reduction (the cascade path)
            x = self.new_input(p, "float32", (300_000,), "arg")
            p.items.append(Node(self.choice(("reduce_max", "reduce_min", "reduce_sum")), [x],
                                {"axis": None, "keepdims": False}, "float32", ()))
        return p.finish()

    def node(self, p: "Draft", name: str) -> Node | None:
        spec = OPS[name]
        r, ch = self.rng, self.choice
        if spec.kind in MORE_KINDS:
            return self.more_node(p, name)
        if spec.kind in THIRD_KINDS:
            return self.third_node(p, name)
        if spec.kind == "unary":
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            return Node(name, [x], {}, spec.result(dt), sh)
        if spec.kind == "binary":
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            other = list(sh)
            for k in range(len(other)):
                if r.random() < 0.3:
                    other[k] = 1
            if other and r.random() < 0.2:
                other = other[1:]
            y = self.pick(p, (dt,), other) if r.random() < 0.8 else self.new_input(p, dt, other)
            if r.random() < 0.5:
                x, y = y, x
            shape = tuple(np.broadcast_shapes(p.value_info(x)[1], p.value_info(y)[1]))
            return Node(name, [x, y], {}, spec.result(dt), shape)
        if spec.kind == "select":
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            c = self.pick(p, ("bool",), sh)
            y = self.pick(p, (dt,), sh)
            return Node(name, [c, x, y], {}, dt, sh)
        if spec.kind == "clip":
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            lo, hi = self.new_input(p, dt, ()), self.new_input(p, dt, ())
            return Node(name, [x, lo, hi], {}, dt, sh)
        if spec.kind == "cast":
            x = self.pick(p, ALL)
            dt, sh = p.value_info(x)
            to = ch(ALL)
            return Node(name, [x], {"to": to}, to, sh)
        if spec.kind in ("reduce", "argreduce", "scan", "transpose", "reverse", "slice", "gather", "tile",
                         "reshape", "roll", "pad", "softmax", "cond", "while", "concat"):
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            rank = len(sh)
            if spec.kind == "reduce":
                axis = None if rank == 0 or r.random() < 0.3 else \
                    sorted(set(int(a) for a in r.integers(-rank, rank, size=int(r.integers(1, rank + 1)))
                               if True))
                if axis is not None:
                    axis = sorted({a % rank for a in axis})
                keep = bool(r.integers(2))
                axes = range(rank) if axis is None else axis
                shape = tuple((1 if k in axes else d) for k, d in enumerate(sh) if keep or k not in axes)
                return Node(name, [x], {"axis": axis, "keepdims": keep}, dt, shape)
            if rank == 0 and spec.kind not in ("cond", "while", "reshape", "tile", "pad"):
                return None
            ax = int(r.integers(rank)) if rank else 0
            if spec.kind == "argreduce":
                return Node(name, [x], {"axis": ax}, "int64", tuple(d for k, d in enumerate(sh) if k != ax))
            if spec.kind == "scan":
                return Node(name, [x], {"axis": ax, "exclusive": bool(r.integers(2)),
                                        "reverse": bool(r.integers(2))}, dt, sh)
            if spec.kind == "transpose":
                perm = [int(v) for v in r.permutation(rank)]
                return Node(name, [x], {"perm": perm}, dt, tuple(sh[k] for k in perm))
            if spec.kind == "reverse":
                return Node(name, [x], {"axis": [ax]}, dt, sh)
            if spec.kind == "slice":
                begin = [int(r.integers(0, d + 1)) for d in sh]
                size = [int(r.integers(0, d - b + 1)) for d, b in zip(sh, begin)]
                return Node(name, [x], {"begin": begin, "size": size}, dt, tuple(size))
            if spec.kind == "gather":
                n = int(r.integers(0, 4))
                idx = [int(r.integers(0, sh[ax])) for _ in range(n)] if sh[ax] else []
                return Node(name, [x], {"indices": idx, "axis": ax}, dt,
                            sh[:ax] + (len(idx),) + sh[ax + 1:])
            if spec.kind == "tile":
                mult = [int(r.integers(0, 3)) if r.random() < 0.2 else int(r.integers(1, 3)) for _ in sh]
                return Node(name, [x], {"multiples": mult}, dt, tuple(d * m for d, m in zip(sh, mult)))
            if spec.kind == "reshape":
                n = int(np.prod(sh)) if sh else 1
                return Node(name, [x], {"shape": [n]}, dt, (n,))
            if spec.kind == "roll":
                shift = int(r.integers(-7, 8))
                return Node(name, [x], {"shift": shift, "axis": ax, "computed": bool(r.integers(2))}, dt, sh)
            if spec.kind == "pad":
                pads = [[int(r.integers(0, 3)), int(r.integers(0, 3))] for _ in sh]
                val = ch(special_values(dt))
                return Node(name, [x], {"paddings": pads, "value": val}, dt,
                            tuple(d + a + b for d, (a, b) in zip(sh, pads)))
            if spec.kind == "softmax":
                return Node(name, [x], {}, dt, sh)
            if spec.kind == "concat":
                other = list(sh)
                other[ax] = int(r.integers(0, 4))
                y = self.pick(p, (dt,), other)
                shape = list(sh)
                shape[ax] = sh[ax] + other[ax]
                return Node(name, [x, y], {"axis": ax}, dt, tuple(shape))
            if spec.kind == "cond":
                c = self.pick(p, ALL)
                return Node(name, [c, x], {"then": ch(BRANCH_OPS), "else": ch(BRANCH_OPS),
                                           "pred_any": bool(r.integers(2))}, dt, sh)
            if spec.kind == "while":
                return Node(name, [x], {"body": ch(BRANCH_OPS), "n": int(r.integers(0, 4))}, dt, sh)
        if spec.kind == "matmul":
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            if len(sh) != 2:
                return None
            k2 = ch((1, 2, 3, 5))
            y = self.new_input(p, dt, (sh[1], k2))
            return Node(name, [x, y], {}, dt, (sh[0], k2))
        if spec.kind == "assign_add":
            dt = ch(spec.dtypes)
            sh = self.shape()
            v = self.new_input(p, dt, sh, ch(VAR_KINDS))
            y = self.pick(p, (dt,), sh)
            method = ch(("assign_add", "assign_add", "assign_sub", "assign")) if dt != "bool" else "assign"
            return Node(name, [v, y], {"method": method}, dt, sh)
        return None


    def image(self, p: "Draft", dtypes, channels: bool = False) -> int:
        """A rank-4 NHWC value (a picked one, else a new input); with ``channels``, one with some channels
        (TF 2.21's XLA dies of SIGFPE on a depthwise convolution of zero channels, its feature_group_count
        0: seed 262001542; ours rejects it, and TF's own kernel returns an empty result)."""
        cands = [i for i in range(len(p.items)) if p.value_info(i)[0] in dtypes and len(p.value_info(i)[1]) == 4
                 and not (isinstance(p.items[i], Input) and p.items[i].kind in VAR_KINDS)
                 and not (channels and p.value_info(i)[1][3] == 0)]
        if cands and self.rng.random() < 0.7:
            return cands[-1]
        dims = (1, 2, 3, 5) if not self.long else (1, 2, 3, 5, 9)
        shape = (self.choice((1, 2)), self.choice(dims), self.choice(dims), self.choice((1, 2, 3)))
        return self.new_input(p, self.choice(dtypes), shape)

    def more_node(self, p: "Draft", name: str) -> Node | None:
        """A node of the second op table's kinds."""
        spec = OPS[name]
        r, ch = self.rng, self.choice
        if spec.kind in ("conv2d", "pool", "depthwise"):
            x = self.image(p, spec.dtypes, channels=spec.kind == "depthwise")
            dt, (n, h, w, c) = p.value_info(x)
            kh, kw = ch((1, 2, 3)), ch((1, 2, 3))
            strides, padding = ch((1, 2)), ch(("SAME", "VALID"))
            if padding == "VALID" and (kh > h or kw > w):
                padding = "SAME"
            if padding == "SAME":
                oh, ow = -(-h // strides), -(-w // strides)
            else:
                oh, ow = (h - kh) // strides + 1, (w - kw) // strides + 1
            if spec.kind == "pool":
                return Node(name, [x], {"ksize": [kh, kw], "strides": strides, "padding": padding}, dt, (n, oh, ow, c))
            o = ch((1, 2, 4))
            f = self.new_input(p, dt, (kh, kw, c, o))
            return Node(name, [x, f], {"strides": strides, "padding": padding}, dt,
                        (n, oh, ow, o * c if spec.kind == "depthwise" else o))
        if spec.kind == "while2":
            x = self.pick(p, spec.dtypes)
            return Node(name, [x], {"body": ch(BRANCH_OPS), "n": int(r.integers(0, 4))}, *p.value_info(x))
        if spec.kind == "case":
            x = self.pick(p, spec.dtypes)
            c = self.pick(p, ALL)
            branches = [ch(BRANCH_OPS) for _ in range(int(r.integers(1, 4)))]
            return Node(name, [c, x], {"branches": branches}, *p.value_info(x))
        if spec.kind == "one_hot":
            x = self.pick(p, spec.dtypes)
            _, sh = p.value_info(x)
            if len(sh) > 2:
                return None
            depth, axis = int(r.integers(0, 5)), int(r.integers(-1, len(sh) + 1))
            shape = list(sh)
            shape.insert(len(sh) if axis == -1 else axis, depth)
            on, off = ch(((1.0, 0.0), (-0.0, math.inf), (math.nan, 2.5)))
            return Node(name, [x], {"depth": depth, "on": on, "off": off, "axis": axis}, "float32", tuple(shape))
        if spec.kind == "broadcast_to":
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            if any(d not in (0, 1) for d in sh) and r.random() < 0.5:
                target = list(sh)
            else:
                target = [ch((1, 2, 3, 5)) if d == 1 else d for d in sh]
            target = [ch((1, 2, 3))] * int(r.integers(0, 2)) + target
            return Node(name, [x], {"shape": target}, dt, tuple(target))
        x = self.pick(p, spec.dtypes)
        dt, sh = p.value_info(x)
        rank = len(sh)
        if spec.kind == "expand_dims":
            axis = int(r.integers(-rank - 1, rank + 1))
            shape = list(sh)
            shape.insert(axis % (rank + 1), 1)
            return Node(name, [x], {"axis": axis}, dt, tuple(shape))
        if spec.kind == "squeeze":
            ones = [k for k, d in enumerate(sh) if d == 1]
            if not ones:
                return None
            axis = [k for k in ones if r.random() < 0.7] or ones[:1]
            return Node(name, [x], {"axis": axis}, dt, tuple(d for k, d in enumerate(sh) if k not in axis))
        if spec.kind == "stack":
            y = self.pick(p, (dt,), sh)
            axis = int(r.integers(0, rank + 1))
            shape = list(sh)
            shape.insert(axis, 2)
            return Node(name, [x, y], {"axis": axis}, dt, tuple(shape))
        if rank == 0:
            return None
        if spec.kind == "strided_slice":
            slices = []
            for d in sh:
                step = ch((1, 1, 2, 3, -1, -2))
                lo, hi = (int(v) for v in r.integers(-d - 1, d + 2, size=2))
                slices.append([ch((lo, None)), ch((hi, None)), step])
            shape = np.empty(sh, np.int8)[tuple(slice(*t) for t in slices)].shape
            return Node(name, [x], {"slices": slices}, dt, tuple(int(d) for d in shape))
        if spec.kind == "mirror_pad":
            mode = ch(("REFLECT", "SYMMETRIC"))
            limit = [d - 1 if mode == "REFLECT" else d for d in sh]
            if min(limit) < 0:
                return None
            pads = [[int(r.integers(0, m + 1)), int(r.integers(0, m + 1))] for m in limit]
            return Node(name, [x], {"paddings": pads, "mode": mode}, dt,
                        tuple(d + a + b for d, (a, b) in zip(sh, pads)))
        if spec.kind == "bias_add":
            if rank < 2:
                return None
            b = self.pick(p, (dt,), (sh[-1],))
            return Node(name, [x, b], {}, dt, sh)
        if spec.kind == "sort":
            return Node(name, [x], {"direction": ch(("ASCENDING", "DESCENDING"))}, dt, sh)
        if spec.kind == "top_k":
            k = int(r.integers(0, sh[-1] + 1))
            idx = bool(r.integers(2))
            return Node(name, [x], {"k": k, "indices": idx}, "int32" if idx else dt, sh[:-1] + (k,))
        if spec.kind == "segment":
            num = int(r.integers(1, 4))
            ids = [int(r.integers(-1, num)) for _ in range(sh[0])]
            return Node(name, [x], {"ids": ids, "num": num}, dt, (num,) + sh[1:])
        if spec.kind == "batch_matmul":
            if rank != 3:
                return None
            m = ch((1, 2, 3, 5))
            y = self.new_input(p, dt, (sh[0], sh[2], m))
            return Node(name, [x, y], {}, dt, (sh[0], sh[1], m))
        raise ValueError(name)


    def third_node(self, p: "Draft", name: str) -> Node | None:
        """A node of the third op table's kinds."""
        spec = OPS[name]
        r, ch = self.rng, self.choice
        if spec.kind == "ccast":  # to complex from anything, or from complex to a complex or a float
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            to = ch(COMPLEX + (PART[dt],)) if dt in COMPLEX else ch(COMPLEX)
            return Node(name, [x], {"to": to}, to, sh)
        if spec.kind in ("cond_assign", "while_assign"):
            dt = ch(spec.dtypes)
            sh = self.shape()
            v = self.new_input(p, dt, sh, ch(VAR_KINDS))
            y = self.pick(p, (dt,), sh)
            if spec.kind == "while_assign":
                return Node(name, [v, y], {"n": int(r.integers(0, 4))}, dt, sh)
            c = self.pick(p, ALL)
            methods = ("assign_add", "assign_sub", "assign")
            return Node(name, [v, y, c], {"then": ch(methods), "else": ch(methods)}, dt, sh)
        if spec.kind == "while_cond":
            x = self.pick(p, spec.dtypes)
            return Node(name, [x], {"then": ch(BRANCH_OPS), "else": ch(BRANCH_OPS), "n": int(r.integers(0, 4))},
                        *p.value_info(x))
        if spec.kind == "where_bcast":  # a condition (and a branch) of size-1 dims, broadcast by SelectV2
            x = self.pick(p, spec.dtypes)
            dt, sh = p.value_info(x)
            cshape = [1 if r.random() < 0.5 else d for d in sh]
            if cshape and r.random() < 0.3:
                cshape = cshape[1:]
            c = self.pick(p, ("bool",), cshape)
            y = self.pick(p, (dt,), [1 if r.random() < 0.3 else d for d in sh])
            args = [c, x, y] if r.random() < 0.5 else [c, y, x]
            shape = tuple(np.broadcast_shapes(*(p.value_info(a)[1] for a in args)))
            return Node(name, args, {}, dt, shape)
        raise ValueError(name)


MORE_KINDS = ("expand_dims", "squeeze", "broadcast_to", "stack", "strided_slice", "mirror_pad", "one_hot",
              "bias_add", "sort", "top_k", "segment", "batch_matmul", "conv2d", "pool", "while2", "case",
              "depthwise")
THIRD_KINDS = ("ccast", "cond_assign", "while_assign", "while_cond", "where_bcast")


def generate(seed: int, long: bool = False) -> Program:
    return Gen(np.random.default_rng(seed), long).program()


# ----------------------------------------------------------------------------- shrinking

def _prune(p: Program, keep_outputs: list[int]) -> Program:
    """Only the cone of ``keep_outputs`` (and variables the cone updates)."""
    n_in = len(p.inputs)
    live = set(keep_outputs)
    for j in range(len(p.nodes) - 1, -1, -1):
        if n_in + j in live:
            live.update(p.nodes[j].args)
    in_keep = [i for i in range(n_in) if i in live]
    node_keep = [j for j in range(len(p.nodes)) if n_in + j in live]
    remap = {old: new for new, old in enumerate(in_keep + [n_in + j for j in node_keep])}
    nodes = [Node(p.nodes[j].op, [remap[a] for a in p.nodes[j].args], dict(p.nodes[j].attrs),
                  p.nodes[j].dtype, p.nodes[j].shape) for j in node_keep]
    return Program([dataclasses.replace(p.inputs[i], values=list(p.inputs[i].values)) for i in in_keep],
                   nodes, [remap[o] for o in keep_outputs])


def shrink(p: Program, fail: Failure, budget: int = 60) -> Program:
    """A smaller program that still fails the same way on the same runner."""
    tries = [0]

    def fails(q: Program) -> bool:
        tries[0] += 1
        status, fs, _ = check(q, runners=(fail.runner,), eager=False)
        return status == "ok" and any(f.runner == fail.runner and f.category == fail.category for f in fs)

    cur = p
    if fail.output is not None and fail.output < len(p.outputs):
        q = _prune(cur, [cur.outputs[fail.output]])
        if fails(q):
            cur = q
    # bypass nodes: replace a node by one of its same-typed operands
    changed = True
    while changed and tries[0] < budget:
        changed = False
        n_in = len(cur.inputs)
        for j in range(len(cur.nodes) - 1, -1, -1):
            n = cur.nodes[j]
            for a in n.args:
                if OPS[n.op].kind in ASSIGN_KINDS or cur.value_info(a) != (n.dtype, n.shape):
                    continue
                q = Program(cur.inputs, [dataclasses.replace(m, args=[a if x == n_in + j else x for x in m.args])
                                         for m in cur.nodes], [a if o == n_in + j else o for o in cur.outputs])
                q = _prune(q, q.outputs)
                if tries[0] < budget and fails(q):
                    cur, changed = q, True
                    break
            if changed:
                break
    # simplify values: zero halves of each input
    for i, x in enumerate(cur.inputs):
        zero = False if x.dtype == "bool" else 0
        n = len(x.values)
        step = max(1, n // 2)
        while step >= 1 and tries[0] < budget:
            for s in range(0, n, step):
                vals = list(cur.inputs[i].values)
                if all(v == zero and not (isinstance(v, float) and math.copysign(1, v) < 0)
                       for v in vals[s:s + step]):
                    continue
                vals[s:s + step] = [zero] * len(vals[s:s + step])
                q = Program([dataclasses.replace(y, values=vals) if k == i else y for k, y in enumerate(cur.inputs)],
                            cur.nodes, cur.outputs)
                if tries[0] < budget and fails(q):
                    cur = q
            step //= 2
    return cur


# ----------------------------------------------------------------------------- batching

def merge(progs: list[Program]) -> Program:
    """One program computing every program of ``progs`` side by side (one compile for all)."""
    inputs, nodes, outputs = [], [], []
    n_in_total = sum(len(p.inputs) for p in progs)
    in_off, node_off = 0, 0
    for p in progs:
        n_in = len(p.inputs)

        def remap(i, n_in=n_in, in_off=in_off, node_off=node_off):
            return in_off + i if i < n_in else n_in_total + node_off + (i - n_in)
        inputs += p.inputs
        nodes += [dataclasses.replace(n, args=[remap(a) for a in n.args]) for n in p.nodes]
        outputs += [remap(o) for o in p.outputs]
        in_off += n_in
        node_off += len(p.nodes)
    return Program(inputs, nodes, outputs)


def check_batch(progs: list[Program], runners=("jit", "auto")) -> list[tuple[str, list[Failure]]]:
    """``check`` of each program, compiling them together when all of them pass together."""
    if len(progs) > 1:
        status, fails, _ = check(merge(progs), runners=runners, eager=False)
        if status == "ok" and not fails:
            return [("ok", []) for _ in progs]
    return [check(p, runners=runners, eager=False)[:2] for p in progs]


# ----------------------------------------------------------------------------- driver

def categorize(f: Failure, p: Program) -> str:
    ops = sorted({n.op for n in p.nodes})
    return f"{f.runner}:{f.category}:{'+'.join(ops)}"


def fuzz(seed: int, count: int, long: bool = False, do_shrink: bool = True, log=print,
         runners=("jit", "auto"), batch: int = 1, eager: bool = True, hang_seconds: float = 0) -> dict:
    """Run ``count`` programs from ``seed``; ``batch`` > 1 compiles that many together (no eager).
    ``hang_seconds`` > 0: a chunk of programs (shrinking included) still running after that long is a hang:
    every thread's stack goes to stderr, after the chunk's ``[programs a..b]`` line, and the process exits."""
    import faulthandler

    stats = {"programs": 0, "rejected": 0, "failures": [], "eager_differs": 0}
    t0 = time.time()
    seeds = [seed * 1_000_003 + k for k in range(count)]
    for b0 in range(0, count, max(1, batch)):
        chunk = seeds[b0:b0 + max(1, batch)]
        progs = [generate(s, long) for s in chunk]
        print(f"[programs {chunk[0]}..{chunk[-1]}]", file=sys.stderr, flush=True)  # where a crash happened
        if hang_seconds > 0:
            faulthandler.dump_traceback_later(hang_seconds, exit=True)
        if batch > 1:
            outcomes = [(st, fs, {}) for st, fs in check_batch(progs, runners)]
        else:
            outcomes = [check(p, runners=runners, eager=eager) for p in progs]
        for s, prog, outcome in zip(chunk, progs, outcomes):
            _one(stats, s, prog, outcome, do_shrink, log)
        faulthandler.cancel_dump_traceback_later()
    stats["seconds"] = round(time.time() - t0, 1)
    return stats


def _one(stats: dict, s: int, prog: Program, outcome, do_shrink: bool, log) -> None:
    status, fails, results = outcome
    if True:
        stats["programs"] += 1
        if status == "rejected":
            stats["rejected"] += 1
            return
        eager = results.get("eager")
        if eager is not None and (not eager.ok or any(
                compare(e, g, prog.value_info(v)[0], 8, 0) for e, g, v in
                zip(results["xla"].values, eager.values, prog.outputs))):
            stats["eager_differs"] += 1
        for f in fails:
            small = shrink(prog, f) if do_shrink else prog
            _, fs2, _ = check(small, runners=(f.runner,), eager=False)
            detail = fs2[0].detail if fs2 else f.detail
            entry = {"seed": s, "runner": f.runner, "category": f.category, "detail": detail,
                     "key": categorize(f, small), "program": small.to_json()}
            stats["failures"].append(entry)
            log(f"FAIL seed={s} {f.runner} {f.category}: {detail}\n{small.text()}\n")
            break  # one failure per program


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--long", action="store_true", help="bigger programs and shapes (nightly)")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--runners", default="jit,auto")
    ap.add_argument("--batch", type=int, default=1,
                    help="compile this many programs together (faster; skips TF eager)")
    ap.add_argument("--json", help="write the statistics and shrunk failures here")
    ap.add_argument("--replay", help="run one program spec (JSON) and print the outcome")
    ap.add_argument("--hang-seconds", type=float, default=0,
                    help="treat a chunk of programs still running after this long as a hang: print every "
                         "stack and exit (0: never)")
    ap.add_argument("--tf-auto", metavar="NPZ", help=argparse.SUPPRESS)  # the child of tf_auto()
    a = ap.parse_args(argv)
    if a.tf_auto:
        return _run_tf_auto_child(a.tf_auto)
    import tfxla_cluster._quiet  # noqa: F401
    runners = tuple(r for r in a.runners.split(",") if r)
    if a.replay:
        prog = Program.from_json(json.loads(Path(a.replay).read_text(encoding="utf-8"))["program"]
                                 if "program" in json.loads(Path(a.replay).read_text(encoding="utf-8"))
                                 else json.loads(Path(a.replay).read_text(encoding="utf-8")))
        print(prog.text())
        status, fails, res = check(prog, runners=runners)
        print(status, [f"{f.runner} {f.category}: {f.detail}" for f in fails])
        return 1 if fails else 0
    stats = fuzz(a.seed, a.count, a.long, not a.no_shrink, runners=runners, batch=a.batch,
                 hang_seconds=a.hang_seconds)
    by_key: dict[str, int] = {}
    for f in stats["failures"]:
        by_key[f["key"]] = by_key.get(f["key"], 0) + 1
    print(f"programs {stats['programs']}  rejected by TF's XLA {stats['rejected']}  "
          f"failures {len(stats['failures'])}  eager differs from XLA {stats['eager_differs']}  "
          f"({stats['seconds']} s)")
    for k, v in sorted(by_key.items()):
        print(f"  {v:4d}  {k}")
    if a.json:
        Path(a.json).write_text(json.dumps(stats, indent=1))
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
