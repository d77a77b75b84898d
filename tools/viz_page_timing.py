"""How fast the ``viz`` HTML page of a training step opens in headless Chromium (not a test).

Builds the graph of one training step of a deep MLP (matmul, bias, layer norm, tanh, softmax
cross-entropy, its gradients and Adam updates of every variable) as TF's runtime would cluster it
(grappler, then auto-clustering with ``--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit``), writes the
``viz`` page (``.html``: clusters start collapsed on big graphs), opens it in headless Chromium under
Selenium several times and prints, per page:

* the Python time to lay out and write the page, and the page's size;
* in the browser: ``domContentLoaded`` and ``load`` (navigation start to the page's scripts having
  run: the picture can be used), and the first paint after load, medians over ``--repeats`` opens;
* the time to expand the biggest cluster and to focus on a node's neighbourhood (a click's work).

    PYTHONPATH=$PWD python tools/viz_page_timing.py                 # ~5,000 nodes
    PYTHONPATH=$PWD python tools/viz_page_timing.py --layers 2 5 60 --keep out/

Needs Chromium and chromedriver (Debian packages chromium, chromium-driver) and selenium.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def training_step(layers: int, width: int = 16, batch: int = 8):
    """(tf.function, its arguments): one Adam step of a ``layers``-deep MLP with layer norm."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    ws = [tf.Variable(rng.standard_normal((width, width)).astype(np.float32) * 0.3, name=f"w{i}")
          for i in range(layers)]
    bs = [tf.Variable(np.zeros(width, np.float32), name=f"b{i}") for i in range(layers)]
    params = ws + bs
    ms = [tf.Variable(tf.zeros_like(p), name=f"m{i}") for i, p in enumerate(params)]
    vs = [tf.Variable(tf.zeros_like(p), name=f"v{i}") for i, p in enumerate(params)]
    t = tf.Variable(0.0, name="t")

    @tf.function
    def step(x, labels):
        with tf.GradientTape() as tape:
            h = x
            for w, b in zip(ws, bs):
                h = tf.matmul(h, w) + b
                mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
                h = tf.tanh((h - mean) * tf.math.rsqrt(var + 1e-5))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h))
        grads = tape.gradient(loss, params)
        t.assign_add(1.0)
        lr = 1e-3 * tf.sqrt(1.0 - tf.pow(0.999, t)) / (1.0 - tf.pow(0.9, t))
        for p, g, m, v in zip(params, grads, ms, vs):
            m.assign(0.9 * m + 0.1 * g)
            v.assign(0.999 * v + 0.001 * tf.square(g))
            p.assign_sub(lr * m / (tf.sqrt(v) + 1e-7))
        return loss

    x = tf.constant(rng.standard_normal((batch, width)).astype(np.float32))
    labels = tf.constant(rng.integers(0, width, batch).astype(np.int32))
    return step, (x, labels)


def clustered(layers: int):
    import tfxla_cluster as txc

    step, args = training_step(layers)
    graph = txc.load_graph(step, *args, grappler=True)
    return txc.mark_for_compilation(graph, txc.Flags.parse(FLAGS), state=txc.ProcessState())


def open_times(driver, url: str, repeats: int) -> dict[str, float]:
    """Medians (ms) of domContentLoaded, load and first paint after a fresh navigation, and the time of
    one expand of the biggest cluster and one neighbourhood focus."""
    runs: dict[str, list[float]] = {"domContentLoaded": [], "load": [], "interactive+paint": []}
    for _ in range(repeats):
        driver.get("about:blank")
        driver.get(url)
        t = driver.execute_async_script("""
            var done = arguments[arguments.length - 1];
            requestAnimationFrame(function () { setTimeout(function () {
              var n = performance.getEntriesByType("navigation")[0];
              done([n.domContentLoadedEventEnd, n.loadEventEnd, performance.now()]);
            }, 0); });""")
        runs["domContentLoaded"].append(t[0])
        runs["load"].append(t[1])
        runs["interactive+paint"].append(t[2])
    out = {k: statistics.median(v) for k, v in runs.items()}
    out.update(driver.execute_script("""
        var svg = document.querySelector("#canvas svg"), data = JSON.parse(document.getElementById("viz-data").textContent);
        var names = Object.keys(data.layout.clusters).filter(function (c) { return !svg.tfxla.isOpen(c); });
        names.sort(function (a, b) { return data.clusters[b].size - data.clusters[a].size; });
        var res = {};
        if (names.length) {
          var t0 = performance.now(); svg.tfxla.expand(names[0]); svg.getBoundingClientRect();
          res["expand biggest cluster"] = performance.now() - t0;
          res["biggest cluster size"] = data.clusters[names[0]].size;
        }
        var t1 = performance.now(); svg.tfxla.focus(data.graph.names[Math.floor(data.graph.names.length / 2)]);
        svg.getBoundingClientRect();
        res["focus"] = performance.now() - t1;
        return res;"""))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="*", type=int, default=[60],
                    help="MLP depths to build (60 layers: about 5,000 op nodes after grappler)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", metavar="DIR", default=None, help="copy the pages here")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tests"))
    from conftest import CHROME_ARGS, _chromedriver, _chromium  # the browser tests' set-up

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    import tfxla_cluster as txc
    from tfxla_cluster.viz import write

    out = Path(tempfile.mkdtemp(prefix="tfxla-viz-timing-"))
    profile = tempfile.mkdtemp(prefix="tfxla-chrome-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = _chromium()
    for arg in CHROME_ARGS + [f"--user-data-dir={profile}", "--window-size=1400,1000"]:
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(_chromedriver()), options=opts)
    driver.set_script_timeout(60)
    try:
        for layers in args.layers:
            result = clustered(layers)
            t = time.perf_counter()
            page = write(result, out / f"train_step_{layers}.html", flags=txc.Flags.parse(FLAGS),
                         title=f"training step, {layers} layers")
            t_write = time.perf_counter() - t
            times = open_times(driver, page.as_uri(), args.repeats)
            print(f"{len(result.decisions)} nodes, {len(result.clusters)} clusters: page {page.stat().st_size / 1e6:.2f} MB "
                  f"written in {t_write:.2f} s", flush=True)
            for k, v in times.items():
                print(f"    {k:>24}: {v:8.1f}" + ("" if "size" in k else " ms"), flush=True)
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                shutil.copy(page, Path(args.keep) / page.name)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
