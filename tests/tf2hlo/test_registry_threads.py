"""The lowering registry's first load is thread-safe: threads racing on the first lookup all see the
complete table (the import-once flag is only set after every family module has registered)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent("""
    import threading
    from tfxla_cluster.tf2hlo import registry
    assert not registry._loaded
    n = 8
    barrier = threading.Barrier(n)
    seen = [None] * n
    def first_lookup(i):
        barrier.wait()
        # A late family's op and the size of the table, as the first call sees them.
        seen[i] = (registry.lookup("Conv2D") is not None, len(registry.lowered_ops()))
    threads = [threading.Thread(target=first_lookup, args=(i,)) for i in range(n)]
    for t in threads: t.start()
    for t in threads: t.join()
    full = len(registry.lowered_ops())
    assert all(s == (True, full) for s in seen), (seen, full)
    print("ok", full)
""")


def test_concurrent_first_lookup_sees_full_table() -> None:
    # A fresh interpreter: in this one the table is usually loaded already.
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok ")
