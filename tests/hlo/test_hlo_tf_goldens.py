"""TF 2.21's own HLO (before and after XLA:CPU's pipeline) parses, verifies, and evaluates to what
TF's jit_compile=True run returned. Goldens come from data/make_tf_goldens.py."""
import pathlib

import ml_dtypes
import numpy as np
import pytest

from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module

TF_DIR = pathlib.Path(__file__).parent / "data" / "tf"
CASES = sorted(p.stem for p in TF_DIR.glob("*.npz"))


def _load(name):
    data = np.load(TF_DIR / f"{name}.npz")
    args = [data[f"arg{i}"] for i in range(sum(k.startswith("arg") for k in data.files))]
    outs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    # np.savez stores bfloat16 as raw 2-byte voids.
    outs = [o.view(ml_dtypes.bfloat16) if o.dtype.kind == "V" and o.dtype.itemsize == 2 else o for o in outs]
    return args, outs


@pytest.mark.parametrize("stage", ["hlo", "optimized_hlo"])
@pytest.mark.parametrize("name", CASES)
def test_tf_module_evaluates_like_tf(name, stage):
    module = parse_module((TF_DIR / f"{name}.{stage}.txt").read_text(encoding="utf-8"))
    verify_module(module)
    args, want = _load(name)
    got = evaluate(module, *args)
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            # XLA:CPU uses its own exp/log/tanh approximations and reassociates sums.
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=3e-5, atol=3e-5)


def test_goldens_present():
    assert {"mlp", "softmax", "reduce", "conv", "rng", "maxpoolgrad"} <= set(CASES)
