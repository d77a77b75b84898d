"""The structured Xla* ops (``tensorflow.compiler.tf2xla.python.xla``, what jax2tf emits) against TF's own XLA:
each case is run by ``tf.function(jit_compile=True)`` and by our lowering + evaluator (and XLA:CPU on our
HLO); ints bit-equal, floats within a few ulps."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops as gx
from tensorflow.compiler.tf2xla.python import xla
from tensorflow.compiler.xla import xla_data_pb2

from tests.tf2hlo.op_table import _conv_dn, _gather_dn, _scatter_dn  # one spelling of the dimension numbers
from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values
from tfxla_cluster.errors import InvalidArgumentError, UnimplementedError
from tfxla_cluster.tf2hlo import lower_function

S = tf.TensorSpec


def _scalar_fn(fn, *dtypes):
    return tf.function(fn, autograph=False).get_concrete_function(*[S([], d) for d in dtypes])


ADD_F = _scalar_fn(lambda a, c: a + c, tf.float32, tf.float32)
MAX_F = _scalar_fn(lambda a, c: tf.maximum(a, c), tf.float32, tf.float32)
ADD_I = _scalar_fn(lambda a, c: a + c, tf.int32, tf.int32)
GE_F = _scalar_fn(lambda a, c: a >= c, tf.float32, tf.float32)
# argmax-style variadic reducer: (acc_v, acc_i, x_v, x_i)
ARGMAX = _scalar_fn(lambda av, ai, xv, xi: (tf.where(xv > av, xv, av), tf.where(xv > av, xi, ai)),
                    tf.float32, tf.int32, tf.float32, tf.int32)
# descending by key, comparator (lhs_k, rhs_k, lhs_v, rhs_v)
DESC = _scalar_fn(lambda lk, rk, lv, rv: lk > rk, tf.float32, tf.float32, tf.int32, tf.int32)
COND = _scalar_fn(lambda i, x: i < 5, tf.int32, tf.float32)
BODY = _scalar_fn(lambda i, x: (i + 1, x * 1.5), tf.int32, tf.float32)
THEN = tf.function(lambda x: x + 1.0, autograph=False).get_concrete_function(S([3], tf.float32))
ELSE = tf.function(lambda x: x * 2.0, autograph=False).get_concrete_function(S([3], tf.float32))


def _nchw_dn():
    dn = xla_data_pb2.ConvolutionDimensionNumbers()
    dn.input_batch_dimension, dn.input_feature_dimension = 0, 1
    dn.input_spatial_dimensions.extend([2, 3])
    dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension = 0, 1
    dn.kernel_spatial_dimensions.extend([2, 3])
    dn.output_batch_dimension, dn.output_feature_dimension = 0, 1
    dn.output_spatial_dimensions.extend([2, 3])
    return dn


def cases():
    t = 1e-5
    return [
        Case("XlaConv NHWC stride/pad/dilation", lambda x, w: xla.conv(
            x, w, window_strides=[2, 1], padding=[[1, 0], [1, 2]], lhs_dilation=[1, 2], rhs_dilation=[2, 1],
            dimension_numbers=_conv_dn()), [values("f32", (1, 5, 4, 2)), values("f32", (2, 3, 2, 3), seed=1)],
            rtol=t, atol=t),
        Case("XlaConv NCHW feature groups", lambda x, w: xla.conv(
            x, w, window_strides=[1, 1], padding=[[0, 0], [1, 1]], lhs_dilation=[1, 1], rhs_dilation=[1, 1],
            dimension_numbers=_nchw_dn(), feature_group_count=2),
            [values("f32", (2, 4, 3, 3)), values("f32", (4, 2, 2, 2), seed=2)], rtol=t, atol=t),
        Case("XlaConvV2 int8->int32", lambda x, w: xla.conv(
            x, w, window_strides=[1], padding=[[1, 1]], lhs_dilation=[1], rhs_dilation=[1],
            dimension_numbers=_conv_dn(1), preferred_element_type=tf.int32),
            [values("i32", (1, 6, 2)).astype(np.int8), values("i32", (3, 2, 2), seed=3).astype(np.int8)]),
        Case("XlaConvV2 batch groups", lambda x, w: xla.conv(
            x, w, window_strides=[1, 1], padding=[[0, 0], [0, 0]], lhs_dilation=[1, 1], rhs_dilation=[1, 1],
            dimension_numbers=_conv_dn(), batch_group_count=2, use_v2=True),
            [values("f32", (4, 3, 3, 2)), values("f32", (2, 2, 2, 4), seed=4)], rtol=t, atol=t),
        Case("XlaGather", lambda x, i: xla.gather(x, i, _gather_dn(), [1, 3]),
             [values("f32", (5, 3)), np.array([[4], [0], [2], [2]], np.int32)]),
        Case("XlaScatter add (duplicates)", lambda x, i, u: xla.scatter(x, i, u, ADD_F, _scatter_dn()),
             [values("f32", (5, 3)), np.array([[4], [0], [4]], np.int32), values("f32", (3, 3), seed=1)]),
        Case("XlaReduce sum", lambda x: xla.reduce(x, np.float32(0), [0, 2], ADD_F), [values("f32", (3, 4, 2))]),
        Case("XlaReduce max int", lambda x: xla.reduce(x, np.int32(-100), [1], ADD_I), [values("i32", (3, 4))]),
        Case("XlaVariadicReduceV2 argmax", lambda x, i: xla.variadic_reduce(
            (x, i), (np.float32(-np.inf), np.int32(-1)), [1], ARGMAX),
            [values("f32", (3, 5)), np.tile(np.arange(5, dtype=np.int32), (3, 1))]),
        Case("XlaVariadicReduce (V1)", lambda x: gx.xla_variadic_reduce(
            input=[x], init_value=[np.float32(1.0)], dimensions_to_reduce=[0], reducer=ADD_F),
            [values("f32", (4, 2))]),
        Case("XlaReduceWindow max, stride, pad, dilations", lambda x: xla.reduce_window(
            x, np.float32(-np.inf), MAX_F, [2, 2], window_strides=[1, 2], base_dilations=[2, 1],
            window_dilations=[1, 2], padding=[(1, 0), (0, 1)]), [values("f32", (4, 6))]),
        Case("XlaSelectAndScatter", lambda x, s: xla.select_and_scatter(
            x, [2, 2], [2, 2], [[0, 0], [0, 0]], s, np.float32(0), select=GE_F, scatter=ADD_F),
            [values("f32", (4, 4)), values("f32", (2, 2), seed=5)]),
        Case("XlaVariadicSort descending stable", lambda k, v: xla.variadic_sort(
            [k, v], dimension=1, comparator=DESC, is_stable=True),
            [np.array([[3, 1, 3, 2], [0, 0, 5, -1]], np.float32), np.arange(8, dtype=np.int32).reshape(2, 4)]),
        Case("XlaWhile", lambda i, x: xla.while_loop([i, x], cond=COND, body=BODY),
             [np.array(0, np.int32), np.array(1.25, np.float32)]),
        Case("XlaBroadcastHelper", lambda a, c: gx.xla_broadcast_helper(lhs=a, rhs=c, broadcast_dims=[0, 2]),
             [values("f32", (2, 3)), values("f32", (2, 4, 3), seed=1)]),
        Case("XlaBroadcastHelper rhs", lambda a, c: gx.xla_broadcast_helper(lhs=a, rhs=c, broadcast_dims=[1]),
             [values("i32", (2, 3)), values("i32", (3,), seed=1)]),
        Case("XlaSetBound", lambda n: xla.set_bound(n, 10), [np.array(4, np.int32)]),
        Case("XlaSetDynamicDimensionSize then reduce", lambda x: tf.reduce_sum(
            xla.set_dynamic_dimension_size(x, 1, 2), axis=1), [values("f32", (3, 4))]),
        Case("XlaSetDynamicDimensionSize output", lambda x: xla.set_dynamic_dimension_size(x, 0, 2) * 2.0,
             [values("f32", (3, 4))]),
        Case("XlaRemoveDynamicDimensionSize", lambda x: xla.remove_dynamic_dimension_size(
            xla.set_dynamic_dimension_size(x, 1, 2), 1), [values("f32", (3, 4))]),
        Case("XlaSplitND", lambda x: tf.raw_ops.XlaSplitND(input=x, N=4, num_splits=[2, 2], paddings=[1, 0]),
             [values("f32", (3, 4))]),
        Case("XlaConcatND", lambda a, c, d, e: tf.raw_ops.XlaConcatND(
            inputs=[a, c, d, e], num_concats=[2, 2], paddings=[1, 1]),
             [values("i32", (2, 3), seed=s) for s in range(4)]),
        Case("XlaDequantize", lambda x: xla.dequantize(x, -1.5, 2.0, "MIN_COMBINED", False),
             [np.array([[0x00FF7F01, 0x80402010], [0x12345678, 0xFFFFFFFF]], np.uint32)], rtol=0, atol=0),
        Case("XlaDequantize transposed", lambda x: xla.dequantize(x, 0.0, 6.0, "MIN_COMBINED", transpose_output=True),
             [np.array([[0x00FF7F01, 0x80402010, 7], [0x12345678, 0xFFFFFFFF, 9]], np.uint32)], rtol=0, atol=0),
    ]


def test_xla_ops_equal_tf_xla() -> None:
    run_batch(cases(), reference="tf_xla")


def test_xla_if_equals_tf_xla_cond() -> None:
    """TF's own XLA rejects a bare XlaIf (its kernel needs the ``output_shapes`` attr the python wrapper does
    not set), so the reference is TF's XLA running the same branches through tf.cond."""
    x = values("f32", (3,))
    for p in (False, True):
        def ours(pred, v):
            return gx.xla_if(cond=pred, inputs=[v], then_branch=THEN, else_branch=ELSE, Tout=[tf.float32])
        concrete = tf.function(ours, autograph=False).get_concrete_function(S([], tf.bool), S([3], tf.float32))
        got = lower_function(concrete, np.array(p), x).run(np.array(p), x)[0]
        want = tf.function(lambda pred, v: tf.cond(pred, lambda: THEN(v), lambda: ELSE(v)),
                           jit_compile=True, autograph=False)(tf.constant(p), tf.constant(x))
        np.testing.assert_array_equal(got, want.numpy())


def test_custom_call_lowered_with_target_and_shapes() -> None:
    """TF's XLA:CPU runs only targets registered with it; we emit the instruction the same way."""
    def fn(x):
        a = xla.custom_call([x], target_name="my_target", dtype=tf.float32, shape=[2, 2], backend_config="cfg")
        return a + 0.0, xla.custom_call_v2("other", [x], [S([3], tf.int32), S([], tf.float32)])
    x = values("f32", (4,))
    lowered = lower_function(tf.function(fn, autograph=False).get_concrete_function(S([4], tf.float32)), x)
    text = lowered.module.to_string()
    assert 'custom_call_target="my_target"' in text and 'backend_config="cfg"' in text
    assert "(s32[3]{0}, f32[]) custom-call(" in text and 'custom_call_target="other"' in text
    with pytest.raises(UnimplementedError, match="my_target|other"):
        lowered.run(x)


def test_dynamic_size_must_be_constant() -> None:
    def fn(x, n):
        return xla.set_dynamic_dimension_size(x, 0, n)
    concrete = tf.function(fn, autograph=False).get_concrete_function(S([3], tf.float32), S([], tf.int32))
    with pytest.raises(UnimplementedError, match="dynamic shapes"):
        lower_function(concrete, values("f32", (3,)), np.array(2, np.int32))


def test_bad_dimension_numbers_are_typed_errors() -> None:
    def fn(x):
        return gx.xla_broadcast_helper(lhs=x, rhs=tf.zeros([2, 2, 2]), broadcast_dims=[1, 0])
    concrete = tf.function(fn, autograph=False).get_concrete_function(S([2, 2], tf.float32))
    with pytest.raises(InvalidArgumentError, match="nonmonotonic"):
        lower_function(concrete, values("f32", (2, 2)))


def test_dequantize_matches_bf16_arithmetic() -> None:
    """A hand check of XLA's Dequantize<uint8> formula: (bf16(byte) + 0) * scale + min, bf16 each step."""
    x = np.array([0x01020304], np.uint32)
    got = lower_function(tf.function(lambda v: xla.dequantize(v, 0.0, 255.0, "MIN_COMBINED", False),
                                     autograph=False).get_concrete_function(S([1], tf.uint32)), x).run(x)[0]
    np.testing.assert_array_equal(got.astype(np.float32), np.array([1, 2, 3, 4], np.float32))
    assert got.dtype == ml_dtypes.bfloat16


def _jax2tf(fn, *specs):
    jax = pytest.importorskip("jax")
    from jax.experimental import jax2tf

    del jax
    return tf.function(jax2tf.convert(fn, with_gradient=False), autograph=False).get_concrete_function(*specs)


def test_xla_call_module_from_jax2tf_equals_tf_xla() -> None:
    """jax2tf's CPU export (StableHLO in XlaCallModule): elementwise, reductions, dot, control flow, sort, and
    a two-result function; run by TF's XLA and by us."""
    jnp = pytest.importorskip("jax.numpy")
    import jax

    def f(x, y):
        z = jnp.sin(x) * y + jnp.sum(x, axis=0, keepdims=True)
        w = jnp.dot(z, y.T)
        c = jax.lax.fori_loop(0, 3, lambda i, v: v * 1.5 + i, w)
        return jnp.sort(c, axis=1), jnp.argmax(x, axis=1).astype(jnp.int32)

    x, y = values("f32", (3, 4)), values("f32", (3, 4), seed=1)
    concrete = _jax2tf(f, S([3, 4], tf.float32), S([3, 4], tf.float32))
    assert any(n.op == "XlaCallModule" for n in concrete.graph.as_graph_def().node)
    lowered = lower_function(concrete, x, y)
    got = lowered.run(x, y)
    want = tf.function(concrete, jit_compile=True)(tf.constant(x), tf.constant(y))
    want = [w.numpy() for w in want]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])
    assert " call(" in lowered.module.to_string()


def test_xla_call_module_for_another_platform_is_rejected() -> None:
    """A module exported for TPU only: TF's XLA on CPU refuses it, and so do we (typed error)."""
    pytest.importorskip("jax")
    from jax.experimental import jax2tf

    fn = jax2tf.convert(lambda v: v * 2.0, with_gradient=False, native_serialization_platforms=("tpu",))
    concrete = tf.function(fn, autograph=False).get_concrete_function(S([3], tf.float32))
    x = values("f32", (3,))
    with pytest.raises(tf.errors.OpError, match="platform"):
        tf.function(concrete, jit_compile=True)(tf.constant(x))
    with pytest.raises(InvalidArgumentError, match="platform"):
        lower_function(concrete, x)


def test_variable_split_and_concat_nd_equal_tf_xla() -> None:
    """ReadVariableXlaSplitND / AssignVariableXlaConcatND on a resource variable, through our public
    ``function`` (cluster with a resource argument) against TF's XLA."""
    import tfxla_cluster as tc

    init = values("f32", (3, 4))

    def program(v):
        tiles = tf.raw_ops.ReadVariableXlaSplitND(resource=v.handle, T=tf.float32, N=4, num_splits=[2, 2],
                                                  paddings=[1, 0])
        tf.raw_ops.AssignVariableXlaConcatND(resource=v.handle, inputs=[t * 2.0 for t in tiles],
                                             num_concats=[2, 2], paddings=[1, 0])
        return tiles[3] + 1.0
    results = []
    for runner in (lambda f: tf.function(f, jit_compile=True), lambda f: tc.function(f, jit_compile=True)):
        v = tf.Variable(init)
        out = runner(lambda: program(v))()
        results.append((out.numpy(), v.numpy()))
    np.testing.assert_array_equal(results[1][0], results[0][0])
    np.testing.assert_array_equal(results[1][1], results[0][1])
