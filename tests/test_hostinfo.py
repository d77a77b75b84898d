"""hostinfo: CPU model, vector ISA, and TF's oneDNN mode — predicted by TF 2.21's rule and checked against
TensorFlow's own IsMklEnabled() in fresh processes on this machine."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tfxla_cluster import hostinfo as H

# A fresh TF per environment: TF reads TF_ENABLE_ONEDNN_OPTS once per process.
_ASK_TF = ("import sys; from tensorflow.python.util import _pywrap_util_port as p; "
           "sys.stdout.write('ONEDNN=%d' % p.IsMklEnabled())")


def _tf_in_child(value: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != H.ONEDNN_ENV}
    if value is not None:
        env[H.ONEDNN_ENV] = value
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def test_prediction_matches_tensorflow_in_every_mode():
    values = [None, "0", "1"]   # unset: TF's default policy for this CPU
    procs = [subprocess.Popen([sys.executable, "-c", _ASK_TF], env=_tf_in_child(v), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for v in values]
    for value, proc in zip(values, procs):
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "ONEDNN=" in out
        tf_says = out.rsplit("ONEDNN=", 1)[1].startswith("1")
        environ = _tf_in_child(value)
        assert H.onednn_enabled(environ) == tf_says, (value, H.onednn_mode(environ))
        assert H.onednn_mode(environ).startswith("on" if tf_says else "off")


def test_in_process_answer_is_tensorflows_once_tf_is_imported():
    tf = pytest.importorskip("tensorflow")
    from tensorflow.python.util import _pywrap_util_port
    assert tf.__version__ and H.onednn_enabled() == bool(_pywrap_util_port.IsMklEnabled())


@pytest.mark.parametrize("value,expected", [("0", False), ("1", True), ("TRUE", True), ("False", False),
                                            ("yes", None), ("", None), (None, None)])
def test_env_is_read_like_tf_read_bool_from_env_var(value, expected):
    assert H.onednn_env({} if value is None else {H.ONEDNN_ENV: value}) is expected


def test_default_policy_needs_a_neural_network_feature_not_just_avx512(monkeypatch):
    monkeypatch.setattr(H, "_is_x86_64_linux", lambda: True)
    skylake_x = {"avx2": True, "avx512f": True, "avx512bw": True}
    assert H.onednn_default(skylake_x) is False
    assert H.onednn_default({**skylake_x, "avx512vnni": True}) is True
    assert H.onednn_default({"avx2": True, "avxvnni": True}) is True   # Alder Lake: AVX_VNNI without AVX-512
    assert H.onednn_default({"avx2": True, "fma": True}) is False      # an AVX2 EPYC
    monkeypatch.setattr(H, "_is_x86_64_linux", lambda: False)
    assert H.onednn_default({**skylake_x, "avx512vnni": True}) is False


def test_vector_isa_and_summary():
    assert H.vector_isa({"sse2": True, "avx": True, "avx2": True}) == "AVX2"
    assert H.vector_isa({"sse2": True, "avx2": True, "avx512f": True}) == "AVX-512"
    assert H.vector_isa({"sse2": True}) == "SSE2"
    summary = H.host_summary()
    assert H.cpu_model() in summary and H.vector_isa() in summary and "TF oneDNN o" in summary
    assert "\n" not in summary
    d = H.host_dict()
    assert d["vector_isa"] == H.vector_isa() and d["tf_onednn"] == H.onednn_enabled()
