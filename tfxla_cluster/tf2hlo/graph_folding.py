"""TF's graph constant folding before a cluster is lowered (tf2xla ``XlaCompiler``'s ``OptimizeGraph``).

Stage: tf2hlo, first step of :func:`tfxla_cluster.tf2hlo.lower.lower_cluster`. Before tf2xla lowers a
cluster's graph, ``XlaCompiler`` runs TF's ``GraphOptimizer`` with constant folding on
(core/common_runtime/constant_folding.cc): every node whose inputs are all constant is computed by TF's own
CPU kernel, on TF's compile thread — so with denormals flushed (FTZ/DAZ) — and the result replaces it as a
``Const``. The folded values are therefore TF's kernels' (Eigen's ``erf`` of a huge double is NaN, its packet
``xdivy`` passes a flushed denormal through, ``logf`` of a denormal is glibc's), not XLA's evaluator's. This
module does the same with the same kernels (a TF session over the foldable nodes), and the lowering binds
the values as host constants instead of lowering those nodes.

Which nodes fold (TF's ``IsConstantFoldable`` and XlaCompiler's ``cf_consider_fn``): a cluster member, not a
``Const``, with at least one input, every input a member ``Const`` or folded node and no control input; not
stateful, not control flow, not ``Shape``/``ShapeN``/``Size`` (XLA keeps those dynamic); no resource, variant
or string output (complex values are substituted too: a constant complex ``Abs`` is Eigen's hypot, inf for
(-inf, NaN); a complex division of constants is TF's kernel's, NaN for (-inf, NaN) over a finite divisor where
XLA's formula gives infinities, and its result depends on the element's place in Eigen's packets, as in TF); with oneDNN on, not an op whose kernel oneDNN replaces
(``_ONEDNN_REWRITTEN``) unless it has a plain-Eigen twin the session runs instead, the same TF kernel, which oneDNN
leaves alone (``MaxPool`` as ``MaxPoolV2``: NaNs never win and an all-NaN window is the type's lowest; an NHWC
``Conv2D`` as the generic ``Conv``: Eigen's patches and contraction, whose FMAs keep ``max·138.5 + max·(-1.25)``
at inf where XLA's evaluator, rounding each product, gives NaN; bit-identical to TF's folded values), or that
we compute as TF's plain kernel does (``_EIGEN_EMULATED``, fed to the session in place of oneDNN's kernel:
a ``DepthwiseConv2dNative``, per channel with its padding taps multiplied, in the kernel's order — no session
op runs that kernel past oneDNN, and f64's XLA form would spread a NaN over the other channels; an f32
``MatMul``/``BatchMatMul(V2)``, products rounded in Eigen's gemv and core product, an FMA chain in its
contraction's sgemm). oneDNN takes float, bfloat16 and half only: an f64 MatMul or Conv2D folds in the
session with TF's plain kernel. A
value over 10 MiB (``max_constant_size_in_bytes``) is not substituted (the node is
lowered; it may still feed folded nodes). TF evaluates every foldable node in one run: a kernel that fails
(an integer division by zero) fails the whole run, and XlaCompiler, ignoring the error, folds nothing.
"""
from __future__ import annotations

import numpy as np
from tensorflow.core.framework import types_pb2

from tfxla_cluster.graph import Graph, Node
from tfxla_cluster.graph.opdefs import ARG_OP, DEVICE_ARG_OP, DEVICE_RETVAL_OP, RETVAL_OP, base_dtype

MAX_CONSTANT_BYTES = 10 * 1024 * 1024
_NOT_CONSIDERED = frozenset({"Shape", "ShapeN", "Size"})
# Stateless random ops (and their key/counter/alg helpers, the functional Stateless* calls) are not folded:
# TF's XLA returns XLA's Philox stream for them with constant seeds, not TF's CPU kernel's (recorded against
# TF: tests/e2e's stateless_random_const_seed under jit_compile=True).
_NOT_FOLDED_PREFIXES = ("Stateless",)
# ... but StatelessIf/StatelessCase/StatelessWhile are ordinary foldable nodes to TF: with constant inputs they
# join the one GraphRunner call, which does not run their bodies, so the whole fold is abandoned (a tf.cond over
# constants is computed by XLA, its predicate's elementwise ops included: TF's f16 Elu kernel flushes a
# denormal result that XLA keeps; beside a tf.while_loop over constants, a bf16 Relu6 of a constant -denormal is
# XLA's -denormal, where TF's kernel, without the loop, gives -0).
_STATELESS_FUNCTIONAL = frozenset({"StatelessIf", "StatelessCase", "StatelessWhile"})
_NEVER = frozenset({"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "RefSwitch", "RefMerge",
                    "RefEnter", "RefExit", "RefNextIteration", "_SwitchN", "ControlTrigger", ARG_OP, RETVAL_OP,
                    DEVICE_ARG_OP, DEVICE_RETVAL_OP, "Placeholder", "PlaceholderWithDefault", "_Send", "_Recv",
                    "_HostSend", "_HostRecv", "NoOp", "Identity", "IdentityN"})
# Ops whose CPU kernel oneDNN replaces (TF's MKL graph rewrite and eager op rewrite) when TF_ENABLE_ONEDNN_OPTS
# is on: XlaCompiler's ConstantFold runs the plain (Eigen) kernels, which a session here would not, so with
# oneDNN on these are left to the HLO evaluator (XLA's semantics, Eigen's at the edges: a NaN row of a
# softmax is all NaN, oneDNN's keeps the other zeros).
_ONEDNN_REWRITTEN = frozenset({
    "Softmax", "LogSoftmax", "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Conv2D", "Conv3D",
    "DepthwiseConv2dNative", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3DBackpropInputV2",
    "Conv3DBackpropFilterV2", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter",
    "AvgPool", "AvgPool3D", "AvgPoolGrad", "MaxPool", "MaxPool3D", "MaxPoolGrad", "FusedBatchNorm",
    "FusedBatchNormV2", "FusedBatchNormV3", "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3",
    "LRN", "LRNGrad"})  # (elementwise ops and activations keep Eigen's results here: folded)
# ... for these element types only: oneDNN registers its kernels (``_Mkl<Op>``) for float, bfloat16 and half,
# so an f64 MatMul (or Conv2D, ...) runs TF's plain kernel in the session too, as XlaCompiler's fold does.
_ONEDNN_TYPES = frozenset({types_pb2.DT_FLOAT, types_pb2.DT_BFLOAT16, types_pb2.DT_HALF})
_BAD_OUTPUTS = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_STRING})


def _onednn_on() -> bool:
    from tfxla_cluster.tf_compat import mkl_enabled

    return bool(mkl_enabled())


def _onednn_rewrites(n: Node) -> bool:
    """Whether oneDNN replaces ``n``'s kernel in a session here (an op it rewrites, of a type it takes)."""
    attr = n.node_def.attr
    return n.op in _ONEDNN_REWRITTEN and ("T" not in attr or attr["T"].type in _ONEDNN_TYPES)


def _plain_kernel_missing(n: Node) -> bool:
    """Whether a node of an op oneDNN rewrites, of a type it does not take, has no plain CPU kernel either (an
    f64 ``AvgPool3D``): TF's ``IsConstantFoldable`` needs a CPU kernel, so it is lowered."""
    from tfxla_cluster.tf_compat import cpu_kernel_types

    attr = n.node_def.attr
    return "T" in attr and attr["T"].type not in cpu_kernel_types(n.op)


def _max_pool_v2_runs(n: Node) -> bool:
    """MaxPoolV2's CPU kernel is MaxPool's (SpatialMaxPool) for NHWC; EXPLICIT padding is MaxPool's alone."""
    return n.node_def.attr["data_format"].s in (b"", b"NHWC") and n.node_def.attr["padding"].s != b"EXPLICIT"


def _as_max_pool_v2(gd, nd) -> None:
    """Rewrite MaxPool ``nd`` in place as MaxPoolV2 with its ksize/strides as new Const inputs."""
    from tensorflow.core.framework import tensor_pb2

    for attr in ("ksize", "strides"):
        c = gd.node.add()
        c.name, c.op = f"{nd.name}/_fold_{attr}", "Const"
        c.attr["dtype"].type = types_pb2.DT_INT32
        value = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, int_val=list(nd.attr[attr].list.i))
        value.tensor_shape.dim.add().size = len(nd.attr[attr].list.i)
        c.attr["value"].tensor.CopyFrom(value)
        nd.input.append(c.name)
        del nd.attr[attr]
    nd.op = "MaxPoolV2"
    if "explicit_paddings" in nd.attr:
        del nd.attr["explicit_paddings"]


def _conv2d_runs(n: Node) -> bool:
    """``Conv`` computes an NHWC Conv2D with Conv2D's CPU kernel (NCHW is no CPU Conv2D: left to fail as TF's)."""
    return n.node_def.attr["data_format"].s in (b"", b"NHWC")


def _as_conv(gd, nd) -> None:
    """Rewrite Conv2D ``nd`` in place as the generic ``Conv`` (channels last; same strides, paddings, dilations)."""
    nd.op = "Conv"
    if "use_cudnn_on_gpu" in nd.attr:
        del nd.attr["use_cudnn_on_gpu"]
    nd.attr["data_format"].s = b"CHANNELS_LAST"


# oneDNN-replaced ops whose Eigen kernel the session reaches under another op: op -> (whether node ``n``
# qualifies, rewrite of its NodeDef in the session's GraphDef). oneDNN rewrites neither MaxPoolV2 nor Conv.
_EIGEN_TWIN = {"MaxPool": (_max_pool_v2_runs, _as_max_pool_v2), "Conv2D": (_conv2d_runs, _as_conv)}


_FLOAT_TYPES = frozenset({types_pb2.DT_HALF, types_pb2.DT_BFLOAT16, types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE})


def _depthwise_runs(n: Node) -> bool:
    """A DepthwiseConv2dNative that :func:`_depthwise_eigen` computes: NHWC, SAME/VALID, equal row/column
    strides (what TF's CPU kernel accepts), no dilation, a float T (its inputs constants or folded nodes)."""
    a = n.node_def.attr
    strides = list(a["strides"].list.i)
    return (a["data_format"].s in (b"", b"NHWC") and a["padding"].s in (b"SAME", b"VALID")
            and len(strides) == 4 and strides[0] == strides[3] == 1 and strides[1] == strides[2] >= 1
            and all(d == 1 for d in a["dilations"].list.i) and a["T"].type in _FLOAT_TYPES)


def _depthwise_eigen(x: np.ndarray, f: np.ndarray, stride: int, padding: str) -> np.ndarray | None:
    """TF's CPU kernel ``LaunchDepthwiseConvOp<CPUDevice, T>`` (depthwise_conv_op.cc), None where it fails.

    Each output starts at +0 and takes ``pmadd(filter, input, acc)`` over the taps in row-major order; TF's
    binary has no FMA, so f32/f64 round the product and then the sum; half and bfloat16 packets compute
    ``filter·input + acc`` in f32 (the product of two 16-bit floats is exact there) and round the sum to T
    once per tap. Padding taps are zeros in the kernel's input buffer, multiplied like the others
    (0·inf = NaN), with denormals flushed. Bit-identical to TF's plain kernel on random and special values
    (f16/bf16/f32/f64, SAME/VALID, strides 1-2, multipliers 1-3).
    """
    from tfxla_cluster.mxcsr import flushed_denormals

    if x.ndim != 4 or f.ndim != 4 or x.shape[3] != f.shape[2]:
        return None
    (n, h, w, c), (kh, kw, _, m) = x.shape, f.shape
    sizes = []
    for size, k in ((h, kh), (w, kw)):
        if padding == "VALID":  # C++'s division, truncating toward zero
            out, before = int((size - k + stride) / stride), 0
        else:
            out = -(-size // stride)
            before = max(0, (out - 1) * stride + k - size) // 2
        if out < 0:  # GetWindowedOutputSizeVerbose: "Computed output size would be negative"
            return None
        sizes.append((out, before))
    (oh, top), (ow, left) = sizes
    if min(n, oh, ow, c, m) == 0:
        return np.zeros((n, oh, ow, c * m), x.dtype)
    ph, pw = (oh - 1) * stride + kh, (ow - 1) * stride + kw
    padded = np.zeros((n, ph, pw, c), x.dtype)
    rows, cols = min(h, ph - top), min(w, pw - left)
    padded[:, top:top + rows, left:left + cols] = x[:, :rows, :cols]
    ct = np.float64 if x.dtype == np.float64 else np.float32
    acc = np.zeros((n, oh, ow, c, m), x.dtype)
    with flushed_denormals(), np.errstate(all="ignore"):
        for i in range(kh):
            for j in range(kw):
                tap = padded[:, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride, :, None]
                acc = (f[i, j].astype(ct) * tap.astype(ct) + acc.astype(ct)).astype(x.dtype)
    return acc.reshape(n, oh, ow, c * m)


def _avg_pool_runs(n: Node) -> bool:
    """An AvgPool that :func:`_avg_pool_eigen` computes: NHWC, SAME/VALID, a window and strides of 1 over the
    batch and the channels (what TF's CPU kernel accepts), a float T."""
    a = n.node_def.attr
    ksize, strides = list(a["ksize"].list.i), list(a["strides"].list.i)
    return (a["data_format"].s in (b"", b"NHWC") and a["padding"].s in (b"SAME", b"VALID")
            and len(ksize) == len(strides) == 4 and ksize[0] == ksize[3] == strides[0] == strides[3] == 1
            and min(ksize + strides) >= 1 and a["T"].type in _FLOAT_TYPES)


def _avg_pool_eigen(x: np.ndarray, ksize: list[int], strides: list[int], padding: str) -> np.ndarray | object:
    """TF's plain CPU AvgPool kernel (pooling_ops_common.h ``SpatialAvgPool``): each output starts at +0 and
    adds the in-bounds elements of its window in row-major order (padding is left out, not added), in T,
    then divides by their count in T; denormals flushed (the compile thread's FTZ/DAZ). DECLINED where the
    output would be empty or negative (TF's shape error is the lowering's to report)."""
    from tfxla_cluster.mxcsr import flushed_denormals

    if x.ndim != 4:
        return DECLINED
    n, h, w, c = x.shape
    dims = []
    for size, k, st in ((h, ksize[1], strides[1]), (w, ksize[2], strides[2])):
        if padding == "VALID":
            out, before = (size - k + st) // st, 0
        else:
            out = -(-size // st)
            before = max(0, (out - 1) * st + k - size) // 2
        if out <= 0:
            return DECLINED
        dims.append((out, before, k, st, size))
    (oh, top, kh, sh, _), (ow, left, kw, sw, _) = dims
    acc = np.zeros((n, oh, ow, c), x.dtype)
    count = np.zeros((oh, ow), x.dtype)
    rows, cols = np.arange(oh) * sh - top, np.arange(ow) * sw - left
    with flushed_denormals(), np.errstate(all="ignore"):
        for i in range(kh):
            r = rows + i
            for j in range(kw):
                q = cols + j
                valid = ((r >= 0) & (r < h))[:, None] & ((q >= 0) & (q < w))[None, :]
                tap = x[:, np.clip(r, 0, h - 1)][:, :, np.clip(q, 0, w - 1)]
                acc = np.where(valid[None, :, :, None], acc + tap, acc).astype(x.dtype)
                count = (count + valid.astype(x.dtype)).astype(x.dtype)
        return (acc / count[None, :, :, None]).astype(x.dtype)


# TF's plain MatMul/BatchMatMul CPU kernels (matmul_op_impl.h ``LaunchBatchMatMul<CPUDevice>``): a product
# of one row or one column is Eigen's gemv, any other MatMul (and a BatchMatMul of one batch, or of more whose
# x.rows·x.cols·out.cols exceeds this, with every dimension > 1) Eigen's tensor contraction, whose float
# kernel is oneDNN's sgemm; other BatchMatMuls multiply batch by batch with Eigen's core product.
_PARALLEL_MATMUL_COST = 128 * 128
# Depths up to which the orders below were measured bit for bit against TF's folded values (sgemm's
# FMAs stop being one chain in k order beyond it: a depth of 700 is blocked).
_MATMUL_MAX_DEPTH = 300
# Eigen's core product of small matrices (rows + depth + cols below this) is its coefficient-wise lazy product.
_LAZY_PRODUCT_SIZE = 20
DECLINED = object()   # an emulation's answer where it does not know TF's order: the node is not folded


def _rounded_chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_k a[..., k]·b[k, ...] from +0 in k order, each product rounded, then the sum (TF's FMA-less Eigen)."""
    acc = np.zeros(np.broadcast_shapes(a.shape[:-1], b.shape[:-2] + (1,)) + b.shape[-1:], a.dtype)
    for k in range(a.shape[-1]):
        acc = acc + a[..., :, k, None] * b[..., k, None, :]
    return acc


def _fma_chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The same sum as fused multiply-adds (oneDNN's sgemm): the f32 product is exact in f64, and the f64
    sum rounded to f32 is the FMA's result but for double rounding (at most an ulp, far from overflow)."""
    acc = np.zeros(np.broadcast_shapes(a.shape[:-1], b.shape[:-2] + (1,)) + b.shape[-1:], a.dtype)
    for k in range(a.shape[-1]):
        acc = (a[..., :, k, None].astype(np.float64) * b[..., k, None, :] + acc).astype(a.dtype)
    return acc


def _row_gemv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eigen's row-major matrix × vector (``general_matrix_vector_product<RowMajor>``): per row, packets of 8
    products added lane by lane, the lanes reduced ``((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))``, then the
    remaining products added in k order."""
    k = a.shape[-1]
    full = k // 8 * 8
    x = b[..., :, 0]
    lanes = np.zeros(np.broadcast_shapes(a.shape[:-1], x.shape[:-1] + (1,)) + (8,), a.dtype)
    for j in range(0, full, 8):
        lanes = lanes + a[..., j:j + 8] * x[..., None, j:j + 8]
    v = [lanes[..., i] for i in range(8)]
    acc = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]))
    for j in range(full, k):
        acc = acc + a[..., j] * x[..., None, j]
    return acc[..., None]


def _gebp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eigen's core GEMM kernel (gebp, floats in packets of 8, FMA-less) on the transposed product, so its rows
    are the result's columns: rows in panels of 16 and the result's rows past the last multiple of 4 add in k
    order; in a block of 4 result rows, the remaining column panels of 4 add even and odd k into two
    accumulators over the first multiple of 8 (then ``C + D``, then the rest in order), and the last single
    columns k mod 4 into four over the first multiple of 4 (``(C0 + C1) + (C2 + C3)``, then the rest)."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    prods = [a[..., :, j, None] * b[..., j, None, :] for j in range(k)]
    zero = np.zeros_like(prods[0]) if prods else np.zeros(np.broadcast_shapes(a.shape[:-1], (1, n)), a.dtype)

    def chain(ks, acc=zero):
        for j in ks:
            acc = acc + prods[j]
        return acc
    s8, s4 = k // 8 * 8, k // 4 * 4
    two = chain(range(s8, k), chain(range(0, s8, 2)) + chain(range(1, s8, 2)))
    c = [chain(range(r, s4, 4)) for r in range(4)]
    four = chain(range(s4, k), (c[0] + c[1]) + (c[2] + c[3]))
    n16 = n // 16 * 16
    n4 = n16 + (n - n16) // 4 * 4
    rows, cols = np.arange(m)[:, None], np.arange(n)[None, :]
    return np.where((rows >= m // 4 * 4) | (cols < n16), chain(range(k)), np.where(cols < n4, two, four))


def _matmul_eigen(x: np.ndarray, y: np.ndarray, adj_x: bool, adj_y: bool, batched: bool):
    """TF's plain CPU MatMul (``batched=False``) or BatchMatMul(V2) kernel on f32 constants up to a depth of
    :data:`_MATMUL_MAX_DEPTH` (:data:`DECLINED` above): Eigen's gemv and core lazy product round each product
    and add in k order; the contraction's sgemm is one FMA chain in k order. Measured bit for bit against
    TF's folded values (jit_compile=True over constants) on finite, huge and infinite elements; a larger
    core product (20 or more rows + depth + columns) by one column is Eigen's row-major gemv
    (:func:`_row_gemv`), otherwise its gebp (:func:`_gebp`, but for some last single columns)."""
    from tfxla_cluster.mxcsr import flushed_denormals

    if x.dtype != np.float32 or y.dtype != np.float32 or x.ndim < 2 or y.ndim < 2:
        return DECLINED
    a, b = (np.swapaxes(x, -1, -2) if adj_x else x), (np.swapaxes(y, -1, -2) if adj_y else y)
    if a.shape[-1] != b.shape[-2]:
        return DECLINED   # TF's shape error is the lowering's to report
    (m, k), n = a.shape[-2:], b.shape[-1]
    try:
        batch = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), dtype=np.int64))
    except ValueError:
        return DECLINED
    contraction = not batched or (min(x.shape[-2], x.shape[-1], n) > 1
                                  and (batch == 1 or x.shape[-2] * x.shape[-1] * n > _PARALLEL_MATMUL_COST))
    if k > _MATMUL_MAX_DEPTH:
        return DECLINED
    # Larger core products are Eigen's gebp (:func:`_gebp`, measured: 45 of 48 special-value cases bit-equal,
    # the rest differing where a last single column's overflowing partial sums meet) or, by one column, its
    # row-major gemv (24 of 24).
    if contraction and min(m, n) > 1:
        chain = _fma_chain
    elif contraction or m + k + n < _LAZY_PRODUCT_SIZE or m == 1:
        chain = _rounded_chain
    elif n == 1:
        chain = _rounded_chain if adj_x else _row_gemv
    else:
        chain = _gebp
    with flushed_denormals(), np.errstate(all="ignore"):
        return chain(a, b)


def _matmul_runs(n: Node) -> bool:
    """A MatMul/BatchMatMul(V2) :func:`_matmul_eigen` may compute: f32."""
    return n.node_def.attr["T"].type == types_pb2.DT_FLOAT


def _flag(nd, name: str) -> bool:
    return bool(nd.attr[name].b) if name in nd.attr else False


# oneDNN-replaced ops no session kernel computes as XlaCompiler's plain one does: op -> (whether node ``n``
# qualifies, its value from its inputs' values and its NodeDef: None where TF's kernel fails, DECLINED where
# the emulation does not know TF's order). DepthwiseConv2dNative's twin is ours: the generic ``Conv`` has no
# grouped CPU kernel, and oneDNN's depthwise (f32/bf16 here; f16 on CPUs with AVX512-FP16) sums in another
# order. AvgPool: no session op runs TF's plain kernel past oneDNN, and unfolded it left a folded depthwise
# convolution after it unfolded too (fuzz seed 317001358: TF multiplies that convolution's padding taps, XLA's
# evaluator skips them). MatMul/BatchMatMul: oneDNN's kernels sum in FMA chains where TF's gemv rounds each
# product (``max·-161.8 + -1.23·-max`` is NaN folded, -inf in oneDNN; seed 78000830).
_EIGEN_EMULATED = {
    "AvgPool": (_avg_pool_runs, lambda vals, nd: _avg_pool_eigen(vals[0], list(nd.attr["ksize"].list.i),
                                                               list(nd.attr["strides"].list.i),
                                                               nd.attr["padding"].s.decode())),
    "DepthwiseConv2dNative": (
        _depthwise_runs, lambda vals, nd: _depthwise_eigen(vals[0], vals[1], nd.attr["strides"].list.i[1],
                                                           nd.attr["padding"].s.decode())),
    "MatMul": (_matmul_runs, lambda vals, nd: _matmul_eigen(
        vals[0], vals[1], _flag(nd, "transpose_a"), _flag(nd, "transpose_b"), False)),
    **{op: (_matmul_runs, lambda vals, nd: _matmul_eigen(vals[0], vals[1], _flag(nd, "adj_x"),
                                                         _flag(nd, "adj_y"), True))
       for op in ("BatchMatMul", "BatchMatMulV2")}}


def _qualifies(n: Node) -> bool:
    """Whether a oneDNN-replaced node ``n`` still folds as TF's plain kernel (a twin op or our emulation)."""
    table = _EIGEN_TWIN.get(n.op) or _EIGEN_EMULATED.get(n.op)
    return table is not None and table[0](n)


def foldable_nodes(graph: Graph, order: list[Node], members: set[str],
                   known: dict[str, np.ndarray] | None = None) -> list[Node]:
    """The members TF's constant folding computes, in ``order`` (topological); ``known`` nodes (a function's
    _Args that XlaCompiler made Const nodes) count as constants."""
    onednn = _onednn_on()
    constant: set[str] = set(known or ())
    out: list[Node] = []
    for n in order:
        ins = [e for e in n.in_edges if not e.src.is_source]
        if n.name in constant or any(e.is_control for e in ins):
            continue
        if n.op == "Const":
            if base_dtype(n.outputs[0].dtype) not in _BAD_OUTPUTS:
                constant.add(n.name)
            continue
        if (not ins or not n.outputs or n.op in _NEVER or n.op in _NOT_CONSIDERED
                or onednn and _onednn_rewrites(n) and not _qualifies(n)
                or onednn and n.op in _ONEDNN_REWRITTEN and _plain_kernel_missing(n)
                or (n.op.startswith(_NOT_FOLDED_PREFIXES) and n.op not in _STATELESS_FUNCTIONAL)
                or n.op_def is None
                or n.op_def.is_stateful or n.op.startswith("Xla")
                or any(base_dtype(o.dtype) in _BAD_OUTPUTS for o in n.outputs)):
            continue
        if all(e.src.name in constant and e.src.name in members for e in ins) and _cpu_kernel(n):
            constant.add(n.name)
            out.append(n)
    return out


def _cpu_kernel(n: Node) -> bool:
    """TF folds only nodes with a CPU kernel (an f16 ``Rint`` has none: left to XLA, and the other constants
    still fold; running it in the one session call would fail the whole fold)."""
    from tfxla_cluster.tf_compat import has_cpu_kernel

    return has_cpu_kernel(n.node_def)


def fold(graph: Graph, order: list[Node], members: set[str],
         known: dict[str, np.ndarray] | None = None) -> dict[tuple[str, int], np.ndarray]:
    """(node, output) → value, computed by TF's CPU kernels, for every foldable member's outputs that TF would
    substitute (at most 10 MiB each). ``known``: node name → value of nodes that are constants to TF though
    not ``Const`` here (a branch's _Arg given a compile-time constant)."""
    known = known or {}
    nodes = foldable_nodes(graph, order, members, known)
    if not nodes:
        return {}
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    from tfxla_cluster.mxcsr import kept_denormals

    needed = {n.name: n for n in nodes}
    for n in nodes:
        for e in n.in_edges:
            if not e.is_control and not e.src.is_source:
                needed.setdefault(e.src.name, e.src)
    onednn = _onednn_on()
    emulated = [n for n in nodes if onednn and _onednn_rewrites(n) and n.op in _EIGEN_EMULATED
                and _EIGEN_EMULATED[n.op][0](n)]
    gd = graph_pb2.GraphDef()
    gd.versions.producer = tf.version.GRAPH_DEF_VERSION
    defs = {}
    for name, n in needed.items():
        nd = defs[name] = gd.node.add()
        if name in known:
            nd.name, nd.op = name, "Const"
            value = np.asarray(known[name])
            nd.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
            # make_tensor_proto reads a scalar into ``float_val`` through a Python float: a conversion DAZ (set
            # on our launch threads, as on TF's) would flush; TF's Const holds the argument's bits (seed 293001828)
            with kept_denormals():
                nd.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
            continue
        nd.CopyFrom(n.node_def)
        nd.device = ""
        del nd.input[:]
        nd.input.extend(i for i in n.node_def.input if not i.startswith("^"))
        if n.op in _EIGEN_TWIN and _EIGEN_TWIN[n.op][0](n):
            _EIGEN_TWIN[n.op][1](gd, nd)
    tfg = tf.Graph()
    try:
        with tfg.as_default():
            tf.graph_util.import_graph_def(gd, name="")
    except (ValueError, TypeError, tf.errors.OpError):  # a graph TF will not import here is left to the lowering
        return {}
    config = config_pb2.ConfigProto()
    # Kernels as they are: no grappler rewrites (x * 1 → x would keep a denormal TF's kernel flushes).
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.rewrite_options.constant_folding = rewriter_config_pb2.RewriterConfig.OFF
    config.graph_options.optimizer_options.opt_level = config_pb2.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_constant_folding = False
    values: dict[tuple[str, int], np.ndarray] = {}
    with tf.compat.v1.Session(graph=tfg, config=config) as sess:
        try:
            # Emulated nodes (TF's plain kernel, which the session would not run) in topological order: their
            # inputs from the session (constants or folded nodes), their values fed to every later run.
            feeds: dict[str, np.ndarray] = {}
            declined: set[str] = set()
            for n in emulated:
                ins = [e.src for e in n.data_inputs()]
                if any(i.name in declined for i in ins):
                    declined.add(n.name)
                    continue
                args = sess.run([f"{e.src.name}:{e.src_output}" for e in n.data_inputs()], feed_dict=feeds)
                value = _EIGEN_EMULATED[n.op][1](args, defs[n.name])
                if value is None:  # TF's kernel fails: the one run fails and XlaCompiler folds nothing
                    return {}
                if value is DECLINED:
                    declined.add(n.name)
                else:
                    feeds[f"{n.name}:0"] = value
            # A declined node is lowered, with every folded node that reads it (as before this module knew it).
            for n in nodes:
                if any(e.src.name in declined for e in n.data_inputs()):
                    declined.add(n.name)
            fetches = [f"{n.name}:{i}" for n in nodes if n.name not in declined for i in range(len(n.outputs))]
            results = sess.run(fetches, feed_dict=feeds)
        except tf.errors.OpError:
            # TF's ConstantFold runs every foldable node in one GraphRunner call: one failing kernel
            # (an integer division by zero, an If whose branches it cannot run) fails the call, and
            # XlaCompiler then folds nothing — the lowering computes all of it (XLA's semantics).
            return {}
    for f, v in zip(fetches, results):
        name, slot = f.rsplit(":", 1)
        values[(name, int(slot))] = v
    return {t: np.asarray(v) for t, v in values.items()
            if np.asarray(v).nbytes <= MAX_CONSTANT_BYTES}
