"""Build the bundled sample graphs under ``graphs/`` from tf.functions, with TF's answers.

For every sample NAME this writes::

    graphs/NAME.pbtxt            concrete_fn.graph.as_graph_def() (text; includes the function library)
    graphs/NAME.json             inputs (name, dtype, shape, graph tensor), outputs, captured variables
    graphs/tf/NAME/inputs.npz    fixed inputs, keyed by input name
    graphs/tf/NAME/outputs.npz   eager results: output_0, output_1, ... (tf.nest.flatten order)
    graphs/tf/NAME/variables.npz / variables_after.npz   (variables samples) values before/after the call
    graphs/tf/NAME/hlo.txt, optimized_hlo.txt   jit_compile=True compiler IR, where it compiles
    graphs/tf/NAME/jit_error.txt   the must-compile error of calling the jit_compile=True function
    graphs/tf/NAME/hlo_error.txt   experimental_get_compiler_ir's error, where it fails
    graphs/tf/NAME/{before_,}mark_for_compilation[_annotated]_<k>.pbtxt, vlog.txt, meta.json
                                 TF's auto-clustering record (tools/tf_record.py, default flags)

Every export and every recording runs in a fresh subprocess (deterministic function names and
process-global counters), at most two at a time. Samples are deterministic: fixed seeds, fixed
variable initial values, small shapes (each pbtxt far below 1 MB).

Usage: ``python tools/make_graphs.py [NAME ...]`` (default: all samples).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tf_record  # noqa: E402
from tf_record import Sample  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "graphs"

#: name -> (builder, one-line description); tf_record looks builders up here by name.
REGISTRY: dict[str, Callable[[], Sample]] = {}
DESCRIPTIONS: dict[str, str] = {}


def sample(name: str, description: str) -> Callable[[Callable[[], Sample]], Callable[[], Sample]]:
    def register(builder: Callable[[], Sample]) -> Callable[[], Sample]:
        REGISTRY[name] = builder
        DESCRIPTIONS[name] = description
        return builder
    return register


def _tf() -> Any:
    import tensorflow as tf
    return tf


def _w(shape: tuple[int, ...], seed: int, scale: float = 0.5) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# ----------------------------------------------------------------------------- model pieces

def _layer_norm(tf: Any, x: Any, gamma: np.ndarray, beta: np.ndarray) -> Any:
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) * gamma + beta


def _attention(tf: Any, x: Any, d: int, heads: int, seed: int) -> Any:
    """Multi-head self-attention over x: [batch, seq, d] with constant projection weights."""
    wq, wk, wv, wo = (_w((d, d), seed + i, 1 / np.sqrt(d)) for i in range(4))
    b, t = x.shape[0], x.shape[1]
    dh = d // heads

    def split(y: Any) -> Any:  # [b, t, d] -> [b, h, t, dh]
        return tf.transpose(tf.reshape(y, [b, t, heads, dh]), [0, 2, 1, 3])
    q, k, v = (split(tf.einsum("btd,de->bte", x, w)) for w in (wq, wk, wv))
    scores = tf.matmul(q, k, transpose_b=True) * np.float32(1 / np.sqrt(dh))
    ctx = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
    ctx = tf.reshape(tf.transpose(ctx, [0, 2, 1, 3]), [b, t, d])
    return tf.einsum("btd,de->bte", ctx, wo)


# ----------------------------------------------------------------------------- samples

@sample("mlp", "Dense(8->16) + ReLU + Dense(16->4) + softmax; weights are constants.")
def _mlp() -> Sample:
    tf = _tf()
    w1, b1, w2, b2 = _w((8, 16), 1), _w((16,), 2), _w((16, 4), 3), _w((4,), 4)

    def mlp(x):
        h = tf.nn.relu(tf.matmul(x, w1) + b1)
        return tf.nn.softmax(tf.matmul(h, w2) + b2)
    return Sample(mlp, [_w((2, 8), 5, 1.0)], ["x"])


@sample("layer_norm", "Layer normalisation over the last axis with gamma/beta inputs.")
def _layer_norm_sample() -> Sample:
    tf = _tf()

    def layer_norm(x, gamma, beta):
        return _layer_norm(tf, x, gamma, beta)
    return Sample(layer_norm, [_w((4, 8), 6, 2.0), 1 + _w((8,), 7, 0.1), _w((8,), 8, 0.1)],
                  ["x", "gamma", "beta"])


@sample("softmax_xent", "Mean softmax cross-entropy of logits against one-hot labels "
                        "(SoftmaxCrossEntropyWithLogits) plus a log-softmax formulation.")
def _softmax_xent() -> Sample:
    tf = _tf()

    def softmax_xent(logits, labels):
        onehot = tf.one_hot(labels, 6)
        a = tf.nn.softmax_cross_entropy_with_logits(labels=onehot, logits=logits)
        b = -tf.reduce_sum(onehot * tf.nn.log_softmax(logits), axis=-1)
        return tf.reduce_mean(a), tf.reduce_mean(b)
    return Sample(softmax_xent, [_w((4, 6), 9, 1.5), np.array([1, 0, 5, 3], np.int32)],
                  ["logits", "labels"])


@sample("attention", "Two-head self-attention block (einsum projections, scaled scores, softmax).")
def _attention_sample() -> Sample:
    tf = _tf()

    def attention(x):
        return _attention(tf, x, d=8, heads=2, seed=10)
    return Sample(attention, [_w((1, 4, 8), 14, 1.0)], ["x"])


@sample("conv_block", "Conv2D 3x3 SAME + BiasAdd + ReLU + MaxPool 2x2 on a 1x8x8x3 image.")
def _conv_block() -> Sample:
    tf = _tf()
    k, b = _w((3, 3, 3, 4), 15, 0.3), _w((4,), 16, 0.1)

    def conv_block(image):
        y = tf.nn.conv2d(image, k, strides=1, padding="SAME")
        y = tf.nn.relu(tf.nn.bias_add(y, b))
        return tf.nn.max_pool2d(y, ksize=2, strides=2, padding="VALID")
    return Sample(conv_block, [_w((1, 8, 8, 3), 17, 1.0)], ["image"])


@sample("unique_in_middle", "Elementwise chain, tf.unique (no auto-clustering kernel) in the "
                            "middle, more elementwise ops after: Unique splits the clusters.")
def _unique_in_middle() -> Sample:
    tf = _tf()

    def unique_in_middle(x):
        y = tf.round(tf.nn.relu(x * 2.0 + 1.0) - 0.5)
        u, idx = tf.unique(tf.reshape(y, [-1]))
        z = tf.cast(idx, tf.float32) * 3.0 + tf.reduce_sum(u)
        return tf.exp(-tf.abs(z)) * 2.0 + 1.0
    return Sample(unique_in_middle, [_w((3, 4), 18, 1.0)], ["x"])


@sample("string_ops", "String ops (AsString, StringToNumber, StringLength, StringJoin) "
                      "mixed with numeric ops; strings have no XLA kernels.")
def _string_ops() -> Sample:
    tf = _tf()

    def string_ops(x):
        tag = tf.constant("v")  # a string Const (never clustered) rather than a string _Arg
        y = tf.tanh(x * 2.0) + 1.0
        s = tf.strings.as_string(y, precision=4)
        n = tf.strings.to_number(s)
        joined = tf.strings.join([tag, s], separator="=")
        ln = tf.cast(tf.strings.length(joined), tf.float32)
        return n * 3.0 + ln - tf.exp(y), joined
    return Sample(string_ops, [_w((2, 3), 19, 1.0)], ["x"])


@sample("variables", "Resource variables created outside the function with fixed initial "
                     "values: reads, assign, assign_add (float) and an int64 step counter.")
def _variables() -> Sample:
    tf = _tf()
    w = tf.Variable(_w((3, 2), 20), name="w")
    b = tf.Variable(np.zeros((2,), np.float32), name="b")
    step = tf.Variable(np.int64(0), name="step")

    def variables(x):
        y = tf.matmul(x, w) + b
        b.assign_add(tf.reduce_mean(y, axis=0) * 0.1)
        w.assign(w * 0.5 + 1.0)
        step.assign_add(1)
        return tf.nn.relu(y) + b.read_value(), w.read_value() * 2.0, step.read_value()
    return Sample(variables, [_w((4, 3), 21, 1.0)], ["x"], {"w": w, "b": b, "step": step})


@sample("while_loop", "tf.while_loop running 5 iterations of x = tanh(x @ w) + 0.1.")
def _while_loop() -> Sample:
    tf = _tf()
    w = _w((4, 4), 22)

    def while_loop(x):
        def body(i, y):
            return i + 1, tf.tanh(tf.matmul(y, w)) + 0.1
        _, y = tf.while_loop(lambda i, y: i < 5, body, [tf.constant(0), x])
        return y * 2.0
    return Sample(while_loop, [_w((2, 4), 23, 1.0)], ["x"])


@sample("cond", "tf.cond on reduce_sum(x) > 0 choosing between two elementwise branches.")
def _cond() -> Sample:
    tf = _tf()

    def cond(x):
        y = tf.cond(tf.reduce_sum(x) > 0.0,
                    lambda: tf.exp(-x) * 2.0 + 1.0,
                    lambda: tf.sin(x) * x - 1.0)
        return y * 3.0 + tf.tanh(x)
    return Sample(cond, [_w((2, 3), 24, 1.0)], ["x"])


@sample("transformer_block", "Pre-norm transformer block (d=8, 2 heads, ff=16, seq 4, vocab 10): "
                             "layer norm + attention + residual + layer norm + MLP(GELU) + "
                             "residual + vocab projection + softmax cross-entropy loss.")
def _transformer_block() -> Sample:
    tf = _tf()
    d, ff, vocab = 8, 16, 10
    g1, b1 = 1 + _w((d,), 30, 0.1), _w((d,), 31, 0.1)
    g2, b2 = 1 + _w((d,), 32, 0.1), _w((d,), 33, 0.1)
    w1, c1 = _w((d, ff), 34, 1 / np.sqrt(d)), _w((ff,), 35, 0.1)
    w2, c2 = _w((ff, d), 36, 1 / np.sqrt(ff)), _w((d,), 37, 0.1)
    wout = _w((d, vocab), 38, 1 / np.sqrt(d))

    def transformer_block(x, labels):
        h = x + _attention(tf, _layer_norm(tf, x, g1, b1), d=d, heads=2, seed=40)
        m = tf.nn.gelu(tf.einsum("btd,df->btf", _layer_norm(tf, h, g2, b2), w1) + c1)
        h = h + tf.einsum("btf,fd->btd", m, w2) + c2
        logits = tf.einsum("btd,dv->btv", h, wout)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                             logits=logits))
        return loss, logits
    return Sample(transformer_block, [_w((2, 4, d), 41, 1.0),
                                      np.array([[1, 2, 3, 4], [9, 0, 5, 7]], np.int32)],
                  ["x", "labels"])


# ----------------------------------------------------------------------------- export (child)

def _spec_json(t: Any) -> dict[str, Any]:
    return {"tensor": t.name, "dtype": t.dtype.name, "shape": t.shape.as_list()}


def _capture_map(concrete: Any, variables: dict[str, Any]) -> list[dict[str, Any]]:
    """Which placeholder of the graph stands for which captured variable."""
    out = []
    for external, internal in concrete.graph.captures:
        name = next((n for n, v in variables.items() if external is v.handle), None)
        v = variables.get(name) if name else None
        out.append({"placeholder": internal.name, "variable": name,
                    "dtype": v.dtype.name if v is not None else external.dtype.name,
                    "shape": v.shape.as_list() if v is not None else None})
    return out


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    # Strings come back from TF as object arrays of bytes; store them as fixed-width bytes so
    # the files load without allow_pickle.
    np.savez(path, **{k: a.astype(bytes) if a.dtype == object else a for k, a in arrays.items()})


def export(name: str) -> None:
    """Write NAME.pbtxt/.json and tf/NAME/{inputs,outputs,...}.npz, hlo.txt (no XLA env flags)."""
    tf = _tf()
    from google.protobuf import text_format

    out = GRAPHS / "tf" / name
    out.mkdir(parents=True, exist_ok=True)
    build = REGISTRY[name]

    # Graph: a fresh build so variable state is the initial one.
    s = build()
    fn = tf_record.make_tf_function(s)
    concrete = fn.get_concrete_function(*tf_record.to_tensors(s.inputs))
    gd = concrete.graph.as_graph_def()
    (GRAPHS / f"{name}.pbtxt").write_text(text_format.MessageToString(gd))
    variables_init = {k: v.numpy() for k, v in s.variables.items()}
    graph_out = tf_record.flatten_outputs(fn(*tf_record.to_tensors(s.inputs)))

    # Eager results, from another fresh build (same initial variable values).
    s2 = build()
    eager_out = tf_record.flatten_outputs(s2.fn(*tf_record.to_tensors(s2.inputs)))
    for i, (a, b) in enumerate(zip(eager_out, graph_out)):
        if a.dtype == object:
            assert (a == b).all(), f"{name}: output {i} differs between eager and tf.function"
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name}: output {i} eager vs tf.function")
    _save_npz(out / "inputs.npz", dict(zip(s.names(), s.inputs)))
    _save_npz(out / "outputs.npz", {f"output_{i}": a for i, a in enumerate(eager_out)})
    if s.variables:
        _save_npz(out / "variables.npz", variables_init)
        _save_npz(out / "variables_after.npz", {k: v.numpy() for k, v in s2.variables.items()})

    meta = {
        "name": name,
        "description": DESCRIPTIONS[name],
        "function_name": concrete.name.decode() if isinstance(concrete.name, bytes) else concrete.name,
        "tf_version": tf.__version__,
        "inputs": [{"name": n, **_spec_json(t)} for n, t in zip(s.names(), concrete.inputs)],
        "outputs": [{"key": f"output_{i}", **_spec_json(t)} for i, t in enumerate(concrete.outputs)],
        "captured_variables": _capture_map(concrete, s.variables),
        "library_functions": [f.signature.name for f in gd.library.function],
        "node_count": len(gd.node),
    }

    # jit_compile=True: compiler IR and, where it cannot compile, TF's error texts.
    s3 = build()
    jf = tf_record.make_tf_function(s3, jit_compile=True)
    args = tf_record.to_tensors(s3.inputs)
    for f in ("hlo.txt", "optimized_hlo.txt", "jit_error.txt", "hlo_error.txt"):
        (out / f).unlink(missing_ok=True)
    try:
        ir = jf.experimental_get_compiler_ir(*args)
        (out / "hlo.txt").write_text(ir(stage="hlo"))
        (out / "optimized_hlo.txt").write_text(ir(stage="optimized_hlo"))
        meta["jit_compiles"] = True
    except Exception as e:
        (out / "hlo_error.txt").write_text(f"{type(e).__name__}: {e}\n")
        meta["jit_compiles"] = False
    try:
        jit_out = tf_record.flatten_outputs(jf(*args))
        meta["jit_matches_eager"] = all(
            (a == b).all() if a.dtype == object else np.allclose(a, b, rtol=1e-4, atol=1e-4)
            for a, b in zip(jit_out, eager_out))
    except Exception as e:
        (out / "jit_error.txt").write_text(f"{type(e).__name__}: {e}\n")
        meta["jit_compiles"] = False
    (GRAPHS / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")


# ----------------------------------------------------------------------------- driver

def build_one(name: str) -> str:
    t0 = time.perf_counter()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
    for k in ("TF_XLA_FLAGS", "XLA_FLAGS", "TF_DUMP_GRAPH_PREFIX"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, __file__, "_export", name], env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"export of {name} failed:\n{proc.stderr[-3000:]}")
    out = GRAPHS / "tf" / name
    for old in list(out.glob("*mark_for_compilation*.pbtxt")) + [out / "vlog.txt", out / "meta.json"]:
        old.unlink(missing_ok=True)
    meta = tf_record.record(f"{Path(__file__).resolve()}:{name}", out, tf_record.DEFAULT_FLAGS,
                            keep="function", gz=False, annotated=True,
                            extra_meta={"sample": name, "flagset": "default",
                                        "target": f"tools/make_graphs.py:{name}"})
    meta["target"] = f"tools/make_graphs.py:{name}"
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    user = [r for r in meta["runs"] if r.get("is_user_function")]
    return (f"{name}: {time.perf_counter() - t0:.1f}s, {len(user)} user pass run(s), clusters "
            f"{[c for r in user for c in r['clusters']]}" + (f" ERROR {meta.get('error')}"
                                                          if meta.get("error") else ""))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_export"]:
        export(argv[1])
        sys.stdout.flush()
        os._exit(0)
    ap = argparse.ArgumentParser(description="Build graphs/ (sample GraphDefs + TF's clustering, "
                                             "outputs and HLO for each) from tf.functions.")
    ap.add_argument("names", nargs="*", help=f"samples to build (default all: {', '.join(REGISTRY)})")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="concurrent TF processes (default 2)")
    ap.add_argument("--list", action="store_true", help="list samples and exit")
    args = ap.parse_args(argv)
    if args.list:
        for k, v in DESCRIPTIONS.items():
            print(f"{k:18s} {v}")
        return 0
    names = args.names or list(REGISTRY)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        print(f"error: unknown sample(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    (GRAPHS / "tf").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for line in pool.map(build_one, names):
            print(line, flush=True)
    print(f"done in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
