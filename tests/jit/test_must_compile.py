"""jit_compile=True checking: every uncompilable node is listed, in TF's error format."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import tensorflow as tf

from tfxla_cluster.graph.io import read_graph_def
from tfxla_cluster.jit import must_compile

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def test_string_ops_sample_matches_tf_error_and_lists_all():
    gd = read_graph_def(GRAPHS / "string_ops.pbtxt")
    problems = must_compile.uncompilable_in_graph(gd, "__inference_string_ops_64")
    tf_error = (GRAPHS / "tf" / "string_ops" / "jit_error.txt").read_text(encoding="utf-8")
    # TF names the first unsupported op; the same "<Op> (<why>){{node <name>}}" item must be in ours.
    item = re.search(r"on XLA_CPU_JIT: (.*?\}\})", tf_error).group(1)
    err = must_compile.error_for("__inference_string_ops_64", problems)
    assert item in str(err)
    assert str(err).startswith("Detected unsupported operations when trying to compile graph "
                               "__inference_string_ops_64[_XlaMustCompile=true] on XLA_CPU_JIT: ")
    assert len(problems) >= 2  # TF stops at one; the sample has several string ops
    assert all(p.reason.startswith("unsupported op: No registered") for p in problems)


def test_function_with_unique_and_nested_string_op():
    @tf.function
    def inner(s):
        return tf.strings.length(s)

    @tf.function(jit_compile=True)
    def f(x, s):
        y, _ = tf.unique(x)                 # compilable under jit_compile (only auto-clustering skips it)
        return tf.reduce_sum(y) + tf.cast(tf.reduce_sum(inner(s)), tf.int32), tf.strings.as_string(x)

    concrete = f.get_concrete_function(tf.TensorSpec([4], tf.int32), tf.TensorSpec([2], tf.string))
    with pytest.raises(must_compile.MustCompileError) as err:
        must_compile.check_concrete(concrete)
    ops = {p.op for p in err.value.problems}
    # The string Identity that returns AsString's result has no XLA kernel for DT_STRING either, nor do
    # the string argument's _Arg and the string result's _Retval of the instantiated body.
    assert ops == {"AsString", "StringLength", "Identity", "_Arg", "_Retval"}
    assert err.value.problems[0].op == "_Arg" and err.value.problems[0].node == "s"
    nested = next(p for p in err.value.problems if p.op == "StringLength")
    assert len(nested.stack) >= 3  # f -> call of inner -> StringLength
    assert "Unique" not in str(err.value)
    # Real TF agrees that the function does not compile.
    with pytest.raises(tf.errors.InvalidArgumentError, match="Detected unsupported operations"):
        f(tf.constant([1, 2, 2, 3]), tf.constant(["a", "bb"]))


def test_compilable_function_passes():
    @tf.function(jit_compile=True)
    def f(x):
        return tf.nn.softmax(tf.random.stateless_uniform([3], seed=[1, 2]) + x)

    must_compile.check_concrete(f.get_concrete_function(tf.TensorSpec([3], tf.float32)))


def test_error_says_where_each_op_was_created_like_tf():
    """TF appends "The op is created at:" with the user's frames (TF's internals dropped)."""
    import inspect

    @tf.function
    def inner(x):
        return tf.strings.as_string(x)  # line A

    def body(x):
        return inner(x * 2), tf.strings.as_string(x)  # line B

    line_a = inspect.getsourcelines(inner.python_function)[1] + 2
    line_b = inspect.getsourcelines(body)[1] + 1
    concrete = tf.function(body).get_concrete_function(tf.TensorSpec([None], tf.int32))
    with pytest.raises(must_compile.MustCompileError) as info:
        must_compile.check_concrete(concrete)
    text = str(info.value)
    # Each block: the frames (outermost first) up to the next problem's description.
    blocks = [[ln for ln in b.split("\n") if ln.startswith('File "')]
              for b in text.split("The op is created at: \n")[1:]]
    me = Path(__file__).name
    at_b = f'{me}", line {line_b}, in body'
    at_a = f'{me}", line {line_a}, in inner'
    # Nested: the caller's line, then the callee's; top-level: ends at the caller's line.
    assert any(len(f) > 1 and f[-2].endswith(at_b) and f[-1].endswith(at_a) for f in blocks), text
    assert any(f[-1].endswith(at_b) for f in blocks), blocks
    assert "tensorflow/python" not in text and "tfxla_cluster/" not in text


def test_string_argument_is_tfs_first_complaint():
    """TF's must-compile check names a string ``_Arg`` (it has no XLA kernel for DT_STRING) first."""
    def g(s):
        return tf.strings.length(s)

    s = tf.constant(["ab"])
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_err:
        tf.function(g, jit_compile=True)(s)
    first = re.search(r"on XLA_CPU_JIT: (\w+) \(No registered '\w+' OpKernel for XLA_CPU_JIT devices compatible "
                      r"with node \{\{node (\w+)\}\}", str(tf_err.value)).groups()
    assert first == ("_Arg", "s")
    import tfxla_cluster as txc

    with pytest.raises(must_compile.MustCompileError) as ours:
        txc.function(g, jit_compile=True)(s)
    assert (ours.value.problems[0].op, ours.value.problems[0].node) == first

    def head(text: str) -> str:  # up to the first reason, function name and attributes made generic
        return re.sub(r"__inference_g_\d+\[[^\]]*\]", "FN", text.split(" (No registered")[0])

    assert head(str(ours.value)) == head(str(tf_err.value))
