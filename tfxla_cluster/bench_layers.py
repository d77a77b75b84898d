"""Per-layer benchmark: convolution and GEMM layer shapes of real models, in GFLOP/s.

Stage: a measurement tool over the whole pipeline (``tfxla-cluster bench --layers``).

Each row is one op at one shape taken from a model (ResNet50, MobileNetV2, EfficientNetB0 and InceptionV3 at
their ImageNet sizes, batch 1; the zoo's small 32×32 batch-2 versions; BERT-base at sequence 128; an MLP;
square GEMMs): ``Conv2D``, ``DepthwiseConv2dNative`` and their input/filter backprops, ``MatMul`` (with
transposes), ``BatchMatMulV2``, and ``MaxPool`` / ``AvgPool`` with their gradients (a pooling row counts one
flop per window element). For each, the steady-state time of TF graph mode (``tf.function``, this
process's oneDNN mode), TF's XLA (``jit_compile=True``, whose CPU dots and convolutions call Eigen) and
ours (``tfxla_cluster.function(jit_compile=True)``), and numpy's ``matmul`` (OpenBLAS sgemm, the faster of
all cores and one core, see ``_machine_sgemm``) on the GEMM of the same M·N·K (the im2col GEMM for a
convolution; no entry for depthwise ones, which are not GEMMs), timed on its own after the others, with
ours as a percentage of it (the issue's GEMM target: ≥ 85%). Times are medians over rounds that call every variant in turn
(an untimed call, then a timed one), so load changes hit all alike; each rate counts 2 flops per
multiply-add (the JSON also has each variant's fastest round, ``*_best_gflops``: on a busy machine the
median mostly measures the load). Ours is checked against TF graph mode every run.

    tfxla-cluster bench --layers                     # every layer
    tfxla-cluster bench --layers --only resnet50,dw  # layers whose label contains a word

"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class Layer:
    """One op at one shape. ``kind``: conv, conv_bi, conv_bf (Conv2D and its input/filter backprops),
    conv_br (Conv2D + bias + Relu), conv_bnr (Conv2D + batch-norm scale/shift + residual add + Relu),
    dw, dw_bi, dw_bf (depthwise), dw_br (depthwise + batch-norm scale/shift + Relu6), matmul, bmm, maxpool,
    avgpool, maxpool_grad, avgpool_grad. ``x``: the input shape (NHWC) or [.., M, K] for dots;
    ``w``: the filter (HWIO; depthwise HWC1; pooling: the window, HW11) or [.., K, N]."""

    model: str
    name: str
    kind: str
    x: tuple[int, ...]
    w: tuple[int, ...]
    stride: int = 1
    padding: str = "SAME"
    dilation: int = 1
    ta: bool = False
    tb: bool = False
    quick: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.model}/{self.name}"


def _conv(model, name, hw, cin, cout, k, stride=1, kind="conv", batch=1, padding="SAME", dilation=1,
          quick=False, kw=None) -> Layer:
    kh, kw = (k, k) if kw is None else (k, kw)
    return Layer(model, name, kind, (batch, hw, hw, cin), (kh, kw, cin, cout), stride, padding, dilation, quick=quick)


def _dw(model, name, hw, c, k, stride=1, kind="dw", batch=1, quick=False) -> Layer:
    return Layer(model, name, kind, (batch, hw, hw, c), (k, k, c, 1), stride, quick=quick)


def _pool(model, name, hw, c, k, stride, kind, padding="SAME", batch=1) -> Layer:
    return Layer(model, name, kind, (batch, hw, hw, c), (k, k, 1, 1), stride, padding)


def _mm(model, name, m, k, n, ta=False, tb=False, batch=(), quick=False) -> Layer:
    x = batch + ((k, m) if ta else (m, k))
    w = batch + ((n, k) if tb else (k, n))
    return Layer(model, name, "bmm" if batch else "matmul", x, w, ta=ta, tb=tb, quick=quick)


LAYERS: list[Layer] = [
    _mm("square", "512", 512, 512, 512, quick=True),
    _mm("square", "1024", 1024, 1024, 1024),
    _mm("square", "2048", 2048, 2048, 2048),
    _mm("mlp", "dense 256x512x512", 256, 512, 512, quick=True),
    _mm("mlp", "dense_grad_w (x^T dy)", 512, 256, 512, ta=True),
    _mm("mlp", "dense_grad_x (dy w^T)", 256, 512, 512, tb=True),
    _mm("bert", "qkv 512x768x768", 512, 768, 768),
    _mm("bert", "ffn1 512x768x3072", 512, 768, 3072),
    _mm("bert", "ffn2 512x3072x768", 512, 3072, 768),
    _mm("bert", "scores q.k^T [48]", 128, 64, 128, tb=True, batch=(48,)),
    _mm("bert", "probs.v [48]", 128, 128, 64, batch=(48,)),
    _conv("resnet50", "conv1 7x7/2", 224, 3, 64, 7, 2),
    _conv("resnet50", "res2 1x1 64>256", 56, 64, 256, 1, quick=True),
    _conv("resnet50", "res2 1x1 256>64", 56, 256, 64, 1),
    _conv("resnet50", "res2 3x3 64", 56, 64, 64, 3, quick=True),
    _conv("resnet50", "res3 1x1/2 256>128", 56, 256, 128, 1, 2),
    _conv("resnet50", "res3 3x3 128", 28, 128, 128, 3),
    _conv("resnet50", "res4 3x3 256", 14, 256, 256, 3),
    _conv("resnet50", "res4 1x1 1024>256", 14, 1024, 256, 1),
    _conv("resnet50", "res5 3x3 512", 7, 512, 512, 3),
    _conv("resnet50", "res5 1x1 512>2048", 7, 512, 2048, 1),
    _conv("resnet50", "res2 3x3 64 +bias+relu", 56, 64, 64, 3, kind="conv_br", quick=True),
    _conv("resnet50", "res2 1x1 64>256 +bn+res+relu", 56, 64, 256, 1, kind="conv_bnr"),
    _conv("resnet50", "res4 3x3 256 +bn+res+relu", 14, 256, 256, 3, kind="conv_bnr"),
    _conv("resnet50", "res2 3x3 64 grad_x", 56, 64, 64, 3, kind="conv_bi"),
    _conv("resnet50", "res2 3x3 64 grad_w", 56, 64, 64, 3, kind="conv_bf"),
    _conv("resnet50", "res4 3x3 256 grad_x", 14, 256, 256, 3, kind="conv_bi"),
    _conv("resnet50", "res4 3x3 256 grad_w", 14, 256, 256, 3, kind="conv_bf"),
    _conv("resnet50", "res3 1x1/2 grad_x", 56, 256, 128, 1, 2, kind="conv_bi"),
    _conv("resnet50", "res5 1x1 512>2048 grad_w", 7, 512, 2048, 1, kind="conv_bf"),
    _conv("resnet50@32", "res4 3x3 256 b2", 2, 256, 256, 3, batch=2),
    _conv("resnet50@32", "res5 3x3 512 b2", 1, 512, 512, 3, batch=2),
    _conv("resnet50@32", "res2 1x1 64>256 b2", 8, 64, 256, 1, batch=2),
    # The zoo's training steps (batch 2, 32×32): their backprops at the last stages' 2×2 and 1×1 images
    # (one useful tap; the strided 1×1 input backprop by phase), weight-bound.
    _conv("resnet50@32", "res5 3x3 512 b2 grad_x", 1, 512, 512, 3, kind="conv_bi", batch=2),
    _conv("resnet50@32", "res5 3x3 512 b2 grad_w", 1, 512, 512, 3, kind="conv_bf", batch=2),
    _conv("resnet50@32", "res5 1x1/2 1024>2048 b2 grad_x", 2, 1024, 2048, 1, 2, kind="conv_bi", batch=2,
          padding="VALID"),
    _conv("resnet50@32", "res5 1x1/2 1024>2048 b2 grad_w", 2, 1024, 2048, 1, 2, kind="conv_bf", batch=2,
          padding="VALID"),
    _conv("resnet50@32", "res4 3x3 256 b2 grad_x", 2, 256, 256, 3, kind="conv_bi", batch=2),
    _conv("resnet50@32", "res4 3x3 256 b2 grad_w", 2, 256, 256, 3, kind="conv_bf", batch=2),
    _conv("resnet50@32", "res2 3x3 64 b2 grad_w", 8, 64, 64, 3, kind="conv_bf", batch=2),
    _conv("densenet121@32", "block4 3x3 128>32 b2", 1, 128, 32, 3, batch=2),
    _conv("densenet121@32", "block4 3x3 128>32 b2 grad_x", 1, 128, 32, 3, kind="conv_bi", batch=2),
    _conv("densenet121@32", "block3 1x1 1024>128 b2 grad_w", 2, 1024, 128, 1, kind="conv_bf", batch=2),
    _conv("mobilenetv2", "expand 1x1 24>144", 56, 24, 144, 1),
    _conv("mobilenetv2", "project 1x1 144>24", 56, 144, 24, 1),
    _conv("mobilenetv2", "project 1x1 960>320", 7, 960, 320, 1),
    _dw("mobilenetv2", "dw 3x3 32", 112, 32, 3, quick=True),
    _dw("mobilenetv2", "dw 3x3/2 96", 112, 96, 3, 2),
    _dw("mobilenetv2", "dw 3x3 144", 56, 144, 3),
    _dw("mobilenetv2", "dw 3x3 384", 14, 384, 3),
    _dw("mobilenetv2", "dw 3x3 960", 7, 960, 3),
    _dw("mobilenetv2", "dw 3x3 144 +bn+relu6", 56, 144, 3, kind="dw_br"),
    _dw("mobilenetv2", "dw 3x3 144 grad_x", 56, 144, 3, kind="dw_bi"),
    _dw("mobilenetv2", "dw 3x3 144 grad_w", 56, 144, 3, kind="dw_bf"),
    _dw("mobilenetv2@32", "dw 3x3 32 b2", 16, 32, 3, batch=2),
    _dw("efficientnetb0", "dw 5x5 240", 28, 240, 5),
    _dw("efficientnetb0", "dw 5x5/2 144", 56, 144, 5, 2),
    _dw("efficientnetb0", "dw 5x5 1152", 7, 1152, 5),
    _conv("efficientnetb0", "project 1x1 480>80", 14, 480, 80, 1),
    _conv("inceptionv3", "3x3 64>96", 35, 64, 96, 3),
    _conv("inceptionv3", "1x7 128>128", 17, 128, 128, 1, kw=7),
    _conv("inceptionv3", "7x1 128>192", 17, 128, 192, 7, kw=1),
    _conv("inceptionv3", "3x3/2 288>384 valid", 35, 288, 384, 3, 2, padding="VALID"),
    _conv("inceptionv3", "1x1 2048>320", 8, 2048, 320, 1),
    _conv("dilated", "3x3 d2 128", 28, 128, 128, 3, dilation=2),
    _pool("resnet50", "maxpool 3x3/2 64", 112, 64, 3, 2, "maxpool"),
    _pool("resnet50", "maxpool 3x3/2 64 grad_x", 112, 64, 3, 2, "maxpool_grad"),
    _pool("inceptionv3", "maxpool 3x3/2 288 valid", 35, 288, 3, 2, "maxpool", padding="VALID"),
    _pool("inceptionv3", "maxpool 3x3/2 288 valid grad_x", 35, 288, 3, 2, "maxpool_grad", padding="VALID"),
    _pool("inceptionv3", "avgpool 3x3 192", 35, 192, 3, 1, "avgpool"),
    _pool("inceptionv3", "avgpool 3x3 192 grad_x", 35, 192, 3, 1, "avgpool_grad"),
]


def _out_hw(layer: Layer) -> tuple[int, int]:
    _, h, w, _ = layer.x
    kh, kw = layer.w[0], layer.w[1]
    if layer.padding == "SAME":
        return -(-h // layer.stride), -(-w // layer.stride)
    ekh, ekw = (kh - 1) * layer.dilation + 1, (kw - 1) * layer.dilation + 1
    return (h - ekh) // layer.stride + 1, (w - ekw) // layer.stride + 1


def gemm_dims(layer: Layer) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of the GEMM this layer is (a convolution's im2col GEMM), or None (depthwise)."""
    if layer.kind in ("matmul", "bmm"):
        batch = math.prod(layer.x[:-2])
        m = layer.x[-1] if layer.ta else layer.x[-2]
        k = layer.x[-2] if layer.ta else layer.x[-1]
        n = layer.w[-2] if layer.tb else layer.w[-1]
        return batch, m, n, k
    if layer.kind.startswith("conv"):
        oh, ow = _out_hw(layer)
        kh, kw, cin, cout = layer.w
        return 1, layer.x[0] * oh * ow, cout, kh * kw * cin
    return None


def flops(layer: Layer) -> int:
    """2 per multiply-add (1 per compare or add of a pooling window)."""
    d = gemm_dims(layer)
    if d is not None:
        return 2 * math.prod(d)
    oh, ow = _out_hw(layer)
    if "pool" in layer.kind:
        return layer.x[0] * oh * ow * layer.x[3] * layer.w[0] * layer.w[1]
    kh, kw, c, _ = layer.w
    return 2 * layer.x[0] * oh * ow * c * kh * kw


def make(layer: Layer, tf) -> tuple[Callable, list[np.ndarray]]:
    """The TF function of a layer and its inputs."""
    rng = np.random.default_rng(0)
    rand = lambda s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    s, pad, dil = layer.stride, layer.padding, layer.dilation
    strides, dils = [1, s, s, 1], [1, dil, dil, 1]
    oh, ow = _out_hw(layer) if layer.kind not in ("matmul", "bmm") else (0, 0)
    if layer.kind in ("matmul", "bmm"):
        op = tf.linalg.matmul
        return (lambda a, b: op(a, b, transpose_a=layer.ta, transpose_b=layer.tb)), [rand(layer.x), rand(layer.w)]
    n, cin = layer.x[0], layer.x[3]
    raw = tf.raw_ops
    if "pool" in layer.kind:
        ksize = [1, layer.w[0], layer.w[1], 1]
        if layer.kind.startswith("max"):
            fwd = lambda x: raw.MaxPool(input=x, ksize=ksize, strides=strides, padding=pad)  # noqa: E731
        else:
            fwd = lambda x: raw.AvgPool(value=x, ksize=ksize, strides=strides, padding=pad)  # noqa: E731
        if layer.kind in ("maxpool", "avgpool"):
            return fwd, [rand(layer.x)]
        dy = rand((n, oh, ow, cin))
        if layer.kind == "maxpool_grad":
            return (lambda x, g: raw.MaxPoolGrad(orig_input=x, orig_output=fwd(x), grad=g, ksize=ksize,
                                                 strides=strides, padding=pad)), [rand(layer.x), dy]
        return (lambda g: raw.AvgPoolGrad(orig_input_shape=list(layer.x), grad=g, ksize=ksize, strides=strides,
                                          padding=pad)), [dy]
    cout = layer.w[3] if layer.kind.startswith("conv") else cin
    dy = rand((n, oh, ow, cout))
    if layer.kind == "conv":
        return (lambda x, k: tf.nn.conv2d(x, k, strides, pad, dilations=dils)), [rand(layer.x), rand(layer.w)]
    if layer.kind in ("conv_br", "conv_bnr"):
        cout = layer.w[3]
        conv = lambda x, k: tf.nn.conv2d(x, k, strides, pad, dilations=dils)  # noqa: E731
        if layer.kind == "conv_br":
            return (lambda x, k, b: tf.nn.relu(conv(x, k) + b)), [rand(layer.x), rand(layer.w), rand((cout,))]
        return (lambda x, k, s, b, r: tf.nn.relu(conv(x, k) * s + b + r)), \
            [rand(layer.x), rand(layer.w), rand((cout,)), rand((cout,)), rand((n, oh, ow, cout))]
    if layer.kind == "dw_br":
        return (lambda x, k, s, b: tf.nn.relu6(raw.DepthwiseConv2dNative(
            input=x, filter=k, strides=strides, padding=pad, dilations=dils) * s + b)), \
            [rand(layer.x), rand(layer.w), rand((cin,)), rand((cin,))]
    if layer.kind == "conv_bi":
        return (lambda k, g: raw.Conv2DBackpropInput(input_sizes=list(layer.x), filter=k, out_backprop=g,
                                                     strides=strides, padding=pad, dilations=dils)), [rand(layer.w), dy]
    if layer.kind == "conv_bf":
        return (lambda x, g: raw.Conv2DBackpropFilter(input=x, filter_sizes=list(layer.w), out_backprop=g,
                                                      strides=strides, padding=pad, dilations=dils)), \
            [rand(layer.x), dy]
    if layer.kind == "dw":
        return (lambda x, k: raw.DepthwiseConv2dNative(input=x, filter=k, strides=strides, padding=pad,
                                                       dilations=dils)), [rand(layer.x), rand(layer.w)]
    if layer.kind == "dw_bi":
        return (lambda k, g: raw.DepthwiseConv2dNativeBackpropInput(
            input_sizes=list(layer.x), filter=k, out_backprop=g, strides=strides, padding=pad,
            dilations=dils)), [rand(layer.w), dy]
    if layer.kind == "dw_bf":
        return (lambda x, g: raw.DepthwiseConv2dNativeBackpropFilter(
            input=x, filter_sizes=list(layer.w), out_backprop=g, strides=strides, padding=pad,
            dilations=dils)), [rand(layer.x), dy]
    raise ValueError(f"unknown layer kind {layer.kind}")


def _interleaved(fns: dict[str, Callable[[], Any]], min_rounds: int, min_seconds: float,
                 best: dict[str, float] | None = None) -> dict[str, float]:
    """Median seconds per variant over rounds that run each variant once, in turn (``best``: gets the
    fastest round of each, which a busy machine disturbs least)."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    start = time.perf_counter()
    rounds = 0
    while rounds < min_rounds or (time.perf_counter() - start < min_seconds and rounds < 200):
        for k, fn in fns.items():
            fn()    # untimed: the previous variant's cache footprint and spinning threads fade first
            t0 = time.perf_counter()
            out = fn()
            getattr(out, "numpy", lambda: None)()
            samples[k].append(time.perf_counter() - t0)
        rounds += 1
    if best is not None:
        best.update({k: min(v) for k, v in samples.items()})
    return {k: statistics.median(v) for k, v in samples.items()}


def _openblas_threads():
    """(get, set) of the thread count of numpy's OpenBLAS (the library our GEMM kernels call), or None."""
    import ctypes
    import glob
    import os
    base = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
    for path in sorted(glob.glob(os.path.join(base, "libscipy_openblas*.so*"))):
        lib = ctypes.CDLL(path)
        for get, put in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                         ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                         ("openblas_get_num_threads", "openblas_set_num_threads")):
            if hasattr(lib, get) and hasattr(lib, put):
                return getattr(lib, get), getattr(lib, put)
    return None


OPENBLAS_SPIN_SECONDS = 0.15   # how long OpenBLAS's idle worker spins after a threaded call (~0.1 s here)


def _machine_sgemm(call: Callable[[], Any], min_rounds: int, min_seconds: float,
                   best: dict[str, float]) -> dict[str, float]:
    """Seconds of numpy's sgemm: the faster of OpenBLAS on all its threads and on one thread (on a busy
    2-core machine OpenBLAS's threads wait for each other at every barrier and its one-thread call is
    often faster; the reference is what the machine's sgemm can do, not its worst mode). ``best`` gets
    the fastest round (key ``numpy``); the JSON keeps both modes (``numpy_threads`` of the chosen one)."""
    import os
    ctl = _openblas_threads()
    if ctl is None:
        return {"numpy": _interleaved({"numpy": call}, min_rounds, min_seconds, best)["numpy"], "numpy_threads": 0}
    get, put = ctl
    n = get()   # restored after; may already be 1 on this thread (our GEMM kernels set a thread-local 1)
    modes: dict[int, float] = {}
    bests: dict[int, float] = {}
    try:
        # One thread first: after a threaded call OpenBLAS's worker spins for ~0.1 s of CPU (measured),
        # which would take a core from the one-thread timing and from the next layer's variants.
        for threads in sorted({max(n, os.cpu_count() or 1), 1}):
            put(threads)
            got: dict[str, float] = {}
            modes[threads] = _interleaved({"numpy": call}, min_rounds, min_seconds, got)["numpy"]
            bests[threads] = got["numpy"]
    finally:
        put(n)
        time.sleep(OPENBLAS_SPIN_SECONDS)
    chosen = min(modes, key=modes.get)
    best["numpy"] = min(bests.values())
    return {"numpy": modes[chosen], "numpy_threads": chosen, **{f"numpy_{k}t": v for k, v in modes.items()}}


def select(only: str = "", quick: bool = False) -> list[Layer]:
    """Layers whose label contains one of the comma-separated words of ``only`` (all if empty);
    ``quick``: only those marked quick."""
    words = [w.strip() for w in only.split(",") if w.strip()]
    out = [la for la in LAYERS if (not quick or la.quick)]
    return [la for la in out if not words or any(w in la.label for w in words)]


def run_layers(layers: list[Layer], quick: bool = False, variants=("graph", "xla", "ours", "numpy"),
               echo: Callable[[str], None] = print) -> list[dict]:
    """Time each layer; one row (dict) per layer with seconds and GFLOP/s per variant."""
    import tensorflow as tf

    import tfxla_cluster as txc
    min_rounds, min_s = (3, 0.05) if quick else (7, 0.4)
    rows = []
    for layer in layers:
        fn, arrays = make(layer, tf)
        tensors = [tf.constant(a) for a in arrays]
        fns: dict[str, Callable[[], Any]] = {}
        if "graph" in variants:
            g = tf.function(fn)
            fns["graph"] = lambda g=g: g(*tensors)
        if "xla" in variants:
            x = tf.function(fn, jit_compile=True)
            fns["xla"] = lambda x=x: x(*tensors)
        if "ours" in variants:
            o = txc.function(fn, jit_compile=True)
            fns["ours"] = lambda o=o: o(*tensors)
        dims = gemm_dims(layer)
        ref = None
        for k, f in fns.items():   # first calls: trace, compile; and the check against TF graph mode
            out = f()
            if k == "graph":
                ref = np.asarray(out)
            elif k == "ours" and ref is not None:
                got = np.asarray(out)
                scale = float(np.max(np.abs(ref))) or 1.0
                err = float(np.max(np.abs(got - ref))) / scale
                if err > 1e-4:
                    raise AssertionError(f"{layer.label}: ours differs from TF graph mode by {err:.2e} (relative)")
        best: dict[str, float] = {}
        secs = _interleaved(fns, min_rounds, min_s, best)
        if "numpy" in variants and dims is not None:
            # Alone, not interleaved with the others: OpenBLAS's idle workers spin for a while after a
            # call, and would take a core from the next variant (and TF's and our pools' from OpenBLAS).
            b, m, n, k = dims
            a_np, b_np = np.ones((b, m, k), np.float32), np.ones((b, k, n), np.float32)
            c_np = np.empty((b, m, n), np.float32)
            secs.update(_machine_sgemm(lambda: np.matmul(a_np, b_np, out=c_np), min_rounds, min_s, best))
        fl = flops(layer)
        row = {"layer": layer.label, "kind": layer.kind, "x": list(layer.x), "w": list(layer.w),
               "stride": layer.stride, "gemm": list(dims) if dims else None, "mflop": fl / 1e6}
        for k in ("graph", "xla", "ours", "numpy"):
            row[f"{k}_ms"] = 1e3 * secs[k] if k in secs else None
            row[f"{k}_gflops"] = fl / secs[k] / 1e9 if k in secs else None
            row[f"{k}_best_gflops"] = fl / best[k] / 1e9 if k in best else None
        row["numpy_threads"] = secs.get("numpy_threads")
        row["numpy_modes_gflops"] = {k[6:]: fl / v / 1e9 for k, v in secs.items()
                                     if k.startswith("numpy_") and k.endswith("t")} or None
        row["ours_vs_sgemm"] = secs["numpy"] / secs["ours"] if "numpy" in secs and "ours" in secs else None
        best_tf = min((secs[k] for k in ("graph", "xla") if k in secs), default=None)
        row["ours_vs_best_tf"] = secs["ours"] / best_tf if best_tf and "ours" in secs else None
        rows.append(row)
        echo(format_row(row))
    return rows


def _g(v) -> str:
    return "-" if v is None else f"{v:.1f}"


HEADER = ("| layer | op | MFLOP | TF graph GFLOP/s | TF XLA GFLOP/s | ours GFLOP/s | numpy sgemm GFLOP/s "
          "| ours % of sgemm | ours ms | ours/best TF |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def format_row(r: dict) -> str:
    ratio = "-" if r["ours_vs_best_tf"] is None else f"{r['ours_vs_best_tf']:.2f}"
    ms = "-" if r["ours_ms"] is None else f"{r['ours_ms']:.3f}"
    pct = "-" if r.get("ours_vs_sgemm") is None else f"{100 * r['ours_vs_sgemm']:.0f}%"
    return (f"| {r['layer']} | {r['kind']} | {r['mflop']:.1f} | {_g(r['graph_gflops'])} | {_g(r['xla_gflops'])} | "
            f"{_g(r['ours_gflops'])} | {_g(r['numpy_gflops'])} | {pct} | {ms} | {ratio} |")


def geomean(values: list[float | None]) -> float:
    present = [v for v in values if v]
    return math.exp(sum(map(math.log, present)) / len(present)) if present else float("nan")


def run(args) -> int:
    """``bench --layers``: the table (streamed, then whole), a summary line, the JSON; 0 on success."""
    import json
    import os

    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.hostinfo import host_dict, host_summary, onednn_enabled

    layers = select(args.only, args.quick)
    if not layers:
        raise InvalidArgumentError(f"no layer matches --only {args.only!r}; layers: "
                                   + ", ".join(la.label for la in LAYERS))
    print(f"host: {host_summary()}", flush=True)
    print(HEADER, flush=True)
    rows = run_layers(layers, args.quick, echo=lambda line: print(line, flush=True))
    here = onednn_enabled()     # TF is imported by now: its own answer
    ratio = geomean([r["ours_vs_best_tf"] for r in rows])
    gemm = [r for r in rows if r.get("ours_vs_sgemm") and r["kind"] in ("matmul", "bmm")]
    gemm_note = ""
    if gemm:
        low = min(gemm, key=lambda r: r["ours_vs_sgemm"])
        gemm_note = (f"; GEMM rows: ours at {100 * geomean([r['ours_vs_sgemm'] for r in gemm]):.0f}% of numpy's "
                     f"sgemm (geomean), lowest {100 * low['ours_vs_sgemm']:.0f}% ({low['layer']})")
    print(f"\ngeomean ours / best of TF graph and TF's XLA (time): {ratio:.2f}{gemm_note}; TF graph mode with "
          f"oneDNN {'on' if here else 'off'}", flush=True)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"host": host_dict(), "tf_onednn_in_process": here, "quick": args.quick,
                       "geomean_ours_vs_best_tf": ratio, "rows": rows}, fh, indent=1)
    return 0
