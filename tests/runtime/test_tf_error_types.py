"""Our errors are TF's: each is an instance of the ``tf.errors`` class TF raises for the same failure,
with TF's message form (compared with real TF 2.21 on the same functions)."""
from __future__ import annotations

import pickle
import re

import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster import errors
from tfxla_cluster.jit.must_compile import MustCompileError

TF_CLASS = {
    errors.InvalidArgumentError: tf.errors.InvalidArgumentError,
    errors.NotFoundError: tf.errors.NotFoundError,
    errors.UnimplementedError: tf.errors.UnimplementedError,
    errors.InternalError: tf.errors.InternalError,
    errors.FailedPreconditionError: tf.errors.FailedPreconditionError,
    errors.DataLossError: tf.errors.DataLossError,
    errors.UnknownError: tf.errors.UnknownError,
    errors.FlagError: tf.errors.InvalidArgumentError,
}


@pytest.mark.parametrize("ours", list(TF_CLASS), ids=lambda c: c.__name__)
def test_each_error_is_the_tf_errors_class_of_its_code(ours):
    err = ours("something went wrong")
    assert isinstance(err, TF_CLASS[ours]) and isinstance(err, tf.errors.OpError)
    # TF's own class for the code has the same integer code.
    assert err.error_code == TF_CLASS[ours](None, None, "x").error_code
    assert str(err) == err.message == "something went wrong"
    assert err.status == f"{err.code}: something went wrong"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ours and str(back) == str(err)


def _tail(message: str) -> str:
    """TF's tf2xla context with the function's name and attributes made generic."""
    tail = message[message.index("\n\ttf2xla conversion failed"):]
    return re.sub(r"__inference_\w+?_\d+(\[[^\]]*\])?", "FN", tail)


def strings(x):
    return tf.strings.as_string(x * 2.0)


def test_must_compile_error_is_tfs_invalid_argument_in_tfs_form():
    x = tf.constant([1.0, 2.0])
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_err:
        tf.function(strings, jit_compile=True)(x)
    with pytest.raises(tf.errors.InvalidArgumentError) as ours:
        txc.function(strings, jit_compile=True)(x)
    assert isinstance(ours.value, MustCompileError)
    theirs, mine = str(tf_err.value), str(ours.value)
    head = "Detected unsupported operations when trying to compile graph "
    assert theirs.startswith(head) and mine.startswith(head)
    item = re.search(r"on XLA_CPU_JIT: (.*?\}\})", theirs).group(1)
    assert item in mine
    assert _tail(mine) == _tail(theirs)
    name = re.search(r"graph (__inference_\w+)", mine).group(1)
    assert mine.endswith(f" [Op:{name}]")


def reshape(x):
    return tf.reshape(x * 2.0, [4]) + 1.0


def test_compile_time_error_of_a_node_matches_tf():
    """A node XLA rejects at compile time (the shape is known only then): TF's class and text."""
    sig = [tf.TensorSpec([None])]
    x = tf.constant([1.0, 2.0, 3.0])
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_err:
        tf.function(reshape, jit_compile=True, input_signature=sig)(x)
    with pytest.raises(tf.errors.InvalidArgumentError) as ours:
        txc.function(reshape, jit_compile=True, input_signature=sig)(x)
    theirs, mine = str(tf_err.value), str(ours.value)
    reason = "Input to reshape is a tensor with 3 values, but the requested shape has 4"
    assert theirs.startswith(reason) and mine.startswith(reason)
    # The op's creation site (this file), the node context and tf2xla's context, as TF has them.
    assert "\n\nStack trace for op definition: \n" in mine and "in reshape\n" in mine
    assert "\n\t [[{{node Reshape}}]]\n\ttf2xla conversion failed" in mine
    assert _tail(mine) == _tail(theirs)


def test_launch_error_inside_another_function_keeps_tfs_class():
    """The launch runs inside TF's runtime (an outer tf.function): still InvalidArgumentError."""
    sig = [tf.TensorSpec([None])]
    inner = txc.function(reshape, jit_compile=True, input_signature=sig)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Input to reshape is a tensor with 3 values"):
        tf.function(lambda x: inner(x) * 3.0, input_signature=sig)(tf.constant([1.0, 2.0, 3.0]))
    tf_inner = tf.function(reshape, jit_compile=True, input_signature=sig)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Input to reshape is a tensor with 3 values"):
        tf.function(lambda x: tf_inner(x) * 3.0, input_signature=sig)(tf.constant([1.0, 2.0, 3.0]))


def test_launch_error_through_tfs_graph_runtime_is_reraised_as_is():
    """A must-compile body split around a data-dependent op runs its launches inside TF's graph: the
    caller still gets TF's class and form, not EagerPyFunc's UnknownError with a Python traceback."""
    def g(x):
        y, _ = tf.unique(x)
        return tf.reshape(y * 2.0, [4])

    sig = [tf.TensorSpec([None])]
    x = tf.constant([1.0, 2.0, 3.0])
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_err:
        tf.function(g, jit_compile=True, input_signature=sig)(x)
    with pytest.raises(tf.errors.InvalidArgumentError) as ours:
        txc.function(g, jit_compile=True, input_signature=sig)(x)
    assert "Traceback" not in str(ours.value)
    assert str(ours.value).split("\n")[0] == str(tf_err.value).split("\n")[0]
    assert _tail(str(ours.value)) == _tail(str(tf_err.value))


def test_classes_are_made_once_and_importing_the_package_does_not_import_tf():
    """The classes derive from TF's, so they are made on first use: once, even when threads race."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, threading\n"
            "import tfxla_cluster\n"
            "assert 'tensorflow' not in sys.modules\n"
            "import tfxla_cluster.errors as E\n"
            "seen = []\n"
            "ts = [threading.Thread(target=lambda: seen.append(E.InvalidArgumentError)) for _ in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "assert len(set(map(id, seen))) == 1 and tfxla_cluster.InvalidArgumentError is seen[0]\n"
            "print('ok')\n")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


def _unused_bf16_rint(x):
    tf.math.rint(tf.constant([0.5, 1.5], tf.bfloat16))
    return x + 1.0


def _rint_in_a_branch(x):
    return tf.cond(x[0] > 0, lambda: tf.cast(tf.math.rint(tf.cast(x, tf.bfloat16)), tf.float32), lambda: x)


def _complex_floor_div_beside_a_division(x):
    z = tf.complex(x, x)
    return tf.raw_ops.FloorDiv(x=z, y=z), z / tf.constant([0j, complex(0, float("inf"))], tf.complex64)


@pytest.mark.parametrize("fn", [_unused_bf16_rint, _rint_in_a_branch, _complex_floor_div_beside_a_division],
                         ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("flags", ["", AUTO], ids=["plain", "auto"])
def test_a_node_without_a_cpu_kernel_fails_the_call_as_tfs_placer(fn, flags):
    """TF places a function's nodes (after lowering If/While, before grappler and auto-clustering) and fails the
    call on a node no CPU kernel takes — one no output needs or only XLA's JIT devices take (bf16 Rint, complex
    FloorDiv) included: TF's auto-clustering never sees the graph, so ours does not cluster it either (fuzz seed
    88000850: a complex division beside a bf16 Rint of a constant). TF's message, first line."""
    x = tf.constant([1.5, -2.0])
    with pytest.raises(tf.errors.InvalidArgumentError) as theirs:
        tf.function(fn)(x)   # (TF's own auto-clustering fails the same: it reads TF_XLA_FLAGS once per process)
    with pytest.raises(tf.errors.InvalidArgumentError) as ours:
        txc.function(fn, flags=flags)(x)
    first = str(theirs.value).splitlines()[0]
    assert first.startswith("No OpKernel was registered to support Op ")
    assert str(ours.value).splitlines()[0] == first


def test_nodes_with_default_device_kernels_only_are_placed():
    """NoOp, IdentityN and a while loop's NextIteration have DEFAULT kernels only (FindKernelDef takes them for
    CPU); a jit_compile=True callee is a call, whose body TF does not place: these functions run."""
    inner = tf.function(lambda v: tf.math.rint(v), jit_compile=True)

    def fn(x):
        with tf.control_dependencies([tf.no_op()]):
            a, b = tf.identity_n([x, tf.cast(x, tf.bfloat16)])
        w = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0), (0, a))[1]
        return w, inner(b)

    x = tf.constant([1.5, -2.0])
    want = [t.numpy() for t in tf.function(fn)(x)]
    for flags in ("", AUTO):
        got = [t.numpy() for t in txc.function(fn, flags=flags)(x)]
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.tolist() == w.tolist()
