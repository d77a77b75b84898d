"""Bad input on every command (issue 19): exit 2 with one line naming the file and the problem; never exit
0 on a GraphDef TF's importer rejects; corrupt persistent-cache entries are reported as corrupt."""
from __future__ import annotations

import os

import pytest
import tensorflow as tf
from google.protobuf import text_format

from tfxla_cluster.cli import main

PLACEHOLDER = 'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }\n'
BAD_GRAPHS = {
    "attr_wrong_type": PLACEHOLDER + 'node { name: "r" op: "Relu" input: "x" attr { key: "T" value { s: "float" } } }',
    "attr_not_allowed": PLACEHOLDER + 'node { name: "r" op: "Relu" input: "x" attr { key: "T" value { type: DT_STRING } } }',
    "attr_list_for_scalar": PLACEHOLDER + 'node { name: "r" op: "Relu" input: "x" attr { key: "T" value { list { type: DT_FLOAT } } } }',
    "int_attr_as_float": 'node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } '
                        'attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } } '
                        'int_val: 1 } } } }\n'
                        'node { name: "s" op: "Split" input: "c" input: "c" attr { key: "T" value { type: DT_INT32 } } '
                        'attr { key: "num_split" value { f: 2.0 } } }',
}


def _tf_rejects(text: str) -> bool:
    gd = text_format.Parse(text, tf.compat.v1.GraphDef())
    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(gd, name="")
    except (ValueError, tf.errors.InvalidArgumentError):
        return True
    return False


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", sorted(BAD_GRAPHS))
@pytest.mark.parametrize("command", ["info", "mark", "explain", "hlo"])
def test_graph_tf_rejects_is_rejected(tmp_path, capsys, name, command):
    assert _tf_rejects(BAD_GRAPHS[name]), "TF's importer rejects it"
    path = tmp_path / f"{name}.pbtxt"
    path.write_text(BAD_GRAPHS[name])
    code, _, err = _run(capsys, command, str(path))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "internal error" not in lines[0], err
    assert "attr" in lines[0]


def test_valid_attrs_still_load(tmp_path, capsys):
    path = tmp_path / "ok.pbtxt"
    path.write_text(PLACEHOLDER + 'node { name: "r" op: "Relu" input: "x" attr { key: "T" value { type: DT_FLOAT } } }')
    assert not _tf_rejects(path.read_text(encoding="utf-8"))
    code, out, _ = _run(capsys, "info", str(path))
    assert code == 0 and "Relu" in out


def _entry(d, name):
    return d / f"xla_compile_cache__{name}.tfxla"


@pytest.fixture
def corrupt_cache(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    _entry(d, "list").write_bytes(b"[1, 2]\nobject")
    _entry(d, "string").write_bytes(b'"text"\n')
    _entry(d, "binary").write_bytes(b"\xff\xfe\n")
    _entry(d, "dir").mkdir()
    os.symlink(_entry(d, "loop"), _entry(d, "loop"))
    return d


@pytest.mark.parametrize("action", ["list", "verify"])
def test_cache_corrupt_entries_are_reported(corrupt_cache, capsys, action):
    code, out, err = _run(capsys, "cache", action, "--dir", str(corrupt_cache))
    assert code == (1 if action == "verify" else 0) and not err
    for name, why in [("list", "not an object"), ("string", "not an object"), ("binary", "unreadable header"),
                      ("dir", "is a directory"), ("loop", "symbolic links")]:
        line = next(ln for ln in out.splitlines() if f"__{name}.tfxla" in ln)
        assert "CORRUPT" in line and why in line, line
    assert "5 entries, 5 corrupt" in out


def test_cache_clear_with_a_directory_entry(corrupt_cache, capsys):
    code, out, err = _run(capsys, "cache", "clear", "--dir", str(corrupt_cache))
    assert code == 1 and not err
    assert "removed 4 entries" in out and "__dir.tfxla  CORRUPT (is a directory; not removed)" in out
    assert [p.name for p in corrupt_cache.iterdir()] == ["xla_compile_cache__dir.tfxla"]


@pytest.mark.parametrize("value", ["9" * 5000, "-" + "1" * 4400])
def test_huge_integer_flag_value_is_a_flag_error(capsys, value):
    code, _, err = _run(capsys, "flags", "--flags", f"--tf_xla_min_cluster_size={value}")
    assert code == 2 and "Couldn't interpret value" in err and "internal error" not in err


def test_leading_zeros_are_fine(capsys):
    code, out, _ = _run(capsys, "flags", "--flags", "--tf_xla_min_cluster_size=" + "0" * 5000 + "3")
    assert code == 0 and "tf_xla_min_cluster_size = 3" in out


def test_cache_entries_that_break_the_reader_are_corrupt(tmp_path, capsys):
    """A header nested too deep for json (RecursionError), a FIFO (reading would block forever) and a
    dangling symlink are corrupt entries, not internal errors or hangs."""
    d = tmp_path / "cache"
    d.mkdir()
    _entry(d, "deep").write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\nobject")
    os.mkfifo(_entry(d, "fifo"))
    os.symlink(tmp_path / "missing", _entry(d, "dangling"))
    for action in ("list", "verify"):
        code, out, err = _run(capsys, "cache", action, "--dir", str(d))
        assert code == (1 if action == "verify" else 0) and not err
        for name, why in [("deep", "unreadable header"), ("fifo", "not a regular file"),
                          ("dangling", "No such file")]:
            line = next(ln for ln in out.splitlines() if f"__{name}.tfxla" in ln)
            assert "CORRUPT" in line and why in line, line


def test_function_with_duplicate_node_names_is_rejected(tmp_path, capsys):
    """TF's importer rejects a library function whose body repeats a node name (its message: the function
    it built from the body differs from the library's); so do info and mark, with TF's message."""
    text = ('library { function { signature { name: "f" output_arg { name: "y" type: DT_FLOAT } } '
            'node_def { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } '
            'attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { } float_val: 1 } } } } '
            'node_def { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } '
            'attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { } float_val: 2 } } } } '
            'ret { key: "y" value: "c:output:0" } } }\n' + PLACEHOLDER)
    assert _tf_rejects(text)
    path = tmp_path / "dup.pbtxt"
    path.write_text(text)
    for command in ("info", "mark"):
        code, _, err = _run(capsys, command, str(path))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and str(path) in lines[0], err
        assert "Cannot add function 'f' because a different function with the same name" in lines[0], err
