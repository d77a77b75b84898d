"""A SavedModel's shapes: what its signature and variables know is what ``info`` prints and what
``hlo`` lowers with (only the batch dimension the signature leaves open needs ``--arg-shape``)."""
from __future__ import annotations

import re

import pytest
import tensorflow as tf

from tfxla_cluster.cli import main


class _Model(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(tf.ones([3, 5]))
        self.b = tf.Variable(tf.zeros([5]))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.nn.relu(tf.matmul(x, self.w) + self.b) * 2.0}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("sm") / "model"
    model = _Model()
    tf.saved_model.save(model, str(path), signatures=model.__call__)
    return path


def test_info_prints_the_signatures_output_shapes(saved_model, capsys):
    assert main(["info", str(saved_model)]) == 0
    out = capsys.readouterr().out
    loaded = tf.saved_model.load(str(saved_model)).signatures["serving_default"]
    (spec,) = loaded.structured_outputs.values()
    want = "[" + ",".join("?" if d is None else str(d) for d in spec.shape.as_list()) + "]"
    assert want == "[?,5]"
    outputs = out.split("outputs:")[1]
    assert re.search(rf"<- \S+: DT_FLOAT {re.escape(want)}", outputs), out


def test_hlo_needs_only_the_open_batch_dim(saved_model, capsys):
    flags = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    assert main(["hlo", str(saved_model), "--flags", flags, "--arg-shape", "x=4,3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"entry_computation_layout=\{\(f32\[4,3\]\{1,0\}, f32\[3,5\]\{1,0\}, f32\[5\]\{0\}\)->"
                     r"\(f32\[4,5\]\{1,0\}\)\}", out), out
