"""More random ops against TF's own XLA (``jit_compile=True``): the v1 stateless ops (s32[2] seed
input, constant or fed at run time), stateful ops on a resource state (explicit seeds: bit-equal) and
the seedless ones (compared by shape, distribution and invariants, as TF's XLA is not repeatable
there). Integers and uniform floats are bit-equal; normals go through log/sqrt/sin/erfinv, which XLA:CPU
approximates: rtol 1e-5 (f32), 1e-12 (f64), a few ulps for 16-bit types."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_tfxla import compare as _compare, lower_and_run as _lower_and_run, tf_xla as _tf_xla

@pytest.mark.parametrize("dtype, seed", [(tf.float32, (1, 2)), (tf.float64, (1, 2)), (tf.float16, (1, 2)),
                                         (tf.bfloat16, (1, 2)), (tf.float32, (-7, 123456789))])
def test_stateless_v1_float_ops_equal_tf_xla(dtype, seed):
    def fn(s):
        return (tf.raw_ops.StatelessRandomUniform(shape=[3, 5], seed=s, dtype=dtype),
                tf.raw_ops.StatelessRandomNormal(shape=[4, 3], seed=s, dtype=dtype),
                tf.raw_ops.StatelessTruncatedNormal(shape=[7], seed=s, dtype=dtype),
                tf.raw_ops.StatelessRandomUniform(shape=[2], seed=s[::-1], dtype=dtype))
    # Seeds are fed: with a constant seed TF's grappler folds the op with TF's CPU kernel before XLA.
    seed = np.array(seed, np.int32)
    _compare(_lower_and_run(fn, [seed]), _tf_xla(fn, [seed]), exact=(0, 3))


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64])
def test_stateless_v1_int_ops_equal_tf_xla(dtype):
    def fn(s):
        return (tf.raw_ops.StatelessRandomUniformInt(shape=[4, 6], seed=s, minval=tf.constant(-5, dtype),
                                                     maxval=tf.constant(9, dtype)),
                tf.raw_ops.StatelessRandomUniformFullInt(shape=[9], seed=s, dtype=dtype),
                tf.raw_ops.StatelessRandomUniformFullInt(shape=[2, 2], seed=s * 3 - 1, dtype=dtype))
    seed = np.array([-3, 77], np.int32)
    _compare(_lower_and_run(fn, [seed]), _tf_xla(fn, [seed]), exact=(0, 1, 2))


def _stateful_program(alg: int, dtype, state0):
    """A function of nothing that draws with every stateful op from one state variable and returns the
    values and the final state."""
    state = tf.Variable(np.asarray(state0, np.int64))

    def fn():
        out = [tf.raw_ops.StatefulUniform(resource=state.handle, algorithm=alg, shape=[3, 2], dtype=dtype),
               tf.raw_ops.StatefulStandardNormalV2(resource=state.handle, algorithm=alg, shape=[5], dtype=dtype),
               tf.raw_ops.StatefulTruncatedNormal(resource=state.handle, algorithm=alg, shape=[4], dtype=dtype),
               tf.raw_ops.StatefulUniformInt(resource=state.handle, algorithm=alg, shape=[7],
                                             minval=tf.constant(-4, tf.int64), maxval=tf.constant(100, tf.int64)),
               tf.raw_ops.StatefulUniformFullInt(resource=state.handle, algorithm=alg, shape=[3], dtype=tf.int32),
               tf.raw_ops.RngReadAndSkip(resource=state.handle, alg=tf.constant(alg, tf.int32),
                                         delta=tf.constant(5, tf.uint64))]
        tf.raw_ops.RngSkip(resource=state.handle, algorithm=tf.constant(alg, tf.int64), delta=tf.constant(3, tf.int64))
        out.append(state.read_value())
        return out
    return state, fn


@pytest.mark.parametrize("alg, state0, dtype", [
    (1, [5, 0, 42], tf.float32), (1, [5, 0, 42], tf.float64), (1, [5, 0, 42], tf.bfloat16),
    (1, [-3, 7, -11], tf.float32),   # counter words wrap through the sign bit
    (2, [12, 99], tf.float32), (2, [12, 99], tf.bfloat16), (3, [0, 1, 2], tf.float64)])
def test_stateful_ops_equal_tf_xla(alg, state0, dtype):
    state, fn = _stateful_program(alg, dtype, state0)
    want = _tf_xla(fn) + [state.numpy()]   # the values, the state read in fn, the variable after the call
    state.assign(np.asarray(state0, np.int64))
    got = _lower_and_run(fn)               # the values, then the written variable
    _compare(got, want, exact=(0,))


def test_stateless_multinomial_and_parameterized_truncated_normal_equal_tf_xla():
    def fn(s, logits, mu):
        return (tf.raw_ops.StatelessMultinomial(logits=logits, num_samples=6, seed=s, output_dtype=tf.int64),
                tf.raw_ops.StatelessMultinomial(logits=logits, num_samples=1, seed=s, output_dtype=tf.int32),
                tf.raw_ops.StatelessParameterizedTruncatedNormal(
                    shape=[3, 4], seed=s, means=mu, stddevs=tf.constant([0.5, 1.0, 2.0, 3.0]),
                    minvals=tf.constant(-1.0), maxvals=tf.constant(2.5)))
    args = [np.array([7, -2], np.int32), np.log(np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]], np.float32)),
            np.array([[0.0], [0.5], [-0.5]], np.float32)]
    _compare(_lower_and_run(fn, args), _tf_xla(fn, args), exact=(0, 1))


def test_xla_rng_bit_generator_equals_tf_xla():
    from tensorflow.compiler.tf2xla.ops import gen_xla_ops

    def fn(state):
        k, v = gen_xla_ops.xla_rng_bit_generator(algorithm=1, initial_state=state, shape=[3, 5], dtype=tf.uint32)
        k2, v2 = gen_xla_ops.xla_rng_bit_generator(algorithm=1, initial_state=k, shape=[4], dtype=tf.uint64)
        return k, v, k2, v2
    args = [np.array([1, 2**63 + 5, 3], np.uint64)]
    _compare(_lower_and_run(fn, args), _tf_xla(fn, args), exact=(0, 1, 2, 3))


def test_seedless_ops_shapes_and_distributions():
    """TruncatedNormal, ParameterizedTruncatedNormal, Multinomial and RandomShuffle draw with XLA's
    ``rng`` (TF's XLA ignores their seeds): checked for shape, dtype, bounds, moments and invariants,
    the same checks passing on TF's XLA."""
    n = 20000

    def fn(logits, vec, mat):
        return (tf.raw_ops.TruncatedNormal(shape=[n], dtype=tf.float32),
                tf.raw_ops.ParameterizedTruncatedNormal(shape=[2, n // 2], means=tf.constant([0.0, 3.0]),
                                                        stdevs=tf.constant(2.0), minvals=tf.constant([-1.0, 2.0]),
                                                        maxvals=tf.constant(4.0)),
                tf.raw_ops.Multinomial(logits=logits, num_samples=n // 4),
                tf.raw_ops.RandomShuffle(value=vec),
                tf.raw_ops.RandomShuffle(value=mat))
    logits = np.array([np.log([0.2, 0.5, 0.3]), [0.0, -np.inf, -np.inf]], np.float32)
    vec, mat = np.arange(50, dtype=np.int32), np.arange(12, dtype=np.float32).reshape(6, 2)
    args = [logits, vec, mat]
    for source, out in (("ours", _lower_and_run(fn, args, seedless=True)), ("TF's XLA", _tf_xla(fn, args))):
        tn, ptn, multi, svec, smat = out
        assert tn.shape == (n,) and tn.dtype == np.float32, source
        assert tn.min() >= -2.0 and tn.max() <= 2.0 and abs(tn.mean()) < 0.03, source
        assert abs(tn.std() - 0.8796) < 0.02, source   # std of N(0, 1) truncated to [-2, 2]
        assert ptn.shape == (2, n // 2), source
        assert ptn[0].min() >= -1.0 and ptn[0].max() <= 4.0 and ptn[1].min() >= 2.0 and ptn[1].max() <= 4.0, source
        assert multi.shape == (2, n // 4) and multi.dtype == np.int64, source
        freq = np.bincount(multi[0], minlength=3) / multi.shape[1]
        np.testing.assert_allclose(freq, [0.2, 0.5, 0.3], atol=0.03, err_msg=source)
        assert (multi[1] == 0).all(), source    # log(0) classes are never drawn
        np.testing.assert_array_equal(np.sort(svec), vec, err_msg=source)
        assert not np.array_equal(svec, vec), source
        np.testing.assert_array_equal(smat[np.argsort(smat[:, 0])], mat, err_msg=source)  # rows stay whole


@pytest.mark.parametrize("dtype, tout", [(tf.float32, tf.int32), (tf.float32, tf.int8), (tf.bfloat16, tf.int16),
                                         (tf.float16, tf.int32)])
def test_stochastic_cast_to_int_equals_tf_xla(dtype, tout):
    from tensorflow.python.framework import op_def_library

    def fn(x, key, counter):
        _, _, op, _ = op_def_library._apply_op_helper("StochasticCastToInt", name="cast", input=x, key=key,
                                                      counter=counter, alg=tf.constant(1), Tout=tout)
        return op.outputs[0]
    x = np.array([1.5, -2.25, 3e4, 0.1, -0.7, 4.0, -130.5, 127.9, 1e9, -1e9] * 3, np.float32)
    big = float(dtype.max)
    x = np.clip(x, -big, big).astype(dtype.as_numpy_dtype)   # f16 saturates at its max, not at inf
    args = [x, np.array([7], np.uint64), np.array([1, 2**40], np.uint64)]
    _compare(_lower_and_run(fn, args), _tf_xla(fn, args))
