"""Model zoo: standard Keras models under live TF and under tfxla_cluster, in one table (issue 13).

Stage: a measurement tool over the whole pipeline (library + CLI, ``python tools/zoo.py``).

Each model (``keras.applications`` ResNet50, MobileNetV2, EfficientNetB0, DenseNet121, InceptionV3 with
``weights=None`` at small inputs; a transformer encoder block; a BERT-tiny-like encoder; LSTM and GRU
classifiers; a small CNN) gives two *model functions*: ``<model>_infer`` (the forward pass) and
``<model>_train`` (one step: forward, gradient, ``keras.optimizers.Adam`` update of the variables). For each
function, one row:

* **times** — steady state (median over rounds that interleave every variant, one call each) and first
  call (trace + compile + run) of TF graph mode (``tf.function``), TF's XLA (``jit_compile=True``), TF's
  auto-clustering (``TF_XLA_FLAGS=--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit``), ours in auto mode
  (``tfxla_cluster.function(fn, flags=...)``) and ours with ``jit_compile=True``;
* **partition** — our clusters (``fn.get_compiled(*args).mark_result.clusters``) against TF's live
  ``mark_for_compilation`` dump of the same function, node names and cluster names included (cluster
  numbers are process-global in TF and in ours, so each side's numbers are counted from the clusters its
  process created before the function);
* **numerics** — outputs of two calls and the variables after them (two training steps from the same
  initial state), as the error against TF's XLA divided by TF's own XLA-vs-eager error (see
  :func:`relative_to_xla`). ≤ 2 means ours is as close to TF's kernels as TF's XLA is (triangle
  inequality); TF graph mode's own number is shown next to ours. Adam turns float noise in a zero
  gradient (an attention key bias) into lr-sized updates, so on such functions TF's own error is large;
* **errors** — every exception, one line each; a failing cell never stops the run.

TF reads ``TF_XLA_FLAGS`` once per process, so TF's auto-clustering runs in two persistent child processes:
a *recording* one (``--tf_xla_clustering_debug`` + ``TF_DUMP_GRAPH_PREFIX``, parsed with
``tools/tf_record.py``'s attribution of dumps to functions) and a *timing* one (the flags alone, so dump
writing never inflates TF's first call). The timing child gets one call per round, between the main
process' calls, so load changes hit every variant alike.

    python tools/zoo.py                         # the whole zoo (tens of minutes on 2 cores)
    python tools/zoo.py --bounded --quick       # a few small models (CI)
    python tools/zoo.py --only gru,resnet50_infer --json out/zoo.json
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import platform
import re
import select as select_mod
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# First calls are cold, as TF's are (no persistent cache unless asked): TFXLA_COMPILE_CACHE=DIR times warm ones.
os.environ.setdefault("TFXLA_COMPILE_CACHE", "off")
_TOOLS = Path(__file__).resolve().parent
if str(_TOOLS) not in sys.path:
    sys.path.insert(0, str(_TOOLS))
import tf_record  # noqa: E402

AUTO_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
KINDS = ("infer", "train")
VARIANTS = ("tf_graph", "tf_xla", "tf_auto", "ours_auto", "ours_jit")
#: Relative errors below this (a few float32 ulps) count as agreement when TF's XLA equals eager exactly.
ERROR_FLOOR = 4 * float(np.finfo(np.float32).eps)
#: The bound for "within TF's XLA tolerance": ours may sit on the far side of eager from TF's XLA.
WITHIN_XLA_TOLERANCE = 2.0
REPLY = "@@ZOO "


# ============================================================================ the models

@dataclasses.dataclass
class ModelFunction:
    """One zoo function: the plain Python function, fixed inputs, and every variable it reads or writes."""

    name: str
    fn: Callable[..., Any]
    inputs: list[np.ndarray]
    input_names: list[str]
    variables: list[Any]

    def signature(self) -> list[Any]:
        import tensorflow as tf

        return [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype), name=n) for a, n in zip(self.inputs, self.input_names)]


@dataclasses.dataclass
class ZooModel:
    name: str
    make: Callable[[], tuple[Any, np.ndarray]]   # -> (keras model producing logits, example input)
    bounded: bool = False                       # part of --bounded (small, for CI)
    description: str = ""


def _keras() -> Any:
    import keras
    return keras


def _app(ctor: str, size: int, no_dropout: bool = False) -> Callable[[], tuple[Any, np.ndarray]]:
    def make() -> tuple[Any, np.ndarray]:
        keras = _keras()
        model = getattr(keras.applications, ctor)(weights=None, input_shape=(size, size, 3), classes=10,
                                                  classifier_activation=None)
        if no_dropout:
            # TF's kernels and XLA draw different random numbers, which would hide everything else;
            # Keras' Dropout is the identity at rate 0 (EfficientNetB0 takes no dropout arguments).
            for layer in model.layers:
                if isinstance(layer, keras.layers.Dropout):
                    layer.rate = 0.0
        return model, _rand((2, size, size, 3), 1)
    return make


def _transformer_block() -> tuple[Any, np.ndarray]:
    keras = _keras()
    inp = keras.Input((16, 64))
    x = _encoder_layer(keras, inp, 64, 4, 128, "block")
    out = keras.layers.Dense(10, name="head")(keras.layers.GlobalAveragePooling1D(name="pool")(x))
    return keras.Model(inp, out, name="transformer_block"), _rand((2, 16, 64), 2)


def _encoder_layer(keras: Any, x: Any, hidden: int, heads: int, ffn: int, name: str) -> Any:
    """Post-LN transformer encoder layer: self-attention + residual + LayerNorm, GELU FFN + residual + LayerNorm."""
    att = keras.layers.MultiHeadAttention(heads, hidden // heads, name=f"{name}_mha")(x, x)
    x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"{name}_ln1")(x + att)
    h = keras.layers.Dense(ffn, activation="gelu", name=f"{name}_ffn1")(x)
    h = keras.layers.Dense(hidden, name=f"{name}_ffn2")(h)
    return keras.layers.LayerNormalization(epsilon=1e-12, name=f"{name}_ln2")(x + h)


def _bert_tiny() -> tuple[Any, np.ndarray]:
    """BERT-tiny-like: token + position embeddings, 2 encoder layers (hidden 128, 2 heads, FFN 512), [CLS] pooler."""
    keras = _keras()
    seq, hidden = 16, 128
    ids = keras.Input((seq,), dtype="int32")
    x = keras.layers.Embedding(1000, hidden, name="tokens")(ids)
    x = x + keras.layers.Embedding(seq, hidden, name="positions")(keras.ops.arange(seq))
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="emb_ln")(x)
    for i in range(2):
        x = _encoder_layer(keras, x, hidden, 2, 4 * hidden, f"layer{i}")
    pooled = keras.layers.Dense(hidden, activation="tanh", name="pooler")(x[:, 0])
    out = keras.layers.Dense(10, name="head")(pooled)
    return keras.Model(ids, out, name="bert_tiny"), np.random.default_rng(3).integers(0, 1000, (2, seq)).astype(np.int32)


def _rnn(layer: str) -> Callable[[], tuple[Any, np.ndarray]]:
    def make() -> tuple[Any, np.ndarray]:
        keras = _keras()
        model = keras.Sequential([keras.Input((10, 8)), getattr(keras.layers, layer)(32, name=layer.lower()),
                                  keras.layers.Dense(10, name="head")], name=f"{layer.lower()}_classifier")
        return model, _rand((2, 10, 8), 4)
    return make


def _small_cnn() -> tuple[Any, np.ndarray]:
    """Conv + BatchNorm + ReLU, a depthwise-separable block, pooling and a dense head (MobileNet in small)."""
    keras = _keras()
    L = keras.layers
    model = keras.Sequential([
        keras.Input((16, 16, 3)), L.Conv2D(8, 3, strides=2, padding="same", use_bias=False, name="conv"),
        L.BatchNormalization(name="bn"), L.ReLU(name="relu"),
        L.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw"), L.BatchNormalization(name="dw_bn"),
        L.ReLU(name="dw_relu"), L.Conv2D(16, 1, use_bias=False, name="pw"), L.GlobalAveragePooling2D(name="pool"),
        L.Dense(10, name="head")], name="small_cnn")
    return model, _rand((2, 16, 16, 3), 5)


def _rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# Small ones first: a long run that is stopped early still has them.
MODELS: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("transformer_block", _transformer_block, bounded=True,
             description="one post-LN encoder layer (hidden 64, 4 heads, FFN 128) + classifier"),
    ZooModel("gru", _rnn("GRU"), bounded=True, description="GRU(32) over 10 steps + Dense"),
    ZooModel("small_cnn", _small_cnn, bounded=True, description="Conv/BN/ReLU + depthwise-separable block, 16x16"),
    ZooModel("lstm", _rnn("LSTM"), description="LSTM(32) over 10 steps + Dense"),
    ZooModel("bert_tiny", _bert_tiny, description="2 layers, hidden 128, 2 heads, seq 16"),
    ZooModel("mobilenetv2", _app("MobileNetV2", 32), description="keras.applications.MobileNetV2, 32x32"),
    ZooModel("efficientnetb0", _app("EfficientNetB0", 32, no_dropout=True),
             description="keras.applications.EfficientNetB0, 32x32, no dropout"),
    ZooModel("resnet50", _app("ResNet50", 32), description="keras.applications.ResNet50, 32x32"),
    ZooModel("densenet121", _app("DenseNet121", 32), description="keras.applications.DenseNet121, 32x32"),
    ZooModel("inceptionv3", _app("InceptionV3", 75), description="keras.applications.InceptionV3, 75x75 (its minimum)"),
]}


def build(model_name: str) -> dict[str, ModelFunction]:
    """Both functions of a model, from a fixed seed (every process builds the same initial weights)."""
    keras = _keras()
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model, x = MODELS[model_name].make()
    labels = np.array([i % 10 for i in range(x.shape[0])], np.int32)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(learning_rate=1e-3)
    opt.build(model.trainable_variables)

    def infer(x):
        return model(x, training=False)

    def train(x, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    # Named after the model so TF's function names (__inference_<name>_N) say which one it is.
    infer.__name__, train.__name__ = f"{model_name}_infer", f"{model_name}_train"
    return {"infer": ModelFunction(infer.__name__, infer, [x], ["x"], list(model.weights)),
            "train": ModelFunction(train.__name__, train, [x, labels], ["x", "labels"],
                                   list(model.weights) + list(opt.variables))}


def function_names(models: list[str]) -> list[str]:
    return [f"{m}_{k}" for m in models for k in KINDS]


def select_functions(only: str = "", bounded: bool = False) -> list[str]:
    """Function names for ``--only`` (model or function names, comma-separated) / ``--bounded``."""
    models = [m for m, z in MODELS.items() if z.bounded or not bounded]
    if not only:
        return function_names(models)
    out: list[str] = []
    known = function_names(list(MODELS))
    for item in (s.strip() for s in only.split(",") if s.strip()):
        if item in MODELS:
            out += function_names([item])
        elif item in known:
            out.append(item)
        else:
            raise ValueError(f"unknown model or function {item!r}; models: {', '.join(MODELS)}")
    return list(dict.fromkeys(out))


def split_name(function_name: str) -> tuple[str, str]:
    model, _, kind = function_name.rpartition("_")
    return model, kind


# ============================================================================ numerics

def array_errors(got: list[np.ndarray], want: list[np.ndarray]) -> list[float]:
    """Per array: the largest error relative to the larger of the two arrays' largest magnitudes (weights
    of different layers live at different scales; the larger one, because a mathematically zero gradient
    leaves a parameter at exactly 0 on one side and Adam-amplified noise on the other); inf on a
    count/shape mismatch or NaNs in different places."""
    if len(got) != len(want):
        return [float("inf")]
    out = []
    for g, w in zip(got, want):
        if g.shape != w.shape:
            out.append(float("inf"))
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if not np.array_equal(np.isnan(g64), np.isnan(w64)):
            out.append(float("inf"))
            continue
        ok = ~np.isnan(w64)
        scale = max(float(np.max(np.abs(w64[ok]), initial=0.0)), float(np.max(np.abs(g64[ok]), initial=0.0)), 1e-30)
        out.append(float(np.max(np.abs(g64[ok] - w64[ok]), initial=0.0)) / scale)
    return out


def relative_to_xla(got: list[np.ndarray], xla: list[np.ndarray], eager: list[np.ndarray]) -> dict[str, Any]:
    """``ratio``: the largest error against TF's XLA (over the arrays) divided by TF's own XLA-vs-eager
    error, the largest over the same arrays (floored at a few ulps). ``worst_array`` / ``worst_array_ratio``:
    the array whose own ratio is largest, for diagnosis only — array by array, TF's XLA-vs-eager error is
    too small a sample of float noise to be a tolerance: on the transformer's training step eager and XLA
    happen to agree on one bias to 4e-7 while both are 5e-6 off a float64 run, and ours 6e-6."""
    vs_xla = array_errors(got, xla)
    tf_own = array_errors(xla, eager)
    if len(vs_xla) != len(tf_own):
        return {"error_vs_xla": float("inf"), "ratio": float("inf")}
    ratios = [e / max(t, ERROR_FLOOR) for e, t in zip(vs_xla, tf_own)]
    worst = int(np.argmax(ratios)) if ratios else 0
    return {"error_vs_xla": max(vs_xla, default=0.0),
            "ratio": max(vs_xla, default=0.0) / max(max(tf_own, default=0.0), ERROR_FLOOR),
            "worst_array": worst, "worst_array_ratio": ratios[worst] if ratios else 0.0}


# ============================================================================ errors and timing

def short_error(e: BaseException) -> str:
    """One line: the exception type and its most telling line (TF's graph errors bury it)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    detail = next((ln for ln in lines if "Error" in ln and "Graph execution error" not in ln
                   and not ln.startswith("Detected at node")), lines[0] if lines else "")
    prefix = f"{type(e).__name__}: "
    while detail.startswith(prefix):  # our errors repeat their type in the message
        detail = detail[len(prefix):]
    text = prefix + detail
    return text if len(text) <= 300 else text[:297] + "..."


def _block(out: Any) -> list[np.ndarray]:
    import tensorflow as tf

    return [np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in tf.nest.flatten(out)]


def _timed(call: Callable[[], Any]) -> tuple[float, list[np.ndarray]]:
    t0 = time.perf_counter()
    out = _block(call())  # .numpy() waits for the result
    return time.perf_counter() - t0, out


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "python": platform.python_version()}


# ============================================================================ TF's auto-clustering child

def child_main(mode: str) -> int:
    """A TF process with ``TF_XLA_FLAGS`` set by the parent. Commands (JSON lines on stdin):
    ``build NAME`` (trace and make the first call, timed, between stderr markers), ``call NAME`` (one timed
    call), ``drop NAME``, ``quit``. Replies are JSON lines on stdout prefixed with ``@@ZOO``."""
    import tensorflow as tf

    live: dict[str, tuple[Any, list[Any]]] = {}
    models: dict[str, dict[str, ModelFunction]] = {}
    initial: dict[str, list[np.ndarray]] = {}   # model -> its variables as built (both functions share them)

    def reply(obj: dict[str, Any]) -> None:
        sys.stdout.write(REPLY + json.dumps(obj) + "\n")
        sys.stdout.flush()

    reply({"ready": True, "tf_version": tf.__version__})
    for line in sys.stdin:
        cmd = json.loads(line)
        name = cmd.get("name", "")
        res: dict[str, Any] = {"name": name}
        try:
            if cmd["cmd"] == "quit":
                break
            if cmd["cmd"] == "build":
                model, kind = split_name(name)
                if model not in models:
                    # One build per model, as in the parent: a second build would rename its layers
                    # and optimizer (adam_1/...) and so every node of the function.
                    models.clear()
                    gc.collect()
                    models[model] = build(model)
                    initial[model] = [v.numpy() for v in models[model][kind].variables]
                mf = models[model][kind]
                fn = tf.function(mf.fn, input_signature=mf.signature())
                args = [tf.constant(a) for a in mf.inputs]
                # The first call is timed as the parent times its variants: trace included.
                t0 = time.perf_counter()
                concrete = fn.get_concrete_function(*args)
                trace_seconds = time.perf_counter() - t0
                res["function_name"] = concrete.name.decode() if isinstance(concrete.name, bytes) else str(concrete.name)
                live[name] = (fn, args)
                if cmd.get("results"):
                    # From the variables as built, as the parent restores them before each variant's calls.
                    for v, value in zip(mf.variables, initial[model]):
                        v.assign(value)
                if mode == "rec":
                    tf_record._mark("BEGIN")
                try:
                    call_seconds, out1 = _timed(lambda: fn(*args))
                    res["first"] = trace_seconds + call_seconds
                finally:
                    if mode == "rec":
                        tf_record._mark("END")
                if cmd.get("results"):
                    # TF's own auto-clustering's numerics, measured as the parent measures its variants:
                    # two calls' outputs, then the variables after them.
                    out2 = _block(fn(*args))
                    arrays = out1 + out2 + [v.numpy() for v in mf.variables]
                    np.savez(cmd["results"], *arrays)
                    res["results"] = cmd["results"]
            elif cmd["cmd"] == "call":
                fn, args = live[name]
                res["seconds"], _ = _timed(lambda: fn(*args))
            elif cmd["cmd"] == "drop":
                live.pop(name, None)
                gc.collect()
        except Exception as e:  # noqa: BLE001 - the parent shows it in the row
            res["error"] = short_error(e)
        reply(res)
    sys.stdout.flush()
    os._exit(0)  # TF's interpreter teardown is slow and sometimes noisy


class TfChild:
    """A persistent TF process with auto-clustering on (``rec``: with TF's clustering dumps)."""

    def __init__(self, mode: str, flags: str, workdir: Path) -> None:
        self.mode, self.flags = mode, flags
        self.dump_dir = workdir / f"{mode}_dumps"
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = workdir / f"{mode}_stderr.txt"
        if mode == "rec":
            env = tf_record.tf_env(flags, str(self.dump_dir))
        else:
            env = dict(os.environ, TF_XLA_FLAGS=flags, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
            env.pop("TF_DUMP_GRAPH_PREFIX", None)
        env.pop("XLA_FLAGS", None)
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_child", mode], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self.ready: dict[str, Any] | None = None  # read on the first request: start-up overlaps the parent's work

    def _read(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select_mod.select([self.proc.stdout], [], [], left)[0]:
                raise TimeoutError(f"TF {self.mode} child: no answer within {timeout:.0f} s")
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"TF {self.mode} child exited: {self.stderr_tail()}")
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])

    def stderr_tail(self) -> str:
        self._stderr.flush()
        lines = [ln for ln in self.stderr_path.read_text(errors="replace").splitlines() if ln.strip()]
        return lines[-1][:200] if lines else f"exit code {self.proc.poll()}"

    def ask(self, cmd: str, name: str, timeout: float = 3600, **extra: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        if self.ready is None:
            self.ready = self._read(timeout=600)
        self.proc.stdin.write(json.dumps({"cmd": cmd, "name": name, **extra}) + "\n")
        self.proc.stdin.flush()
        return self._read(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                if self.ready is not None:
                    self.ask("quit", "", timeout=5)
            except Exception:  # noqa: BLE001 - it is going away either way
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._stderr.close()

    def tf_clusters(self, function_name: str) -> tuple[Any, dict[str, list[str]], int]:
        """TF's ``before_mark_for_compilation`` GraphDef (None when nothing was a candidate), its cluster
        name → member nodes, and how many clusters the process created before this function's pass run."""
        self._stderr.flush()
        events = tf_record.parse_stderr(self.stderr_path.read_text(errors="replace"))
        info = tf_record.analyse(events, self.dump_dir)
        runs = [r for r in info["runs"] if r["function"] == function_name]
        if len(runs) != 1:
            raise RuntimeError(f"{len(runs)} MarkForCompilation runs of {function_name} in TF's log")
        run = runs[0]
        if not run["dumps"]:
            return None, {}, run["clusters_before"]
        before = tf_record.load_graph_def(self.dump_dir / run["dumps"]["before_mark_for_compilation"])
        after = tf_record.load_graph_def(self.dump_dir / run["dumps"]["mark_for_compilation"])
        return before, tf_record.clusters_of(after), run["clusters_before"]


# ============================================================================ partitions

def renumber(clusters: dict[str, list[str]], before: int) -> dict[str, list[str]]:
    """``cluster_<n>`` → ``cluster_<n - before>`` (the process' earlier clusters), members sorted."""
    out = {}
    for name, members in clusters.items():
        prefix, _, num = name.rpartition("_")
        out[f"{prefix}_{int(num) - before}" if num.isdigit() else name] = sorted(members)
    return out


def compare_partitions(tf_clusters: dict[str, list[str]], ours: dict[str, list[str]], tf_graph: Any = None,
                       our_graph: Any = None, flags: str = AUTO_FLAGS) -> dict[str, Any]:
    """Equality of two renumbered cluster maps, and where they differ: which nodes, whose graph, whose pass."""
    res: dict[str, Any] = {"equal": tf_clusters == ours, "tf_clusters": len(tf_clusters), "our_clusters": len(ours),
                           "tf_nodes": sum(map(len, tf_clusters.values())), "our_nodes": sum(map(len, ours.values()))}
    if res["equal"]:
        return res
    res["same_partition"] = {frozenset(m) for m in tf_clusters.values()} == {frozenset(m) for m in ours.values()}
    res["equal_modulo_clone_numbers"] = _unclone(tf_clusters) == _unclone(ours)
    tf_member = {n for m in tf_clusters.values() for n in m}
    our_member = {n for m in ours.values() for n in m}
    res["clustered_only_tf"] = sorted(tf_member - our_member)
    res["clustered_only_ours"] = sorted(our_member - tf_member)
    if tf_graph is not None and our_graph is not None:
        tf_nodes = {n.name: n.op for n in tf_graph.node}
        our_nodes = {n.name: n.op for n in our_graph.node}
        res["graph_only_tf"] = [f"{n} ({tf_nodes[n]})" for n in sorted(tf_nodes.keys() - our_nodes.keys())]
        res["graph_only_ours"] = [f"{n} ({our_nodes[n]})" for n in sorted(our_nodes.keys() - tf_nodes.keys())]
    if tf_graph is not None:
        from tfxla_cluster import ProcessState, mark_for_compilation

        try:
            on_tf = mark_for_compilation(tf_graph, flags, state=ProcessState()).clusters
            res["our_pass_on_tf_graph_equal"] = renumber(on_tf, 0) == renumber(tf_clusters, 0) or \
                {frozenset(m) for m in on_tf.values()} == {frozenset(m) for m in tf_clusters.values()}
        except Exception as e:  # noqa: BLE001
            res["our_pass_on_tf_graph_error"] = short_error(e)
    return res


def _unclone(clusters: dict[str, list[str]]) -> dict[str, list[str]]:
    """Cluster maps with CloneConstantsForBetterClustering's ``/clone_<n>`` suffixes made anonymous."""
    return {c: sorted(re.sub(r"/clone_\d+$", "/clone_#", n) for n in m) for c, m in clusters.items()}


def partition_cell(p: dict[str, Any] | None) -> str:
    if not p:
        return "-"
    if "error" in p:
        return "ERR"
    if p["equal"]:
        return f"= ({p['tf_clusters']} cl, {p['tf_nodes']} nodes)"
    if p.get("same_partition"):
        return "≠ cluster names"
    if p.get("equal_modulo_clone_numbers"):
        return f"≠ only clone_N numbers of cloned constants ({p['tf_clusters']} cl, {p['tf_nodes']} nodes)"
    text = (f"≠ TF {p['tf_clusters']} cl/{p['tf_nodes']} n, ours {p['our_clusters']}/{p['our_nodes']}")
    if "graph_only_tf" in p:
        text += f"; graph: {len(p['graph_only_tf'])} only TF, {len(p['graph_only_ours'])} only ours"
    if "our_pass_on_tf_graph_equal" in p:
        text += "; our pass on TF's graph: " + ("=" if p["our_pass_on_tf_graph_equal"] else "≠")
    return text


# ============================================================================ one function

@dataclasses.dataclass
class Row:
    name: str
    steady: dict[str, float | None] = dataclasses.field(default_factory=dict)   # variant -> seconds (median)
    first: dict[str, float | None] = dataclasses.field(default_factory=dict)    # variant -> seconds
    # ours_auto / ours_jit -> their first call's compile profile (CompileProfile.as_dict) and the one-minute
    # load average just before it (first calls on a busy machine are slower: read them next to it)
    profiles: dict[str, dict] = dataclasses.field(default_factory=dict)
    first_load: dict[str, float] = dataclasses.field(default_factory=dict)
    xla_vs_eager: float | None = None                   # TF's own XLA-vs-eager relative error
    errors_vs_xla: dict[str, float] = dataclasses.field(default_factory=dict)   # variant -> relative error
    relative: dict[str, float] = dataclasses.field(default_factory=dict)        # variant -> error / TF's tolerance
    # ours_auto against TF's own auto-clustering, in units of TF auto's own error against eager: both run the
    # unclustered ops on TF's kernels (oneDNN's where it is on), which TF's XLA does not
    auto_vs_tf_auto: float | None = None
    worst_array: dict[str, tuple[str, float]] = dataclasses.field(default_factory=dict)  # variant -> (array, ratio)
    partition: dict[str, Any] | None = None
    clusters: dict[str, Any] = dataclasses.field(default_factory=dict)          # ours/TF cluster maps (renumbered)
    errors: list[str] = dataclasses.field(default_factory=list)                # "variant: Type: message"
    failed: set[str] = dataclasses.field(default_factory=set)

    def fail(self, variant: str, e: BaseException | str) -> None:
        self.failed.add(variant)
        line = f"{variant}: {e if isinstance(e, str) else short_error(e)}"
        if line not in self.errors:
            self.errors.append(line)


class Runner:
    """Runs model functions one by one; owns the two TF child processes."""

    def __init__(self, repeats: int, workdir: Path, flags: str = AUTO_FLAGS,
                 progress: Callable[[str], None] = lambda s: None, tf_auto_timing: bool = True) -> None:
        self.repeats, self.flags, self.progress, self.workdir = repeats, flags, progress, workdir
        self.rec: TfChild | None = None
        self.timer: TfChild | None = None
        self.child_errors: list[str] = []
        for mode in ("rec", "time") if tf_auto_timing else ("rec",):
            try:
                setattr(self, "rec" if mode == "rec" else "timer", TfChild(mode, flags, workdir))
            except Exception as e:  # noqa: BLE001 - rows then show TF auto as failed
                self.child_errors.append(f"tf_auto ({mode} process): {short_error(e)}")

    def close(self) -> None:
        for child in (self.rec, self.timer):
            if child is not None:
                child.close()

    def run(self, function_name: str, built: dict[str, ModelFunction]) -> Row:
        import tensorflow as tf

        import tfxla_cluster as txc
        from tfxla_cluster.jit.mark_for_compilation import GLOBAL_STATE

        row = Row(function_name)
        for msg in self.child_errors:
            row.fail("tf_auto", msg.split(": ", 1)[1])
        mf = built[split_name(function_name)[1]]
        args = [tf.constant(a) for a in mf.inputs]
        sig = mf.signature()
        initial = [v.numpy() for v in mf.variables]
        n_out = 0

        def restore() -> None:
            for v, value in zip(mf.variables, initial):
                v.assign(value)

        def two_calls(fn: Callable[..., Any], variant: str) -> list[np.ndarray]:
            restore()
            row.first_load[variant] = round(os.getloadavg()[0], 2)
            seconds, out1 = _timed(lambda: fn(*args))
            row.first[variant] = seconds
            if hasattr(fn, "compile_stats"):   # ours: where the first call went, stage by stage
                row.profiles[variant] = fn.compile_stats().as_dict()
            out2 = _block(fn(*args))
            nonlocal n_out
            n_out = len(out1)
            return out1 + out2 + [v.numpy() for v in mf.variables]

        fns: dict[str, Any] = {}
        results: dict[str, list[np.ndarray]] = {}
        self.progress(f"{function_name}: eager reference")
        try:
            eager = two_calls(mf.fn, "eager")
        except Exception as e:  # noqa: BLE001
            row.fail("eager", e)
            eager = None
        makers = {
            "tf_graph": lambda: tf.function(mf.fn, input_signature=sig),
            "tf_xla": lambda: tf.function(mf.fn, input_signature=sig, jit_compile=True),
            "ours_auto": lambda: txc.function(mf.fn, flags=self.flags, input_signature=sig),
            "ours_jit": lambda: txc.function(mf.fn, jit_compile=True, input_signature=sig),
        }
        seq_before = 0
        for variant, make in makers.items():
            self.progress(f"{function_name}: {variant} first calls")
            try:
                fn = make()
                if variant == "ours_auto":
                    seq_before = GLOBAL_STATE.sequence[0]
                results[variant] = two_calls(fn, variant)
                fns[variant] = fn
            except Exception as e:  # noqa: BLE001
                row.fail(variant, e)
        restore()

        # TF's auto-clustering: the recording child for the partition, the timing child for times.
        tf_function_name = tf_partition = None
        if self.rec is not None:
            self.progress(f"{function_name}: TF auto-clustering (recording)")
            try:
                rep = self.rec.ask("build", function_name, results=str(self.workdir / f"{function_name}.npz"))
                if "error" in rep:
                    row.fail("tf_auto", rep["error"])
                if rep.get("results"):
                    with np.load(rep["results"]) as z:
                        results["tf_auto"] = [z[f"arr_{i}"] for i in range(len(z.files))]
                tf_function_name = rep.get("function_name")
                if tf_function_name:
                    tf_partition = self.rec.tf_clusters(tf_function_name)
            except Exception as e:  # noqa: BLE001
                row.fail("tf_auto", e)
            finally:
                self._drop(self.rec, function_name)
        timer_ok = False
        if self.timer is not None:
            self.progress(f"{function_name}: TF auto-clustering (first call)")
            try:
                rep = self.timer.ask("build", function_name)
                if "error" in rep:
                    row.fail("tf_auto", rep["error"])
                else:
                    row.first["tf_auto"], timer_ok = rep["first"], True
            except Exception as e:  # noqa: BLE001
                row.fail("tf_auto", e)

        # Partition: ours against TF's live dump.
        if tf_partition is not None and "ours_auto" in fns:
            self.progress(f"{function_name}: partitions")
            try:
                compiled = fns["ours_auto"].get_compiled(*args)
                ours = compiled.mark_result.clusters if compiled.mark_result else {}
                tf_graph, tf_cl, tf_before = tf_partition
                ours_r, tf_r = renumber(ours, seq_before), renumber(tf_cl, tf_before)
                row.partition = compare_partitions(tf_r, ours_r, tf_graph, compiled.graph.graph_def, self.flags)
                row.clusters = {"tf": tf_r, "ours": ours_r}
            except Exception as e:  # noqa: BLE001
                row.partition = {"error": short_error(e)}
                row.errors.append(f"partition: {short_error(e)}")
        elif "ours_auto" in fns and self.rec is not None:
            row.partition = {"error": "no TF recording"}

        # Steady state: rounds of one call per variant, TF's auto-clustering child included.
        self.progress(f"{function_name}: steady state ({self.repeats} rounds)")
        samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
        live = dict(fns)
        for _ in range(self.repeats):
            for variant in VARIANTS:
                try:
                    if variant == "tf_auto":
                        if not timer_ok:
                            continue
                        rep = self.timer.ask("call", function_name)  # type: ignore[union-attr]
                        if "error" in rep:
                            raise RuntimeError(rep["error"])
                        samples[variant].append(rep["seconds"])
                    elif variant in live:
                        samples[variant].append(_timed(lambda: live[variant](*args))[0])
                except Exception as e:  # noqa: BLE001
                    row.fail(variant, e)
                    live.pop(variant, None)
                    timer_ok = False if variant == "tf_auto" else timer_ok
        for variant in VARIANTS:
            row.steady[variant] = statistics.median(samples[variant]) if samples[variant] else None
        if self.timer is not None:
            self._drop(self.timer, function_name)

        # Numerics: everything against TF's XLA, in units of TF's XLA-vs-eager error.
        if eager is not None and "tf_xla" in results:
            row.xla_vs_eager = max(array_errors(results["tf_xla"], eager), default=0.0)
            names = [f"call {c} output {i}" for c in (1, 2) for i in range(n_out)] + [v.path for v in mf.variables]
            for variant in ("tf_graph", "tf_auto", "ours_auto", "ours_jit"):
                if variant in results:
                    rel = relative_to_xla(results[variant], results["tf_xla"], eager)
                    row.errors_vs_xla[variant], row.relative[variant] = rel["error_vs_xla"], rel["ratio"]
                    if "worst_array" in rel:
                        row.worst_array[variant] = (names[rel["worst_array"]] if rel["worst_array"] < len(names)
                                                    else str(rel["worst_array"]), rel["worst_array_ratio"])
            if "ours_auto" in results and "tf_auto" in results:
                row.auto_vs_tf_auto = relative_to_xla(results["ours_auto"], results["tf_auto"], eager)["ratio"]
        restore()
        del fns, live
        gc.collect()
        return row

    def _drop(self, child: TfChild, name: str) -> None:
        try:
            child.ask("drop", name, timeout=120)
        except Exception:  # noqa: BLE001 - a dead child shows up in the next row
            pass


# ============================================================================ table

def _ms(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.1f}" if t < 10 else f"{t:.0f}s"


def _s(t: float | None) -> str:
    return "-" if t is None else f"{t:.2f}"


def _rel(row: Row, variant: str) -> str:
    if variant not in row.relative:
        return "ERR" if variant in row.failed else "-"
    r = row.relative[variant]
    if r == 0:
        return "0 (exact)"
    return "inf" if r == float("inf") else f"{r:.2g}"


def table(rows: list[Row]) -> str:
    """The markdown table: steady ms / first-call s per variant, partition, numerics, errors."""
    head = ("| function | TF graph | TF XLA | TF auto | ours auto | ours jit | partition vs TF live | "
            "TF XLA vs eager | TF graph err / TF's | TF auto err / TF's | ours auto err / TF's | ours jit err / TF's "
            "| errors |")
    lines = [head, "|---|" + "---:|" * 5 + "---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        times = ["ERR" if v in r.failed and r.steady.get(v) is None else f"{_ms(r.steady.get(v))} / {_s(r.first.get(v))}"
                 for v in ("tf_graph", "tf_xla", "tf_auto", "ours_auto", "ours_jit")]
        xe = "-" if r.xla_vs_eager is None else f"{r.xla_vs_eager:.1e}"
        errs = "<br>".join(e.replace("|", "\\|") for e in r.errors) or "-"
        lines.append(f"| {r.name} | {' | '.join(times)} | {partition_cell(r.partition)} | {xe} | "
                     f"{_rel(r, 'tf_graph')} | {_rel(r, 'tf_auto')} | {_rel(r, 'ours_auto')} | {_rel(r, 'ours_jit')} "
                     f"| {errs} |")
    return "\n".join(lines)


LEGEND = ("Times: steady-state median ms / first call s (trace + compile + first run). Partition: ours through "
          "tfxla_cluster.function vs TF's live mark_for_compilation dump, node and cluster names included (= equal). "
          "Numerics: outputs of 2 calls and the variables after them vs TF's XLA, relative to each array's "
          f"magnitude (the larger side's; largest over the arrays), divided by TF's own XLA-vs-eager error measured the same way "
          f"(floored at {ERROR_FLOOR:.1e}; the column TF XLA vs eager shows it); "
          f"<= {WITHIN_XLA_TOLERANCE:g} is within TF's XLA tolerance (TF graph mode's and TF auto-clustering's "
          "numbers show TF's own spread; TF auto is the fair comparison for ours auto: both run the unclustered ops "
          "on TF's kernels).")


# ============================================================================ CLI

class _Progress:
    """rich progress on a tty, plain lines on stderr otherwise."""

    def __init__(self, total: int) -> None:
        self.rich = None
        if sys.stderr.isatty():
            try:
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self.rich = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                                     "{task.total}"), TimeElapsedColumn(), transient=True)
                self.task = self.rich.add_task("zoo", total=total)
                self.rich.start()
            except ImportError:
                self.rich = None

    def status(self, text: str) -> None:
        if self.rich is not None:
            self.rich.update(self.task, description=text)
        else:
            print(f"[zoo {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    def advance(self) -> None:
        if self.rich is not None:
            self.rich.advance(self.task)

    def stop(self) -> None:
        if self.rich is not None:
            self.rich.stop()


def run_zoo(names: list[str], repeats: int, progress: _Progress | None = None, flags: str = AUTO_FLAGS,
            tf_auto_timing: bool = True, on_row: Callable[[dict], None] | None = None) -> dict:
    """Run the named model functions; returns the JSON-able result (machine, rows, table).
    ``tf_auto_timing=False`` skips the timing child (TF auto-clustering's times stay empty)."""
    import logging

    logging.getLogger("tfxla_cluster").setLevel(logging.ERROR)
    progress = progress or _Progress(len(names))
    start = machine()
    started = time.perf_counter()
    rows: list[Row] = []

    def result(end: dict[str, Any]) -> dict[str, Any]:
        return {"machine": {"cpu": start["cpu"], "cores": start["cores"], "python": start["python"],
                            "load_average_start": start["load_average"], "load_average_end": end["load_average"]},
                "started": start["utc"], "finished": end["utc"],
                "wall_seconds": round(time.perf_counter() - started, 1), "flags": flags, "repeats": repeats,
                "complete": len(rows) == len(names), "rows": [_row_json(r) for r in rows], "table": table(rows),
                "legend": LEGEND}
    with tempfile.TemporaryDirectory(prefix="tfxla_zoo_") as tmp:
        progress.status("starting TF's auto-clustering processes")
        runner = Runner(repeats, Path(tmp), flags, progress.status, tf_auto_timing)
        try:
            for model, group in _by_model(names):
                try:
                    progress.status(f"{model}: building")
                    built = build(model)
                except Exception as e:  # noqa: BLE001
                    for name in group:
                        row = Row(name)
                        row.fail("build", e)
                        rows.append(row)
                        progress.advance()
                    continue
                for name in group:
                    try:
                        rows.append(runner.run(name, built))
                    except Exception as e:  # noqa: BLE001 - the harness itself must not stop
                        row = Row(name)
                        row.fail("harness", e)
                        rows.append(row)
                    progress.advance()
                    if on_row is not None:
                        on_row(result(machine()))
                del built
                gc.collect()
        finally:
            runner.close()
            progress.stop()
    return result(machine())


# The stages of a first call, grouped as the profile line of ``profile_lines`` shows them.
PROFILE_GROUPS = (("TF trace", ("trace",)), ("import+grappler", ("import", "grappler")),
                  ("clustering", ("clustering", "encapsulation", "tf-import")), ("lowering", ("lowering",)),
                  ("HLO passes", ("hlo-pass", "buffer-assignment")), ("LLVM IR", ("llvm-ir",)),
                  ("LLVM opt", ("llvm-parse", "llvm-opt")), ("machine code", ("machine-code", "load", "code-reuse")),
                  ("run", ("run",)), ("TF run", ("tf-run",)), ("gc", ("gc",)), ("other", ("compile-other", "other")))


def profile_lines(rows: list[dict[str, Any]], variant: str = "ours_auto") -> list[str]:
    """One line per function of ``rows`` (the result's JSON rows): ``variant``'s first call split into
    stage groups (seconds), with the load average it ran at; stages are ``tfxla_cluster.compile_profile``'s."""
    out = []
    for r in rows:
        prof = r.get("profiles", {}).get(variant)
        if not prof:
            continue
        stages = prof["stages"]
        groups = []
        for label, names in PROFILE_GROUPS:
            seconds = sum(v for k, v in stages.items() if k.split(" ", 1)[0] in names)
            groups.append(f"{label} {seconds:.2f}")
        load = r.get("first_load", {}).get(variant)
        out.append(f"{r['name']} {variant} first call {prof['total_seconds']:.2f} s"
                   + (f" at load {load:.1f}" if load is not None else "") + ": " + ", ".join(groups))
    return out


def _by_model(names: list[str]) -> Iterator[tuple[str, list[str]]]:
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(split_name(n)[0], []).append(n)
    yield from groups.items()


def _row_json(r: Row) -> dict[str, Any]:
    d = dataclasses.asdict(r)
    d["failed"] = sorted(r.failed)
    for k in ("xla_vs_eager", "auto_vs_tf_auto"):
        if d[k] is not None and not np.isfinite(d[k]):
            d[k] = str(d[k])
    d["relative"] = {k: (v if np.isfinite(v) else str(v)) for k, v in r.relative.items()}
    d["errors_vs_xla"] = {k: (v if np.isfinite(v) else str(v)) for k, v in r.errors_vs_xla.items()}
    return d


def stale_bytecode(package: str = "tfxla_cluster") -> list[Path]:
    """``package``'s modules whose cached bytecode (``__pycache__``) is missing or older than their source.

    Python compiles such a module from source at *every* import when it may not write bytecode
    (``PYTHONDONTWRITEBYTECODE``, a read-only tree): the compiler's modules are imported during a process'
    first call, so that call pays the compile (0.4 s of CPU with all of them stale, against 0.1 s for
    the import alone), which a user's installed package never does. An editable install's tree goes stale
    whenever its files change (a merge, a checkout) until ``python -m compileall`` runs over it."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    stale = []
    for root in spec.submodule_search_locations:
        for source in sorted(Path(root).rglob("*.py")):
            try:
                with open(importlib.util.cache_from_source(str(source)), "rb") as f:
                    header = f.read(16)
            except OSError:
                stale.append(source)
                continue
            # The header after the magic: flags (0: checked by the source's mtime and size), mtime, size.
            flags, mtime, size = (int.from_bytes(header[i:i + 4], "little") for i in (4, 8, 12))
            st = source.stat()
            if len(header) < 16 or (flags == 0 and (mtime, size) != (int(st.st_mtime) & 0xFFFFFFFF,
                                                                      st.st_size & 0xFFFFFFFF)):
                stale.append(source)
    return stale


def refresh_bytecode(package: str = "tfxla_cluster") -> None:
    """Compile ``package``'s stale modules (:func:`stale_bytecode`) before timing first calls, as installing
    the package does; says so on stderr, and warns when they cannot be written."""
    import py_compile

    stale = stale_bytecode(package)
    failed = []
    for source in stale:
        try:
            py_compile.compile(str(source), doraise=True)
        except (OSError, py_compile.PyCompileError):
            failed.append(source)
    if stale:
        print(f"zoo.py: compiled the bytecode of {len(stale) - len(failed)} of {len(stale)} stale {package} modules "
              f"(under {os.path.commonpath(stale)})", file=sys.stderr)
    if failed:
        print(f"zoo.py: warning: {len(failed)} {package} modules have stale bytecode that could not be written "
              f"(e.g. {failed[0]}): each process compiles them during its first call", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_child"]:
        return child_main(argv[1])
    ap = argparse.ArgumentParser(prog="zoo.py", description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated model or function names (e.g. gru,resnet50_infer)")
    ap.add_argument("--bounded", action="store_true", help="only the small models (" +
                    ", ".join(m for m, z in MODELS.items() if z.bounded) + "), for CI")
    ap.add_argument("--quick", action="store_true", help="3 timing rounds instead of 10")
    ap.add_argument("--repeats", type=int, default=0, help="timing rounds (overrides --quick)")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--no-tf-auto-timing", action="store_true",
                    help="skip the process that times TF's auto-clustering (its partition is still recorded)")
    ap.add_argument("--list", action="store_true", help="list the model functions and exit")
    ap.add_argument("--profile", action="store_true",
                    help="after the table, where each of our first calls went (compile profile, grouped)")
    args = ap.parse_args(argv)
    try:
        names = select_functions(args.only, args.bounded)
    except ValueError as e:
        print(f"zoo.py: error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for m, z in MODELS.items():
            print(f"{m:18s} {'[bounded] ' if z.bounded else ''}{z.description}")
        return 0
    repeats = args.repeats or (3 if args.quick else 10)
    refresh_bytecode()
    def save(res: dict[str, Any]) -> None:
        if args.json:  # after every row: a long run stopped early keeps what it measured
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            Path(args.json).write_text(json.dumps(res, indent=1) + "\n")

    result = run_zoo(names, repeats, tf_auto_timing=not args.no_tf_auto_timing, on_row=save)
    save(result)
    mach = result["machine"]
    print(f"{mach['cpu']}, {mach['cores']} cores; load average {mach['load_average_start']} at start, "
          f"{mach['load_average_end']} at end; {result['started']} to {result['finished']} "
          f"({result['wall_seconds']:.0f} s); {repeats} timing rounds\n")
    print(result["table"])
    print("\n" + LEGEND)
    if args.profile:
        for variant in ("ours_auto", "ours_jit"):
            print("\n" + "\n".join(profile_lines(result["rows"], variant)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
