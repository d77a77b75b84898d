"""Shape and data-movement lowerings against TF eager: constants, identities, reshapes, concat/pack/split,
tile/broadcast/fill, range and shape metadata, padding, reversal, slices (every StridedSlice mask),
gathers, scatters and one-hot. Data movement is exact, so every comparison is exact (floats included).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import DTYPES, Case, raw, run_batch, values, xla_dtypes

ALL = tuple(DTYPES)
EXACT = {"rtol": 0.0, "atol": 0.0}


def _c(label, fn, *args):
    return Case(label, fn, list(args), **EXACT)


def _per_dtype(op, build, among=ALL):
    return [c for dt in xla_dtypes(op, among=among) for c in build(dt)]


def identity_cases():
    out = []
    for op in ("Identity", "StopGradient", "PreventGradient", "Snapshot"):
        out += _per_dtype(op, lambda dt, op=op: [_c(f"{op}[{dt}]", raw(op), values(dt, (2, 3)))])
    out.append(_c("IdentityN", lambda a, b: tf.raw_ops.IdentityN(input=[a, b]), values("f32", (2,)),
                  values("i32", ())))
    out.append(_c("Const[bf16]", lambda a: a + tf.constant([[1.5, 2.5]], tf.bfloat16), values("bf16", (3, 2))))
    out.append(_c("Const uniform", lambda a: a * tf.fill([2, 3], 2.0), values("f32", (2, 3))))
    out.append(_c("Const nan", lambda a: a + tf.constant([np.nan, np.nan]), values("f32", (2,))))
    return out


def reshape_cases():
    out = []
    out += _per_dtype("Reshape", lambda dt: [_c(f"Reshape[{dt}] -1", lambda a: tf.reshape(a, [3, -1]),
                                                values(dt, (2, 3)))])
    out += [_c("Reshape to scalar", lambda a: tf.reshape(a, []), values("f32", (1, 1))),
            _c("Reshape size-0", lambda a: tf.reshape(a, [3, 0, 5]), values("f32", (0, 3))),
            _c("Reshape from Shape", lambda a, b: tf.reshape(a, tf.shape(b)), values("f32", (6,)),
               values("f32", (3, 2)))]
    out += _per_dtype("Transpose", lambda dt: [_c(f"Transpose[{dt}]", lambda a: tf.transpose(a, [2, 0, 1]),
                                                  values(dt, (2, 3, 4)))])
    out += [_c("Transpose identity", lambda a: tf.transpose(a, [0, 1]), values("f32", (2, 3))),
            _c("Transpose size-0", lambda a: tf.transpose(a), values("f32", (0, 3))),
            _c("ExpandDims 0", lambda a: tf.expand_dims(a, 0), values("f32", ())),
            _c("ExpandDims -1", lambda a: tf.expand_dims(a, -1), values("i32", (2, 3))),
            _c("ExpandDims -3", lambda a: tf.expand_dims(a, -3), values("bool", (2, 3))),
            _c("Squeeze all", lambda a: tf.squeeze(a), values("f32", (1, 2, 1, 3))),
            _c("Squeeze axis", lambda a: tf.squeeze(a, [-2]), values("f16", (1, 2, 1, 3))),
            _c("Squeeze scalar", lambda a: tf.squeeze(a), values("f32", (1,)))]
    return out


def concat_split_cases():
    out = []
    out += _per_dtype("ConcatV2", lambda dt: [
        _c(f"ConcatV2[{dt}]", lambda a, b: tf.concat([a, b], 1), values(dt, (2, 3)), values(dt, (2, 1), seed=1))])
    out += [_c("ConcatV2 -1 size-0", lambda a, b: tf.concat([a, b, a], -1), values("f32", (2, 0)),
               values("f32", (2, 2))),
            _c("Concat v1", lambda a, b: tf.raw_ops.Concat(concat_dim=0, values=[a, b]), values("i64", (1, 2)),
               values("i64", (3, 2)))]
    out += _per_dtype("Pack", lambda dt: [
        _c(f"Pack[{dt}]", lambda a, b: tf.stack([a, b], 1), values(dt, (2, 3)), values(dt, (2, 3), seed=1))])
    out += [_c("Pack scalars", lambda a, b: tf.stack([a, b]), values("f32", ()), values("f32", (), seed=1)),
            _c("Pack -1", lambda a: tf.stack([a, a, a], -1), values("f32", (2,))),
            _c("Pack single", lambda a: tf.stack([a]), values("i32", (2,)))]
    out += _per_dtype("Unpack", lambda dt: [_c(f"Unpack[{dt}]", lambda a: tf.unstack(a, axis=1),
                                               values(dt, (2, 3)))])
    out += [_c("Unpack -1", lambda a: tf.unstack(a, axis=-1), values("f32", (2, 2, 3))),
            _c("Split", lambda a: tf.split(a, 3, axis=1), values("f32", (2, 6))),
            _c("Split -1", lambda a: tf.split(a, 2, axis=-1), values("bool", (2, 4))),
            _c("SplitV", lambda a: tf.split(a, [1, -1, 2], axis=0), values("i32", (6, 2))),
            _c("SplitV zero", lambda a: tf.split(a, [0, 3], axis=1), values("f32", (2, 3)))]
    return out


def broadcast_cases():
    out = []
    out += _per_dtype("Tile", lambda dt: [_c(f"Tile[{dt}]", lambda a: tf.tile(a, [2, 3]), values(dt, (2, 3)))])
    out += [_c("Tile ones", lambda a: tf.tile(a, [1, 1]), values("f32", (2, 3))),
            _c("Tile zero", lambda a: tf.tile(a, [0, 2]), values("f32", (2, 3))),
            _c("Tile 3-D", lambda a: tf.tile(a, [1, 2, 2]), values("i32", (2, 1, 3)))]
    out += _per_dtype("BroadcastTo", lambda dt: [_c(f"BroadcastTo[{dt}]", lambda a: tf.broadcast_to(a, [2, 3, 4]),
                                                    values(dt, (3, 1)))])
    out += [_c("BroadcastTo scalar", lambda a: tf.broadcast_to(a, [2, 2]), values("f32", ())),
            _c("BroadcastTo size-0", lambda a: tf.broadcast_to(a, [0, 3]), values("f32", (1, 3))),
            _c("BroadcastArgs", lambda a: a + tf.cast(tf.raw_ops.BroadcastArgs(s0=[2, 1, 3], s1=[4, 1]), tf.float32)[0],
               values("f32", ())),
            _c("BroadcastGradientArgs", lambda a: [tf.reduce_sum(a, r) for r in
                                                   tf.raw_ops.BroadcastGradientArgs(s0=[2, 1, 3], s1=[1, 3])],
               values("f32", (2, 1, 3)))]
    out += _per_dtype("Fill", lambda dt: [_c(f"Fill[{dt}]", lambda v: tf.fill([2, 3], v), values(dt, ()))])
    for op in ("ZerosLike", "OnesLike"):
        out += _per_dtype(op, lambda dt, op=op: [_c(f"{op}[{dt}]", raw(op), values(dt, (2, 3))),
                                                 _c(f"{op}[{dt}]()", raw(op), values(dt, ()))])
    return out


def metadata_cases():
    return [
        _c("Range int", lambda a: a + tf.range(2, 11, 3), values("i32", (3,))),
        _c("Range float", lambda a: a + tf.range(0.1, 1.0, 0.1), values("f32", (9,))),
        _c("Range negative", lambda a: a + tf.range(5, -3, -2, dtype=tf.int64), values("i64", (4,))),
        _c("Range empty", lambda a: tf.concat([a, tf.range(3, 3)], 0), values("i32", (2,))),
        _c("Shape", lambda a: tf.raw_ops.Shape(input=a, out_type=tf.int64), values("f32", (2, 0, 3))),
        _c("ShapeN", lambda a, b: tf.raw_ops.ShapeN(input=[a, b]), values("f32", (2, 3)), values("f32", ())),
        _c("Size", lambda a: tf.raw_ops.Size(input=a), values("bool", (2, 3))),
        _c("Rank", lambda a: tf.raw_ops.Rank(input=a), values("f32", (2, 3, 1))),
        _c("Where const", lambda a: tf.cast(tf.where(tf.constant([[True, False], [False, True]])), tf.float32) + a,
           values("f32", (2, 2))),
    ]


def pad_reverse_cases():
    out = []
    out += _per_dtype("Pad", lambda dt: [_c(f"Pad[{dt}]", lambda a: tf.pad(a, [[1, 0], [2, 3]]), values(dt, (2, 3)))])
    out += [_c("PadV2", lambda a, v: tf.raw_ops.PadV2(input=a, paddings=[[0, 1], [1, 1]], constant_values=v),
               values("f32", (2, 2)), values("f32", (), seed=1)),
            _c("Pad size-0", lambda a: tf.pad(a, [[1, 1], [0, 2]]), values("f32", (0, 2))),
            _c("Pad scalar", lambda a: tf.raw_ops.Pad(input=a, paddings=tf.zeros([0, 2], tf.int32)), values("f32", ())),
            _c("MirrorPad REFLECT", lambda a: tf.pad(a, [[1, 2], [2, 1]], "REFLECT"), values("f32", (3, 4))),
            _c("MirrorPad SYMMETRIC", lambda a: tf.pad(a, [[2, 1], [0, 3]], "SYMMETRIC"), values("i32", (3, 4)))]
    out += _per_dtype("ReverseV2", lambda dt: [_c(f"ReverseV2[{dt}]", lambda a: tf.reverse(a, [0, -1]),
                                                  values(dt, (2, 3, 2)))])
    out += [_c("ReverseV2 none", lambda a: tf.reverse(a, tf.zeros([0], tf.int32)), values("f32", (2,))),
            _c("InvertPermutation param", raw("InvertPermutation"), np.array([2, 0, 3, 1], np.int32)),
            _c("InvertPermutation const", lambda a: a + tf.math.invert_permutation([1, 2, 0]),
               values("i32", (3,)))]
    return out


STRIDED = [
    ("[1:3]", (5, 4), lambda a: a[1:3]),
    ("[::-1]", (5,), lambda a: a[::-1]),
    ("[-2::-2, 1:]", (5, 4), lambda a: a[-2::-2, 1:]),
    ("[..., 0]", (2, 3, 4), lambda a: a[..., 0]),
    ("[1, ..., ::2]", (2, 3, 4), lambda a: a[1, ..., ::2]),
    ("[None, :, tf.newaxis, -1]", (2, 3), lambda a: a[tf.newaxis, :, tf.newaxis, -1]),
    ("[-1]", (4, 2), lambda a: a[-1]),
    ("[:, 5:1]", (3, 4), lambda a: a[:, 5:1]),
    ("[3:100:3]", (8,), lambda a: a[3:100:3]),
    ("[-100:2, ::-3]", (3, 7), lambda a: a[-100:2, ::-3]),
    ("[..., None]", (2, 3), lambda a: a[..., tf.newaxis]),
    ("[1:1]", (3,), lambda a: a[1:1]),
    ("size-0 [:, 1]", (0, 3), lambda a: a[:, 1]),
]


def slice_cases():
    out = []
    for label, shape, fn in STRIDED:
        out.append(_c(f"StridedSlice {label}", fn, values("f32", shape)))
    out += _per_dtype("StridedSlice", lambda dt: [_c(f"StridedSlice[{dt}]", lambda a: a[::-1, 1], values(dt, (3, 2)))])
    grad_specs = [((5, 4), [1, 0], [4, 4], [2, 1], 0, 0, 0), ((5,), [-1], [0], [-2], 0, 0, 0),
                  ((3, 4), [1, 0], [2, 4], [1, 1], 0, 2, 1), ((2, 3), [0, 5], [2, 1], [1, 1], 0, 0, 0)]
    for dims, b, e, s, bm, em, sm in grad_specs:
        spec_fwd = tf.function(lambda a, b=b, e=e, s=s, bm=bm, em=em, sm=sm: tf.raw_ops.StridedSlice(
            input=a, begin=b, end=e, strides=s, begin_mask=bm, end_mask=em, shrink_axis_mask=sm), autograph=False)
        dy_shape = spec_fwd.get_concrete_function(tf.TensorSpec(dims)).outputs[0].shape
        out.append(_c(f"StridedSliceGrad {dims} {b}:{e}:{s}", lambda dy, d=dims, b=b, e=e, s=s, bm=bm, em=em, sm=sm:
                      tf.raw_ops.StridedSliceGrad(shape=d, begin=b, end=e, strides=s, dy=dy, begin_mask=bm,
                                                  end_mask=em, shrink_axis_mask=sm), values("f32", tuple(dy_shape))))
    out += _per_dtype("Slice", lambda dt: [_c(f"Slice[{dt}]", lambda a: tf.slice(a, [1, 0], [1, -1]),
                                              values(dt, (3, 2)))])
    out += [_c("Slice full", lambda a: tf.slice(a, [0, 0], [-1, -1]), values("f32", (3, 2))),
            _c("Slice empty", lambda a: tf.slice(a, [1, 1], [0, 1]), values("f32", (3, 2)))]
    return out


def gather_cases():
    idx = np.array([[2, 0], [1, 1]], np.int32)
    out = []
    out += _per_dtype("GatherV2", lambda dt: [_c(f"GatherV2[{dt}]", lambda p, i: tf.gather(p, i, axis=1),
                                                values(dt, (2, 3, 2)), idx)], among=ALL)
    out += [_c("GatherV2 axis -1 i64", lambda p, i: tf.gather(p, i, axis=-1), values("f32", (2, 3)),
               np.array([2, 2, 0], np.int64)),
            _c("GatherV2 scalar index", lambda p, i: tf.gather(p, i), values("f32", (4, 2)), np.array(3, np.int32)),
            _c("GatherV2 batch_dims", lambda p, i: tf.gather(p, i, axis=2, batch_dims=1), values("f32", (2, 3, 4)),
               np.array([[3, 0], [1, 2]], np.int32)),
            _c("GatherV2 size-0", lambda p, i: tf.gather(p, i), values("f32", (3, 2)), np.zeros((0,), np.int32)),
            _c("GatherNd", lambda p, i: tf.gather_nd(p, i), values("f32", (3, 4, 2)),
               np.array([[0, 1], [2, 3], [1, 0]], np.int32)),
            _c("GatherNd full", lambda p, i: tf.gather_nd(p, i), values("i32", (3, 4)),
               np.array([[[0, 1]], [[2, 3]]], np.int64)),
            _c("ScatterNd dup", lambda i, u: tf.scatter_nd(i, u, [4, 2]), np.array([[1], [3], [1]], np.int32),
               values("f32", (3, 2))),
            _c("ScatterNd elems", lambda i, u: tf.scatter_nd(i, u, [3, 3]), np.array([[0, 1], [2, 2]], np.int32),
               values("i32", (2,)))]
    for op in ("TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub", "TensorScatterMax", "TensorScatterMin"):
        out.append(_c(op, raw(op), values("f32", (4, 2)), np.array([[2], [0]], np.int32), values("f32", (2, 2), seed=1)))
    out += _per_dtype("OneHot", lambda dt: [
        _c(f"OneHot[{dt}]", lambda i, on, off: tf.one_hot(i, 4, on, off), np.array([0, 3, -1, 5], np.int32),
           values(dt, (), seed=1), values(dt, (), seed=2))], among=ALL)
    out += [_c("OneHot axis 0", lambda i: tf.one_hot(i, 3, axis=0), np.array([[0, 2], [1, 1]], np.int64))]
    return out


BATCHES = {
    "identity-const": identity_cases, "reshape-transpose-squeeze": reshape_cases,
    "concat-pack-split": concat_split_cases, "tile-broadcast-fill": broadcast_cases,
    "range-shape-metadata": metadata_cases, "pad-reverse": pad_reverse_cases, "slices": slice_cases,
    "gather-scatter-onehot": gather_cases,
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch(name):
    run_batch(BATCHES[name]())


def test_compile_time_constant_from_argument_specialises():
    """An _Arg feeding Reshape's shape becomes a constant input: no parameter, value baked in."""
    from tfxla_cluster.tf2hlo import lower_function

    f = tf.function(lambda x, s: tf.reshape(x, s), autograph=False)
    x, s = values("f32", (2, 3)), np.array([3, 2], np.int32)
    lc = lower_function(f.get_concrete_function(tf.TensorSpec([2, 3]), tf.TensorSpec([2], tf.int32)), x, s)
    assert [i.kind for i in lc.inputs] == ["parameter", "constant"]
    assert lc.inputs[1].value.tolist() == [3, 2]
    assert lc.module.entry.num_parameters == 1
    np.testing.assert_array_equal(lc.run(x, s)[0], x.reshape(3, 2))


def test_non_constant_shape_input_is_an_error():
    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.graph import Graph
    from tfxla_cluster.graph.loader import graph_def_from_concrete
    from tfxla_cluster.tf2hlo import lower_cluster

    f = tf.function(lambda x, s: tf.reshape(x, s), autograph=False)
    g = Graph(graph_def_from_concrete(f.get_concrete_function(tf.TensorSpec([2, 3]), tf.TensorSpec([2], tf.int32))))
    with pytest.raises(InvalidArgumentError, match="must be a compile-time constant"):
        lower_cluster(g, [n.name for n in g.op_nodes()])
