"""BuildXlaOps' debugging flags (``--tf_xla_check_cluster_{input,output}_numerics``,
``--tf_xla_print_cluster_outputs``) on our launch nodes: the same failures, with TF's messages.

Real TF runs in a subprocess (TF_XLA_FLAGS is read once per process); cluster numbers are process-global
in TF (its eager ops are clustered too), so they are compared as ``cluster_N``.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc

FLAGS = ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1 "
         "--tf_xla_check_cluster_input_numerics --tf_xla_check_cluster_output_numerics")

BODY = textwrap.dedent('''
    import numpy as np, tensorflow as tf

    def f(x, y):
        a = tf.math.log(x) * 2.0 + y                 # a cluster; log of a negative x is NaN
        s = tf.strings.as_string(a)                  # strings split the graph
        return tf.exp(a) + tf.cast(tf.strings.length(s), tf.float32)

    def cases():
        x = np.ones(3, np.float32)
        nan = tf.strings.to_number(["nan"] * 3)      # made by an op XLA never clusters
        return {"ok": (x, x), "output": (-x, x), "input": (x, nan)}
''')


def _messages(fn, cases) -> dict[str, str]:
    out = {}
    for name, args in cases.items():
        try:
            fn(*args)
            out[name] = "ok"
        except tf.errors.InvalidArgumentError as e:
            lines = [ln for ln in str(e).splitlines() if "CheckNumerics failed" in ln]
            line = lines[0] if lines else str(e).splitlines()[0]
            out[name] = re.sub(r"cluster_\d+", "cluster_N", line[line.index("CheckNumerics"):])
    return out


@pytest.fixture(scope="module")
def tf_messages() -> dict[str, str]:
    script = BODY + textwrap.dedent('''
        import json, re
        g = tf.function(f)
        out = {}
        for name, args in cases().items():
            try:
                g(*args); out[name] = "ok"
            except tf.errors.InvalidArgumentError as e:
                line = [ln for ln in str(e).splitlines() if "CheckNumerics failed" in ln][0]
                out[name] = re.sub(r"cluster_\\d+", "cluster_N", line[line.index("CheckNumerics"):])
        print("@@" + json.dumps(out))
    ''')
    env = dict(os.environ, TF_XLA_FLAGS=FLAGS, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("@@"))
    import json

    return json.loads(line[2:])


def test_check_numerics_flags_fail_like_tf(tf_messages):
    namespace: dict = {}
    exec(BODY, namespace)
    ours = _messages(txc.function(namespace["f"], flags=FLAGS), namespace["cases"]())
    assert tf_messages["ok"] == "ok" and tf_messages["output"] != tf_messages["input"]
    assert ours == tf_messages


def test_debugging_ops_have_tf_names_and_leave_results_alone():
    namespace: dict = {}
    exec(BODY, namespace)
    flags = FLAGS + " --tf_xla_print_cluster_outputs"
    g = txc.function(namespace["f"], flags=flags)
    x = np.full(3, 2.0, np.float32)
    np.testing.assert_allclose(g(x, x).numpy(), tf.function(namespace["f"])(x, x).numpy(), rtol=1e-6)
    compiled = g.get_compiled(x, x)
    ops = {nd.name: nd.op for nd in compiled.graph_def.node}
    cluster = next(c for c, members in compiled.clusters.items() if "Log" in members)
    scope = f"{cluster}_1/"
    assert ops[scope + "check_input_0"] == ops[scope + "check_input_1"] == "CheckNumerics"
    assert ops[scope + "print_0"] == "Print" and ops[scope + "check_output_0"] == "CheckNumerics"
    # Consumers read through the chain launch → Print → CheckNumerics.
    check = next(nd for nd in compiled.graph_def.node if nd.name == scope + "check_output_0")
    assert list(check.input) == [scope + "print_0"]
    assert not any(f"{cluster}:0" == r for nd in compiled.graph_def.node if not nd.name.startswith(scope)
                   for r in nd.input)
