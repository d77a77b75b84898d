"""Push/pop TensorLists (EmptyTensorList, PushBack, PopBack — what while_v2 builds to accumulate a loop's
intermediates for its gradient), Gather, ConcatV2, Split, ZerosLike of a list, and Keras LSTM/GRU
training steps, each against TF's own XLA (``jit_compile=True``): TF's XLA lists are fixed-size buffers
(Stack of a push list has all ``max_num_elements`` rows), which TF eager does not reproduce."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tf2hlo_harness import HAVE_JAX, values

import tfxla_cluster as txc
from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.hlo import parse_module
from tfxla_cluster.tf2hlo import lower_function


def _check_against_tf_xla(fn, *args, rtol=2e-6, atol=1e-6):
    """Lower ``fn``, run the evaluator (and real XLA on the same text), compare with TF's XLA."""
    specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in args]
    lc = lower_function(tf.function(fn, autograph=False).get_concrete_function(*specs), *args)
    text = lc.module.to_string()
    assert parse_module(text).to_string() == text
    got = lc.run(*args)
    want = tf.function(fn, jit_compile=True, autograph=False)(*[tf.constant(a) for a in args])
    want = [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {i}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}")
    if HAVE_JAX:
        from tf2hlo_xla import xla_run

        params = [np.asarray(args[p.index]).astype(p.element_type.dtype) for p in lc.parameters]
        for i, (x, g) in enumerate(zip(xla_run(text, *params), got)):
            np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(g, np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"XLA vs evaluator output {i}")
    return got


def _push_pop(x):
    el = tf.raw_ops.EmptyTensorList(element_shape=tf.constant([3], tf.int32), max_num_elements=4,
                                    element_dtype=tf.float32)
    for k in range(3):
        el = tf.raw_ops.TensorListPushBack(input_handle=el, tensor=x[k] * float(k + 1))
    el, top = tf.raw_ops.TensorListPopBack(input_handle=el, element_shape=[3], element_dtype=tf.float32)
    el = tf.raw_ops.TensorListPushBack(input_handle=el, tensor=-x[3])
    stacked = tf.raw_ops.TensorListStack(input_handle=el, element_shape=[3], element_dtype=tf.float32)
    return (top, stacked, tf.raw_ops.TensorListLength(input_handle=el),
            tf.raw_ops.TensorListGetItem(input_handle=el, index=2, element_shape=[3], element_dtype=tf.float32))


def _unknown_shape_push(x):
    """Element shape unknown at EmptyTensorList: the first push gives it (tf2xla's uninitialised list)."""
    el = tf.raw_ops.EmptyTensorList(element_shape=tf.constant(-1, tf.int32), max_num_elements=3,
                                    element_dtype=tf.int32)
    el = tf.raw_ops.TensorListPushBack(input_handle=el, tensor=x)
    el = tf.raw_ops.TensorListPushBack(input_handle=el, tensor=x * 2)
    zeros = tf.raw_ops.ZerosLike(x=el)
    zeros = tf.raw_ops.TensorListPushBack(input_handle=zeros, tensor=x + 7)
    return (tf.raw_ops.TensorListStack(input_handle=el, element_shape=[-1], element_dtype=tf.int32),
            tf.raw_ops.TensorListStack(input_handle=zeros, element_shape=[-1], element_dtype=tf.int32))


def _gather_concat_split(x, idx):
    lst = tf.raw_ops.TensorListFromTensor(tensor=x, element_shape=[2, 3])
    gathered = tf.raw_ops.TensorListGather(input_handle=lst, indices=idx, element_shape=[2, 3],
                                           element_dtype=tf.float32)
    concat, lengths = tf.raw_ops.TensorListConcatV2(input_handle=lst, element_shape=[-1, 3],
                                                    leading_dims=tf.zeros([0], tf.int64), element_dtype=tf.float32)
    split = tf.raw_ops.TensorListSplit(tensor=tf.reshape(x, [8, 3]), element_shape=[-1, 3],
                                       lengths=tf.constant([2, 2, 2, 2], tf.int64))
    split = tf.raw_ops.TensorListSetItem(input_handle=split, index=1, item=-tf.ones([2, 3]))
    return (gathered, concat, lengths,
            tf.raw_ops.TensorListStack(input_handle=split, element_shape=[2, 3], element_dtype=tf.float32),
            tf.raw_ops.TensorListLength(input_handle=split))


def _while_gradient(x):
    """while_v2's gradient: the forward loop pushes intermediates on EmptyTensorLists, the backward pops."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        _, y = tf.while_loop(lambda i, y: i < 5, lambda i, y: (i + 1, tf.sin(y) * y + 0.1),
                             [tf.constant(0), x], maximum_iterations=5)
        loss = tf.reduce_sum(y * y)
    return loss, tape.gradient(loss, x)


def test_push_pop_lists_equal_tf_xla() -> None:
    _check_against_tf_xla(_push_pop, values("f32", (4, 3)))
    _check_against_tf_xla(_unknown_shape_push, values("i32", (2,)))


def test_gather_concat_split_equal_tf_xla() -> None:
    _check_against_tf_xla(_gather_concat_split, values("f32", (4, 2, 3)), np.array([3, 0, 3], np.int32))


def test_while_loop_gradient_equals_tf_xla() -> None:
    _check_against_tf_xla(_while_gradient, values("f32", (2, 3), "small"), rtol=1e-5)


def test_empty_list_needs_a_bound() -> None:
    def fn(x):
        el = tf.raw_ops.EmptyTensorList(element_shape=[2], max_num_elements=-1, element_dtype=tf.float32)
        el = tf.raw_ops.TensorListPushBack(input_handle=el, tensor=x)
        return tf.raw_ops.TensorListStack(input_handle=el, element_shape=[2], element_dtype=tf.float32)
    spec = tf.TensorSpec([2], tf.float32)
    with pytest.raises(InvalidArgumentError, match="fixed tensor list size"):
        lower_function(tf.function(fn, autograph=False).get_concrete_function(spec))


@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_keras_rnn_training_step_equals_tf_xla(layer) -> None:
    """Forward + gradient (push/pop accumulators) + Adam update, ours (jit_compile) vs TF's XLA."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5, 4)), getattr(keras.layers, layer)(8), keras.layers.Dense(3)])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(learning_rate=1e-2)
    opt.build(model.trainable_variables)
    variables = list(model.weights) + list(opt.variables)
    initial = [v.numpy() for v in variables]

    def train(x, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    x, labels = values("f32", (2, 5, 4)), np.array([0, 2], np.int32)
    sig = [tf.TensorSpec(x.shape, tf.float32), tf.TensorSpec(labels.shape, tf.int32)]
    results = []
    for fn in (tf.function(train, jit_compile=True, input_signature=sig),
               txc.function(train, jit_compile=True, input_signature=sig)):
        for v, a in zip(variables, initial):
            v.assign(a)
        losses = [float(fn(x, labels)) for _ in range(2)]
        results.append((losses, [v.numpy() for v in variables]))
    (want_loss, want_vars), (got_loss, got_vars) = results
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
    for g, w, v in zip(got_vars, want_vars, variables):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=v.path)


def test_list_to_array_and_back_are_identities() -> None:
    from tensorflow.python.framework import op_def_library

    def fn(x, y):
        _, _, op, _ = op_def_library._apply_op_helper("_ListToArray", name="l2a", input=[x, y * 2.0], T=tf.float32, N=2)
        a, b = op.outputs
        _, _, op, _ = op_def_library._apply_op_helper("_ArrayToList", name="a2l", input=[a + 1.0, b],
                                                      out_types=[tf.float32] * 2)
        return list(op.outputs)
    _check_against_tf_xla(fn, values("f32", (2, 3)), values("f32", (2, 3), seed=1))


def test_symbolic_gradient_equals_tf_xla() -> None:
    """TF1's functional gradient op of a two-input, two-output library function (one input unused by
    one output), against TF's XLA."""
    from tensorflow.core.framework import attr_value_pb2
    from tensorflow.python.framework import op_def_library

    spec = tf.TensorSpec([3], tf.float32)
    inner = tf.function(lambda x, y: (tf.sin(x) * x + y * y, tf.exp(x) * 0.5),
                        autograph=False).get_concrete_function(spec, spec)

    def fn(x, y, d0, d1):
        inner.add_to_graph(tf.compat.v1.get_default_graph())
        _, _, op, _ = op_def_library._apply_op_helper(
            "SymbolicGradient", name="sg", input=[x, y, d0, d1], Tout=[tf.float32, tf.float32],
            f=attr_value_pb2.NameAttrList(name=inner.name))
        return list(op.outputs)
    args = [values("f32", (3,), seed=k) for k in range(4)]
    _check_against_tf_xla(fn, *args, rtol=1e-5)
