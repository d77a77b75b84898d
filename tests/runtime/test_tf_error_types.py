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
