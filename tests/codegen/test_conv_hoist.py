"""XLA's elemental convolution loop adds some products rounded (LLVM hoists their multiply out of the output
loop: codegen/conv_hoist.py): bits against TF's XLA on depthwise convolutions that algsimp swaps (a filter
larger than the image), with overflowing products of both signs meeting in one output (fuzz seed 137001111:
f64, TF NaN where one FMA chain keeps +inf). The cases are the differences a sweep of such convolutions found
before (tests/data/conv_elemental_rounded_taps.json: F32 and F64, channel multipliers 1 and 2, strides 1 and 2,
SAME and VALID, the filter an argument or a constant)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfxla_cluster as txc
from tfxla_cluster.codegen import conv_hoist
from tfxla_cluster.hlo.parser import parse_module

CASES = json.loads((Path(__file__).resolve().parents[1] / "data" / "conv_elemental_rounded_taps.json")
                   .read_text(encoding="utf-8"))


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same bits, NaN positions included (a NaN's sign and payload aside)."""
    na, nb = np.isnan(a), np.isnan(b)
    return a.shape == b.shape and bool((na == nb).all()) and a[~na].tobytes() == b[~nb].tobytes()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "{dtype}-{input}-{filter}-s{stride}-{padding}".format(**c)
                         + ("-const" if c["filter_const"] else ""))
def test_depthwise_overflow_bits_match_xla(case):
    x = np.array(case["x"], case["dtype"]).reshape(case["input"])
    w = np.array(case["w"], case["dtype"]).reshape(case["filter"])
    strides = [1, case["stride"], case["stride"], 1]
    if case["filter_const"]:   # a constant in the graph, as the fuzzer has it (XLA folds its reverse)
        def f(xt):
            return tf.nn.depthwise_conv2d(xt, tf.constant(w), strides, case["padding"])
        args = (x,)
    else:
        def f(xt, wt):
            return tf.nn.depthwise_conv2d(xt, wt, strides, case["padding"])
        args = (x, w)
    want = tf.function(f, jit_compile=True)(*args).numpy()
    got = txc.function(f, jit_compile=True)(*args).numpy()
    assert _bits_equal(want, got), (want.ravel(), got.ravel())


_SEED_137001111 = """HloModule m
ENTRY e {
  w = f64[2,3,1,2]{3,2,1,0} parameter(0)
  x = f64[1,5,1,1]{3,2,1,0} parameter(1)
  ROOT c = f64[1,3,1,2]{3,2,1,0} convolution(w, x), window={size=5x1 stride=2x2 pad=3_4x-1_-1 rhs_reversal=1x1}, dim_labels=01fb_o01i->f01b
}"""


def test_rounded_taps_are_those_of_tfs_dump():
    """TF 2.21's optimised IR of seed 137001111's swapped convolution (its after-optimisations HLO above)
    multiplies three products before the output loop (``vmulsd``, then ``vaddsd``): window position 4 at
    output position 0 for both batch elements, window position 2 at output position 1 for batch element 0
    only; every other tap is a ``vfmadd``."""
    conv = parse_module(_SEED_137001111).entry.root
    rounded = conv_hoist.rounded_taps(conv)
    want = np.zeros((6, 5), bool)
    want[0, 4] = want[1, 4] = want[2, 2] = True
    assert rounded is not None and (rounded == want).all(), rounded.astype(int)


def test_large_or_unmodelled_convolutions_report_none():
    """Beyond MAX_WORK output-tap pairs (loops LLVM does not unroll) or in a non-row-major layout: None
    (every product fused, as before)."""
    text = _SEED_137001111.replace("f64[1,5,1,1]{3,2,1,0}", "f64[1,5,1,1]{0,1,2,3}")
    conv = parse_module(text).entry.root
    assert not conv_hoist.supported(conv) and conv_hoist.rounded_taps(conv) is None
