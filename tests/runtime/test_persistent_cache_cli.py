"""The persistent compile cache as a user sees it: a hit shows in ``run``'s summary, and ``cache clear``
leaves nothing behind — TF's own entries (written by real XLA under the same flags) included."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import tensorflow as tf

@tf.function(jit_compile=True)
def step(x):
    return tf.nn.relu(x * 2.0 - 1.0)

for _ in range(3):
    step(tf.ones([8]))
print("done")
"""


def _cli(*args: str, cache_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "XLA_FLAGS")}
    env["TF_XLA_FLAGS"] = f"--tf_xla_persistent_cache_directory={cache_dir}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_persistent_hit_is_shown_in_run_summary(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cache_dir = tmp_path / "cache"
    first = _cli("-m", "tfxla_cluster", "run", str(script), cache_dir=cache_dir, cwd=tmp_path)
    assert "cluster_0: " in first.stderr and "1 compile(s) in" in first.stderr
    assert "persistent cache" not in first.stderr
    second = _cli("-m", "tfxla_cluster", "run", str(script), cache_dir=cache_dir, cwd=tmp_path)
    assert "0 compile(s) + 1 loaded from the persistent cache in" in second.stderr, second.stderr[-2000:]
    assert "3 execution(s)" in second.stderr


def test_cache_clear_removes_tfs_own_entries_too(tmp_path):
    cache_dir = tmp_path / "cache"
    # Real XLA and ours, in one process, with one cache directory.
    _cli("-c", "import tensorflow as tf, tfxla_cluster as txc\n"
         "f = lambda x: x * 3.0 + 1.0\n"
         "tf.function(f, jit_compile=True)(tf.ones([4]))\n"
         "txc.function(f, jit_compile=True)(tf.ones([4]))\n", cache_dir=cache_dir, cwd=tmp_path)
    names = sorted(p.name for p in cache_dir.iterdir())
    theirs = [n for n in names if n.endswith("__XLA_CPU_JIT.pb")]
    ours = [n for n in names if n.endswith(".tfxla")]
    assert len(theirs) == 1 and theirs[0].startswith("xla_compile_cache__") and len(ours) == 4, names
    listing = _cli("-m", "tfxla_cluster", "cache", "list", "--dir", str(cache_dir), cache_dir=cache_dir, cwd=tmp_path)
    # Ours: the cluster keyed by its LLVM IR and keyed before lowering, the native thread pool and the
    # function's must-compile check (TF's XLA kernel list is stored only when read whole, not for a function
    # of a few ops).
    assert theirs[0] in listing.stdout and all(o in listing.stdout for o in ours)
    assert "5 entries, 0 corrupt" in listing.stdout
    cleared = _cli("-m", "tfxla_cluster", "cache", "clear", "--dir", str(cache_dir), cache_dir=cache_dir, cwd=tmp_path)
    assert "removed 5 entries" in cleared.stdout and "1 of them TF's own" in cleared.stdout
    assert not list(cache_dir.iterdir())
