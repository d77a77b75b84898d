"""Array, math and direct-XLA ops beyond the core list, against TF eager: reversal/roll, space↔depth/batch,
diagonals and bands, segment reductions, searches, in-top-k, metadata ops, special functions, calls and
Xla* ops. Data movement is exact. Lgamma/Digamma/Erfinv/Ndtri are Lanczos/Giles approximations in f32:
rtol 1e-5 (atol 1e-5 around their zeros); f64 uses the same single-precision formulas, so rtol 1e-6.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, raw, run_batch, values

EXACT = {"rtol": 0.0, "atol": 0.0}


def _c(label, fn, *args, **tol):
    return Case(label, fn, list(args), **(tol or EXACT))


def movement_cases():
    return [
        _c("Reverse", lambda a: tf.raw_ops.Reverse(tensor=a, dims=[True, False, True]), values("f32", (2, 3, 2))),
        _c("Roll", lambda a: tf.roll(a, [1, -2], [0, 1]), values("i32", (3, 4))),
        _c("Roll same axis", lambda a: tf.roll(a, [2, 5], [1, 1]), values("f32", (2, 5))),
        _c("SpaceToDepth", lambda a: tf.nn.space_to_depth(a, 2), values("f32", (1, 4, 6, 3))),
        _c("DepthToSpace", lambda a: tf.nn.depth_to_space(a, 2), values("f32", (2, 2, 3, 8))),
        _c("SpaceToBatchND", lambda a: tf.space_to_batch_nd(a, [2, 3], [[1, 1], [0, 2]]), values("f32", (2, 4, 4, 1))),
        _c("BatchToSpaceND", lambda a: tf.batch_to_space(a, [2, 2], [[0, 1], [1, 0]]), values("f32", (8, 2, 3, 2))),
        _c("SpaceToBatch v1", lambda a: tf.raw_ops.SpaceToBatch(input=a, paddings=[[0, 0], [1, 1]], block_size=2),
           values("f32", (1, 2, 2, 1))),
        _c("MatrixBandPart", lambda a: tf.linalg.band_part(a, 1, 0), values("f32", (2, 4, 4))),
        _c("MatrixBandPart all", lambda a: tf.linalg.band_part(a, -1, 2), values("i32", (3, 5))),
        _c("MatrixDiag", lambda d: tf.raw_ops.MatrixDiag(diagonal=d), values("f32", (2, 3))),
        _c("MatrixDiagV3", lambda d: tf.linalg.diag(d, num_rows=4, num_cols=3, padding_value=9), values("f32", (2, 3))),
        _c("MatrixDiagPart", lambda a: tf.raw_ops.MatrixDiagPart(input=a), values("f32", (2, 3, 4))),
        _c("MatrixDiagPartV3", lambda a: tf.linalg.diag_part(a), values("i32", (4, 3))),
        _c("MatrixSetDiag", lambda a, d: tf.linalg.set_diag(a, d), values("f32", (2, 3, 4)), values("f32", (2, 3), seed=1)),
        _c("Diag", lambda d: tf.raw_ops.Diag(diagonal=d), values("f32", (2, 3))),
        _c("DiagPart", lambda a: tf.raw_ops.DiagPart(input=a), values("f32", (2, 3, 2, 3))),
        _c("Cross", lambda a, c: tf.linalg.cross(a, c), values("f32", (2, 3)), values("f32", (2, 3), seed=1),
           rtol=1e-6, atol=1e-6),
    ]


def segment_search_cases():
    ids = np.array([0, 2, 0, 3, 2], np.int32)
    out = []
    for op in ("UnsortedSegmentSum", "UnsortedSegmentProd", "UnsortedSegmentMax", "UnsortedSegmentMin"):
        out.append(_c(op, lambda d, i, op=op: getattr(tf.raw_ops, op)(data=d, segment_ids=i, num_segments=5),
                      values("f32", (5, 2)), ids, rtol=1e-6, atol=1e-6))
    out += [
        _c("UnsortedSegmentSum 2-D ids", lambda d, i: tf.math.unsorted_segment_sum(d, i, 3), values("i32", (2, 2, 3)),
           np.array([[0, 2], [2, 1]], np.int64)),
        _c("SegmentSumV2", lambda d, i: tf.raw_ops.SegmentSumV2(data=d, segment_ids=i, num_segments=4),
           values("f32", (4,)), np.array([0, 0, 1, 3], np.int32), rtol=1e-6, atol=1e-6),
        _c("Bucketize", lambda a: tf.raw_ops.Bucketize(input=a, boundaries=[-1.0, 0.0, 2.5]), values("f32", (2, 4))),
        _c("LowerBound", lambda s, v: tf.searchsorted(s, v, side="left"), np.array([[1, 3, 3, 7]], np.float32),
           np.array([[0, 3, 4, 8]], np.float32)),
        _c("UpperBound", lambda s, v: tf.searchsorted(s, v, side="right", out_type=tf.int64),
           np.array([[1, 3, 3, 7], [0, 0, 1, 2]], np.int32), np.array([[3, 7], [0, 5]], np.int32)),
        _c("InTopKV2", lambda p, t: tf.math.in_top_k(t, p, 2), np.array([[0.1, 0.5, 0.5, 0.2], [1, 2, 3, 4]],
                                                                        np.float32), np.array([2, 1], np.int32)),
    ]
    return out


def metadata_cases():
    return [
        _c("ConcatOffset", lambda a: [tf.cast(o, tf.float32) + a for o in
                                      tf.raw_ops.ConcatOffset(concat_dim=1, shape=[[2, 3], [2, 5], [2, 1]])],
           values("f32", ())),
        _c("DataFormatVecPermute", lambda a: tf.raw_ops.DataFormatVecPermute(x=a), np.array([1, 4, 5, 3], np.int32)),
        _c("DataFormatVecPermute 2-D", lambda a: tf.raw_ops.DataFormatVecPermute(x=a),
           np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.int64)),
        _c("DataFormatDimMap", lambda a: tf.raw_ops.DataFormatDimMap(x=a), np.array([0, 1, 2, 3, -1, -4], np.int32)),
        _c("LinSpace const", lambda a: a + tf.linspace(0.0, 1.0, 7), values("f32", (7,))),
        _c("LinSpace dynamic", lambda s, e: tf.linspace(s, e, 5), np.array(1.5, np.float32),
           np.array(-2.0, np.float32), rtol=1e-6, atol=1e-6),
        _c("Bitcast narrow", lambda a: tf.bitcast(a, tf.uint8), values("f32", (2,))),
        _c("Bitcast wide", lambda a: tf.bitcast(a, tf.int32), np.arange(8, dtype=np.uint8).reshape(2, 4)),
        _c("Bitcast same width", lambda a: tf.bitcast(a, tf.int32), values("f32", (3,))),
        _c("ToBool", lambda a, c: [tf.raw_ops.ToBool(input=a), tf.raw_ops.ToBool(input=c)], np.array(0.0, np.float32),
           values("i32", (0, 2))),
        _c("PopulationCount", raw("PopulationCount"), np.array([0, 1, 7, -1, 1 << 20], np.int32)),
    ]


def special_cases():
    out = []
    for dt in ("f32", "f64"):
        tol = {"rtol": 1e-5 if dt == "f32" else 1e-6, "atol": 1e-5 if dt == "f32" else 1e-6}
        x = np.array([0.1, 0.5, 1.0, 2.5, 7.0, -0.5, -2.3, 40.0], dtype=np.float32 if dt == "f32" else np.float64)
        out += [_c(f"Lgamma[{dt}]", raw("Lgamma"), x, **tol), _c(f"Digamma[{dt}]", raw("Digamma"), x, **tol),
                _c(f"Erfinv[{dt}]", raw("Erfinv"), values(dt, (6,), "unit"), **tol),
                _c(f"Ndtri[{dt}]", raw("Ndtri"), np.abs(values(dt, (6,), "unit")), **tol),
                _c(f"NextAfter[{dt}]", raw("NextAfter"), np.array([1.0, 0.0, -2.0, 3.0], x.dtype),
                   np.array([2.0, -1.0, -2.0, 0.0], x.dtype))]
    return out


def xla_and_call_cases():
    from tensorflow.compiler.tf2xla.ops import gen_xla_ops as xla
    from tensorflow.compiler.xla import xla_data_pb2

    dn = xla_data_pb2.DotDimensionNumbers(lhs_contracting_dimensions=[1], rhs_contracting_dimensions=[0])

    @tf.function(autograph=False)
    def inner(a, c):
        return a * 2.0 + c, tf.reduce_sum(a)

    return [
        _c("XlaDot", lambda a, c: xla.xla_dot(a, c, dimension_numbers=dn.SerializeToString(), precision_config=b""), values("f32", (2, 3)),
           values("f32", (3, 2), seed=1), rtol=1e-6, atol=1e-6),
        _c("XlaPad", lambda a: xla.xla_pad(a, np.float32(-1), [1, 0], [0, 2], [1, 0]), values("f32", (2, 3))),
        _c("XlaDynamicSlice", lambda a, s: xla.xla_dynamic_slice(a, s, [2, 2]),
           values("f32", (4, 4)), np.array([1, 3], np.int32)),
        _c("XlaDynamicUpdateSlice", lambda a, u, s: xla.xla_dynamic_update_slice(a, u, s),
           values("f32", (4, 4)), values("f32", (2, 2), seed=1), np.array([2, 1], np.int32)),
        _c("XlaSort", lambda a: xla.xla_sort(a), values("f32", (2, 5))),
        _c("XlaKeyValueSort", lambda k, v: xla.xla_key_value_sort(k, v),
           np.array([3, 1, 2, 0], np.int32), values("f32", (4,))),
        _c("PartitionedCall", lambda a, c: inner(a, c), values("f32", (2, 3)), values("f32", (2, 3), seed=1),
           rtol=1e-6, atol=1e-6),
    ]




def test_xla_ops_and_calls():
    """Xla* ops have no TF CPU kernel for some types; compared with TF's own XLA (jit_compile=True)."""
    from tfxla_cluster.tf2hlo import lower_function

    for case in xla_and_call_cases():
        concrete = tf.function(case.fn, autograph=False).get_concrete_function(
            *[tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in case.args])
        got = lower_function(concrete, *case.args).run(*case.args)
        want = tf.function(case.fn, jit_compile=True, autograph=False)(*case.args)
        want = [w.numpy() for w in (want if isinstance(want, (list, tuple)) else [want])]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=case.label)




def extra_cases():
    return [
        _c("DynamicStitch", lambda a, c: tf.dynamic_stitch([[0, 2], [[1], [2]]], [a, c]), values("f32", (2, 3)),
           values("f32", (2, 1, 3), seed=1)),
        _c("ParallelDynamicStitch", lambda a: tf.raw_ops.ParallelDynamicStitch(indices=[[1, 0]], data=[a]),
           values("i32", (2, 2))),
        _c("SparseToDense", lambda v: tf.raw_ops.SparseToDense(sparse_indices=[[0, 1], [2, 0]], output_shape=[3, 2],
                                                               sparse_values=v, default_value=-1.0),
           values("f32", (2,))),
        _c("SparseToDense 1-D", lambda v: tf.raw_ops.SparseToDense(sparse_indices=[1, 3], output_shape=[5],
                                                                   sparse_values=v, default_value=0),
           np.array(7, np.int32)),
        _c("ApproxTopK", lambda a: tf.math.approx_max_k(a, 2), values("f32", (3, 5))),
        _c("ApproxMinK axis 0", lambda a: tf.math.approx_min_k(a, 1, reduction_dimension=0), values("f32", (4, 2))),
        _c("Conv3D backprop input", lambda w, dy: tf.raw_ops.Conv3DBackpropInputV2(
            input_sizes=[1, 4, 4, 4, 2], filter=w, out_backprop=dy, strides=[1, 1, 1, 1, 1], padding="SAME"),
           values("f32", (2, 2, 2, 2, 3)), values("f32", (1, 4, 4, 4, 3), seed=1), rtol=1e-5, atol=1e-5),
        _c("Conv3D backprop filter", lambda x, dy: tf.raw_ops.Conv3DBackpropFilterV2(
            input=x, filter_sizes=[2, 2, 2, 2, 3], out_backprop=dy, strides=[1, 2, 2, 2, 1], padding="VALID"),
           values("f32", (1, 4, 4, 4, 2)), values("f32", (1, 2, 2, 2, 3), seed=1), rtol=1e-5, atol=1e-5),
    ]


def test_stateful_random_shapes_and_ranges():
    from tfxla_cluster.tf2hlo import lower_function

    def fn():
        return (tf.random.uniform([50, 4]), tf.random.normal([2000]),
                tf.random.uniform([64], minval=3, maxval=9, dtype=tf.int32))
    lc = lower_function(tf.function(fn, autograph=False).get_concrete_function())
    u, n, i = lc.run()
    assert u.shape == (50, 4) and 0 <= u.min() and u.max() < 1
    assert abs(n.mean()) < 0.15 and abs(n.std() - 1) < 0.15
    assert i.dtype == np.int32 and 3 <= i.min() and i.max() < 9


def variant_cases():
    """Older/other variants that share a lowering with a tested op: each must still match TF."""
    tol = {"rtol": 1e-5, "atol": 1e-5}
    return [
        _c("Conv3D", lambda x, w: tf.nn.conv3d(x, w, [1, 1, 2, 1, 1], "SAME"), values("f32", (1, 3, 4, 4, 2)),
           values("f32", (2, 2, 2, 2, 3), seed=1), **tol),
        _c("MaxPool3D", lambda x: tf.nn.max_pool3d(x, 2, 2, "VALID"), values("f32", (1, 4, 4, 4, 2))),
        _c("AvgPool3D", lambda x: tf.nn.avg_pool3d(x, 2, 1, "SAME"), values("f32", (1, 3, 3, 3, 1)), **tol),
        _c("MaxPoolV2", lambda x: tf.raw_ops.MaxPoolV2(input=x, ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1],
                                                        padding="SAME"), values("f32", (1, 3, 3, 2))),
        _c("MaxPoolGradV2", lambda x, g: tf.raw_ops.MaxPoolGradV2(
            orig_input=x, orig_output=tf.nn.max_pool2d(x, 2, 2, "VALID"), grad=g, ksize=[1, 2, 2, 1],
            strides=[1, 2, 2, 1], padding="VALID"), values("f32", (1, 4, 4, 1)), values("f32", (1, 2, 2, 1), seed=1)),
        _c("Gather v1", lambda p, i: tf.raw_ops.Gather(params=p, indices=i), values("f32", (4, 2)),
           np.array([3, 0], np.int32)),
        _c("BiasAddV1", lambda x, b: tf.raw_ops.BiasAddV1(value=x, bias=b), values("f32", (2, 3)),
           values("f32", (3,), seed=1)),
        _c("BatchToSpace v1", lambda a: tf.raw_ops.BatchToSpace(input=a, crops=[[0, 1], [1, 0]], block_size=2),
           values("f32", (4, 2, 2, 1))),
        _c("MatrixDiagV2", lambda d: tf.raw_ops.MatrixDiagV2(diagonal=d, k=0, num_rows=-1, num_cols=-1,
                                                              padding_value=0.0), values("f32", (3,))),
        _c("MatrixDiagPartV2", lambda a: tf.raw_ops.MatrixDiagPartV2(input=a, k=0, padding_value=0.0),
           values("f32", (3, 3))),
        _c("MatrixSetDiagV2", lambda a, d: tf.raw_ops.MatrixSetDiagV2(input=a, diagonal=d, k=0),
           values("f32", (2, 3)), values("f32", (2,), seed=1)),
        _c("EnsureShape", lambda a: tf.ensure_shape(a, [2, 3]), values("f32", (2, 3))),
        _c("CheckNumerics", lambda a: tf.debugging.check_numerics(a, "msg"), values("f32", (3,))),
        _c("Inv", lambda a: tf.raw_ops.Inv(x=a), values("f32", (3,), "nonzero"), rtol=1e-6, atol=0.0),
        _c("TensorScatterAdd scalar rows", lambda t, u: tf.tensor_scatter_nd_add(t, [[1], [1]], u),
           values("i32", (3,)), np.array([4, 5], np.int32)),
    ]


BATCHES = {"movement-diag": movement_cases, "segment-search": segment_search_cases, "metadata": metadata_cases,
           "special": special_cases, "extra": extra_cases,
           "variants": variant_cases}


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch(name):
    run_batch(BATCHES[name]())


def diag_band_cases():
    """The V2/V3 diagonal ops off the main diagonal: bands, single off-diagonals, every alignment, padding."""
    R = tf.raw_ops
    x, xw = values("f32", (2, 3, 4)), values("i32", (4, 3))
    out = []
    for align in ("RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT"):
        out += [
            Case(f"MatrixSetDiagV3 k=[-1,1] {align}", lambda a, d, al=align: R.MatrixSetDiagV3(
                input=a, diagonal=d, k=[-1, 1], align=al), [x, values("f32", (2, 3, 3), seed=2)]),
            Case(f"MatrixDiagPartV3 k=[-2,1] {align}", lambda a, al=align: R.MatrixDiagPartV3(
                input=a, k=[-2, 1], padding_value=9, align=al), [xw]),
            Case(f"MatrixDiagV3 k=[-1,2] {align}", lambda d, al=align: R.MatrixDiagV3(
                diagonal=d, k=[-1, 2], num_rows=-1, num_cols=-1, padding_value=-1.0, align=al),
                [values("f32", (2, 4, 3), seed=3)]),
        ]
    out += [
        Case("MatrixSetDiagV3 k=1", lambda a, d: R.MatrixSetDiagV3(input=a, diagonal=d, k=1), [x, values("f32", (2, 3), seed=4)]),
        Case("MatrixSetDiagV2 k=[-2,0]", lambda a, d: R.MatrixSetDiagV2(input=a, diagonal=d, k=[-2, 0]),
             [x, values("f32", (2, 3, 3), seed=5)]),
        Case("MatrixDiagPartV3 k=-1", lambda a: R.MatrixDiagPartV3(input=a, k=-1, padding_value=0.0), [x]),
        Case("MatrixDiagPartV2 k=[0,2]", lambda a: R.MatrixDiagPartV2(input=a, k=[0, 2], padding_value=7), [xw]),
        Case("MatrixDiagV3 k=1 rows", lambda d: R.MatrixDiagV3(diagonal=d, k=1, num_rows=4, num_cols=-1,
                                                             padding_value=0.5), [values("f32", (3,), seed=6)]),
        Case("MatrixDiagV2 k=[-1,0] sizes", lambda d: R.MatrixDiagV2(diagonal=d, k=[-1, 0], num_rows=3, num_cols=4,
                                                                    padding_value=0), [values("i32", (2, 3), seed=7)]),
    ]
    return out


@pytest.mark.parametrize("reference", ["tf_xla", "tf"])
def test_diag_bands_equal_tf(reference: str) -> None:
    run_batch(diag_band_cases(), reference=reference)
