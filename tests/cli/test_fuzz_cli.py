"""The command line's bad-input fuzzer (``tools/fuzz_cli.py``) in CI, and what it found (issue 19): mutated
GraphDefs, HLO modules and flag strings must end in exit 0 (for a GraphDef TF's importer takes) or exit 2 with
one line naming the input — never an internal error, a traceback, a hang or an aborted process."""
from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
import tensorflow as tf

import fuzz_cli  # tools/ is on sys.path (setup.cfg pythonpath)
from tfxla_cluster.cli import main

ROOT = Path(__file__).resolve().parents[2]
AUTO = fuzz_cli.AUTO_FLAGS


def _run(capsys, *argv) -> tuple[int, list[str]]:
    code = main(list(argv))
    _, err = capsys.readouterr()
    return code, [ln for ln in err.splitlines() if ln.strip()]


def test_bounded_cli_fuzz():
    """240 cases of a fixed seed, in worker processes as ``tools/fuzz_cli.py`` runs them: no defect."""
    summary = fuzz_cli.fuzz(seed=50, count=240, seconds=120)
    assert summary["count"] == 240
    assert {"0", "2"} <= set(summary["exit_codes"])  # some inputs are good, most are not
    assert not summary["defects"], [(d["index"], d["mutations"], d["defect"], d["stderr"][:1])
                                    for d in summary["defects"]]


def _graph(name: str) -> tf.compat.v1.GraphDef:
    return text_format.Parse((ROOT / "graphs" / f"{name}.pbtxt").read_text(), tf.compat.v1.GraphDef())


def _write(tmp_path, gd, name="g.pbtxt") -> Path:
    path = tmp_path / name
    path.write_text(text_format.MessageToString(gd))
    return path


def test_const_value_of_another_dtype_is_an_error_not_an_abort(tmp_path, capsys):
    """A Const whose value's dtype is not its ``dtype`` attr: TF's importer takes it, and grappler's constant
    folding then CHECK-fails and aborts the process (fuzz_cli seed 3 case 695); ours says what TF's Const
    kernel says."""
    gd = _graph("string_ops")
    const = next(n for n in gd.node if n.op == "Const" and n.attr["dtype"].type == tf.float32.as_datatype_enum)
    const.attr["value"].tensor.dtype = tf.float16.as_datatype_enum
    path = _write(tmp_path, gd)
    code, lines = _run(capsys, "hlo", str(path), "--grappler", "--flags", AUTO)
    assert code == 2 and len(lines) == 1 and str(path) in lines[0], lines
    assert f"Node '{const.name}': Type mismatch between value (half) and dtype (float)" in lines[0]


def test_text_that_is_not_utf8_is_rejected_not_rewritten(tmp_path, capsys):
    """Bytes that are not UTF-8 inside a text GraphDef were replaced by U+FFFD, changing names and tensor
    contents silently (fuzz_cli seed 2 case 54); TF's Python text parser refuses such text, and so do we."""
    data = (ROOT / "graphs" / "mlp.pbtxt").read_bytes()
    at = data.index(b'name: "') + 7
    path = tmp_path / "latin1.pbtxt"
    path.write_bytes(data[:at] + b"\xff" + data[at:])
    code, lines = _run(capsys, "info", str(path))
    assert code == 2 and len(lines) == 1 and str(path) in lines[0], lines
    assert f"not UTF-8 text (byte 0xff at offset {at})" in lines[0]


@pytest.mark.parametrize("mutation", ["min_consumer", "missing_input", "extra_input", "input_type"])
def test_graphs_tf_importer_rejects_exit_2(tmp_path, capsys, mutation):
    """GraphDefs TF's importer rejects that ours took with exit 0 (fuzz_cli seed 1): versions above this TF,
    a node with fewer or more inputs than its op's signature, an input of the wrong type."""
    gd = _graph("while_loop")
    if mutation == "min_consumer":
        gd.versions.min_consumer = 10**6
    elif mutation == "missing_input":
        next(n for n in gd.node if n.op == "Identity").ClearField("input")
    elif mutation == "extra_input":
        next(n for n in gd.node if n.op == "Const").input.append(gd.node[0].name)
    else:
        next(n for n in gd.node if n.op == "Const" and n.attr["dtype"].type == tf.int32.as_datatype_enum) \
            .attr["dtype"].type = tf.float16.as_datatype_enum
    path = _write(tmp_path, gd)
    assert not fuzz_cli.tf_importer_accepts(path)
    for command in ("info", "mark"):
        code, lines = _run(capsys, command, str(path))
        assert code == 2 and len(lines) == 1 and str(path) in lines[0], (command, lines)


def test_errors_found_while_clustering_name_the_file(tmp_path, capsys):
    """A function body's bad node is found when clustering instantiates the body (TF's importer does not
    check bodies); the one line still names the input file (fuzz_cli seed 3, cases 183 and 515)."""
    gd = _graph("while_loop")
    body = next(f for f in gd.library.function if any(n.op == "Tanh" for n in f.node_def))
    del next(n for n in body.node_def if n.op == "Tanh").attr["T"]
    path = _write(tmp_path, gd)
    assert fuzz_cli.tf_importer_accepts(path)
    code, lines = _run(capsys, "mark", str(path), "--flags", AUTO)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"tfxla-cluster: error: INVALID_ARGUMENT: {path}: ")
    assert "NodeDef missing attr 'T'" in lines[0]


@pytest.mark.parametrize("trouble", ["junk_npz", "output_in_missing_dir", "output_is_a_dir"])
def test_run_hlo_bad_files_exit_2(tmp_path, capsys, trouble):
    """An inputs file that is no zip (``zipfile.BadZipFile`` escaped as an internal error) and an output
    path that cannot be written (found after running, as ``FileNotFoundError``): fuzz_cli seed 8."""
    module = tmp_path / "m.hlo"
    module.write_text("HloModule m\n\nENTRY %main (x: f32[3]) -> f32[3] {\n"
                      "  %x = f32[3]{0} parameter(0)\n  ROOT %e = f32[3]{0} exponential(%x)\n}\n")
    argv = ["run-hlo", str(module)]
    if trouble == "junk_npz":
        bad = tmp_path / "in.npz"
        bad.write_bytes(b"PK\x03\x04 not a zip")
        argv += ["--inputs", str(bad)]
    else:
        bad = tmp_path / "no" / "out.npz" if trouble == "output_in_missing_dir" else tmp_path
        argv += ["--output", str(bad)]
    code, lines = _run(capsys, *argv)
    assert code == 2 and len(lines) == 1 and str(bad) in lines[0], lines
    assert "internal error" not in lines[0]


def test_bad_function_body_is_an_error_before_grappler_aborts(tmp_path, capsys):
    """A Const without ``value`` in a while body: TF's importer does not look into bodies, and grappler's
    shape refiner then CHECK-fails (``Map::at``, the process aborts; fuzz_cli seed 14 case 614). Each body
    now goes through TF's importer as its function runtime would instantiate it."""
    gd = _graph("while_loop")
    body = next(f for f in gd.library.function if any(n.op == "Const" for n in f.node_def))
    const = next(n for n in body.node_def if n.op == "Const")
    const.attr["value-uut"].CopyFrom(const.attr["value"])
    del const.attr["value"]
    path = _write(tmp_path, gd)
    assert fuzz_cli.tf_importer_accepts(path)
    code, lines = _run(capsys, "viz", str(path), "-o", str(tmp_path / "g.dot"), "--grappler", "--flags", AUTO)
    assert code == 2 and len(lines) == 1 and str(path) in lines[0], lines
    assert f"Function '{body.signature.name}': NodeDef missing attr 'value'" in lines[0]


def test_malformed_function_input_reference(tmp_path, capsys):
    """``node:output:0  d`` in a function body escaped as ``int()``'s ValueError (an internal error) from the
    function instantiation (fuzz_cli seed 19 case 300)."""
    gd = _graph("while_loop")
    body = next(f for f in gd.library.function if any(":output:" in i for n in f.node_def for i in n.input))
    node = next(n for n in body.node_def if any(":output:" in i for i in n.input))
    k = next(k for k, i in enumerate(node.input) if ":output:" in i)
    node.input[k] += "  d"
    path = _write(tmp_path, gd)
    for command in ("ops", "info", "mark"):
        code, lines = _run(capsys, command, str(path))
        assert code == 2 and len(lines) == 1 and str(path) in lines[0], (command, lines)
        assert f"malformed input '{node.input[k]}'" in lines[0]


def test_usage_errors_are_one_line(capsys):
    """argparse printed its usage block before the error (5 lines; fuzz_cli seed 9, ``aot --threads junk``)."""
    with pytest.raises(SystemExit) as stop:
        main(["aot", "--graph", "g.pbtxt", "--config", "c.pbtxt", "--name", "m", "--out-dir", "o",
              "--threads", "junk"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "argument --threads: invalid int value: 'junk'" in err and "tfxla-cluster aot --help" in err


def test_option_errors_are_not_blamed_on_the_graph(capsys):
    """``aot --name 1abc``: the one line names the option, not the graph file (which is fine)."""
    aot = ROOT / "tools" / "examples" / "aot"
    code, lines = _run(capsys, "aot", "--graph", str(aot / "model.pbtxt"), "--config", str(aot / "model.config.pbtxt"),
                       "--name", "1abc", "--out-dir", "out")
    assert code == 2 and len(lines) == 1 and "model.pbtxt" not in lines[0], lines
    assert "--name '1abc' is not a C identifier" in lines[0]


@pytest.mark.parametrize("trouble", ["name_too_long", "out_dir_is_a_file"])
def test_aot_outputs_that_cannot_be_written(tmp_path, capsys, trouble):
    """``--name`` of 300 characters: ``OSError: File name too long`` escaped (fuzz_cli bounded run)."""
    aot = ROOT / "tools" / "examples" / "aot"
    out, name = tmp_path / "out", "m"
    if trouble == "name_too_long":
        name = "x" * 300
    else:
        out.write_text("a file")
    code, lines = _run(capsys, "aot", "--graph", str(aot / "model.pbtxt"), "--config",
                       str(aot / "model.config.pbtxt"), "--name", name, "--out-dir", str(out))
    assert code == 2 and len(lines) == 1 and f"--out-dir {out}: cannot write" in lines[0], lines


@pytest.mark.parametrize("features, message", [
    ("junk", "--target-features 'junk': 'junk' is not +name or -name"),
    ("+avx2,0", "--target-features '+avx2,0': '0' is not +name or -name"),
    ("+nosuch", "--target-features '+nosuch' rejected by LLVM: '+nosuch' is not a recognized feature"),
])
def test_aot_target_features(tmp_path, capsys, features, message):
    """A feature without its sign made LLVM's assertion abort the probe child, whose path-laden message was
    the one line (fuzz_cli seed 21); and the line blamed the graph file for an option's value."""
    aot = ROOT / "tools" / "examples" / "aot"
    code, lines = _run(capsys, "aot", "--graph", str(aot / "model.pbtxt"), "--config", str(aot / "model.config.pbtxt"),
                       "--name", "m", "--out-dir", str(tmp_path), "--target-features", features)
    assert code == 2 and len(lines) == 1 and message in lines[0] and "model.pbtxt" not in lines[0], lines
