"""The runtime's launchers use the compile cache (runtime/compile_cache.py): compile causes, TF's megamorphic rule, the
compile-time-constant part of the key, the persistent cache across processes (with TF's read-only and
prefix flags), zero-copy outputs that later calls never overwrite, and the direct launch path."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.runtime.compile_cache import read_entry
from tfxla_cluster.runtime.launcher import to_tensor

AUTO = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"


def _launcher(fn, *args):
    (launcher,) = fn.get_compiled(*args).launchers.values()
    return launcher


def test_megamorphic_cluster_falls_back_to_tf_with_a_warning(caplog):
    f = txc.function(lambda x: tf.exp(x) * 2.0 + 1.0, flags=AUTO,
                     input_signature=[tf.TensorSpec([None], tf.float32)])
    with caplog.at_level(logging.WARNING, logger="tfxla_cluster"):
        for n in range(1, 14):
            x = np.linspace(0, 1, n, dtype=np.float32)
            for _ in range(2):   # lazy compilation: a new signature compiles at its second request
                np.testing.assert_allclose(f(tf.constant(x)).numpy(), np.exp(x) * 2 + 1, rtol=1e-6)
    launcher = _launcher(f, tf.TensorSpec([None], tf.float32))
    assert launcher.stats.compiles == 11
    assert launcher.stats.fallback_reason.startswith("megamorphic: 11 compiles")
    assert "megamorphic" in caplog.text


def test_must_compile_is_never_megamorphic():
    f = txc.function(lambda x: x * 3.0, jit_compile=True, input_signature=[tf.TensorSpec([None], tf.float32)])
    for n in range(1, 14):
        assert f(tf.ones([n])).numpy().tolist() == [3.0] * n
    launcher = _launcher(f, tf.TensorSpec([None], tf.float32))
    assert launcher.stats.compiles == 13 and not launcher.stats.fallback_reason


def test_compile_time_constant_inputs_are_part_of_the_key():
    f = txc.function(lambda x, s: tf.reshape(x, s) * 2.0, jit_compile=True)
    x = tf.range(6, dtype=tf.float32)
    assert f(x, tf.constant([2, 3])).shape == (2, 3)
    assert f(x, tf.constant([2, 3])).shape == (2, 3)
    assert f(x, tf.constant([3, 2])).shape == (3, 2)
    launcher = _launcher(f, x, tf.constant([2, 3]))
    assert launcher.stats.compiles == 2 and launcher.stats.executions == 3
    assert "value of compile-time constant argument 1 changed" in launcher.stats.causes[1]


def test_outputs_handed_to_tf_without_a_copy_are_never_overwritten():
    f = txc.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
    x1, x2 = tf.constant(np.ones(4096, np.float32)), tf.constant(np.zeros(4096, np.float32))
    y1 = f(x1)
    y2 = f(x2)
    assert y1.numpy()[0] == 3.0 and y2.numpy()[0] == 1.0
    assert y1._numpy().ctypes.data % 64 == 0  # aligned as TF's kernels assume
    assert y1._numpy().ctypes.data != y2._numpy().ctypes.data


def test_to_tensor_copies_what_tf_cannot_own():
    from tfxla_cluster.codegen.buffers import aligned_empty

    fresh = aligned_empty((64,), np.float32)
    fresh[:] = 1.0
    assert to_tensor(fresh)._numpy().ctypes.data == fresh.ctypes.data  # ours, fresh: shared
    assert to_tensor(np.asarray(fresh))._numpy().ctypes.data == fresh.ctypes.data
    odd = aligned_empty((65,), np.float32)[1:]
    t = to_tensor(odd)
    assert t._numpy().ctypes.data != odd.ctypes.data and t.shape == (64,)  # misaligned: copied
    plain = np.zeros(1 << 16, np.float32)   # not an executable's output (a view of a TF tensor, a
    assert to_tensor(plain)._numpy().ctypes.data != plain.ctypes.data  # constant...): copied
    x = tf.constant(np.ones(1 << 12, np.float32))
    assert to_tensor(x._numpy())._numpy().ctypes.data != x._numpy().ctypes.data
    ro = np.ones(3, np.int32)
    ro.setflags(write=False)
    assert to_tensor(ro).numpy().tolist() == [1, 1, 1]
    assert to_tensor(np.float32(2.0)).numpy() == 2.0


def test_direct_launch_keeps_structure_variables_and_errors():
    v = tf.Variable(np.ones((2, 2), np.float32))

    def step(x):
        v.assign_add(x)
        return {"sum": tf.reduce_sum(v), "x": x}
    f = txc.function(step, jit_compile=True)
    x = tf.constant(np.full((2, 2), 0.5, np.float32))
    out = f(x)
    assert f.get_compiled(x)._direct is not None
    assert out["sum"].numpy() == pytest.approx(6.0) and out["x"].numpy().tolist() == x.numpy().tolist()
    np.testing.assert_allclose(v.numpy(), 1.5)

    def bad(x):
        return tf.strings.length(tf.strings.as_string(x))
    with pytest.raises(Exception):
        txc.function(bad, jit_compile=True)(tf.constant([1.0]))


_CHILD = textwrap.dedent("""
    import json, logging, sys
    import numpy as np, tensorflow as tf
    import tfxla_cluster as txc
    f = txc.function(lambda x: tf.tanh(x) * 2.0 + tf.reduce_max(x), jit_compile=True)
    x = tf.constant(np.linspace(-1, 1, 64, dtype=np.float32))
    y = f(x).numpy()
    (launcher,) = f.get_compiled(x).launchers.values()
    (compiled,) = launcher.cache.values()
    json.dump({"origin": compiled.origin, "y": y.tolist()}, sys.stdout)
""")


def _child(flags: str) -> dict:
    env = dict(os.environ, TF_XLA_FLAGS=flags, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_persistent_cache_is_reused_by_a_second_process(tmp_path):
    store, other = tmp_path / "store", tmp_path / "other"
    first = _child(f"--tf_xla_persistent_cache_directory={store} --tf_xla_persistent_cache_prefix=mine")
    assert first["origin"] == "compiled"
    entries = list(store.glob("*.tfxla"))  # (TF itself may keep its own entries there too)
    # The cluster keyed by its LLVM IR and keyed before lowering (a second process skips lowering too), the
    # native thread pool's code and the function's must-compile check. (TF's XLA kernel list is stored only
    # when read whole: a small function asks TF about its few ops one by one, cheaper than the list's key.)
    assert len(entries) == 4 and all(e.name.startswith("mine__") for e in entries)
    headers = [read_entry(e)[0] for e in entries]
    assert sorted(h.get("kind", "ir") for h in headers) == ["cluster", "clustering", "ir", "ir"]
    assert [h["module"] for h in headers].count("tfxla_native_pool") == 1
    second = _child(f"--tf_xla_persistent_cache_directory={store} --tf_xla_persistent_cache_prefix=mine")
    assert second["origin"] == "persistent cache" and second["y"] == first["y"]
    # Read-only: entries are read but never written.
    third = _child(f"--tf_xla_persistent_cache_directory={other} --tf_xla_persistent_cache_read_only=true")
    assert third["origin"] == "compiled" and not list(other.glob("*.tfxla"))


def test_outputs_and_variables_never_share_memory_handed_to_tf():
    v = tf.Variable(np.zeros(1024, np.float32))

    def f(x):
        y = x * 2.0
        v.assign(y)
        return y, y, v.read_value()
    ours = txc.function(f, jit_compile=True)
    a, b, c = ours(tf.ones(1024))
    pointers = {t._numpy().ctypes.data for t in (a, b, c, v.read_value())}
    v.assign_add(tf.ones(1024))  # an in-place update of the variable's buffer
    assert a.numpy()[0] == b.numpy()[0] == c.numpy()[0] == 2.0 and v.numpy()[0] == 3.0
    assert len(pointers) >= 3


def test_direct_launch_is_not_used_inside_another_functions_trace():
    ours = txc.function(lambda x: tf.nn.relu(x) * 2.0, jit_compile=True)
    outer = tf.function(lambda x: ours(x) + 1.0)  # traced: our call must become graph ops
    x = tf.constant([-1.0, 2.0])
    assert outer(x).numpy().tolist() == [1.0, 5.0]
    assert ours(x).numpy().tolist() == [0.0, 4.0]
