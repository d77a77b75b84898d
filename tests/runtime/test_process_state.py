"""Process state is one object (tfxla_cluster.process_state.PROCESS) and environment switches come from
one table (flags.ENV_SWITCHES): the counters TF keeps per process number dumps and clusters as TF's
do, and no module reads an environment variable the table does not list."""
from __future__ import annotations

import re
from pathlib import Path

from tfxla_cluster import flags
from tfxla_cluster.jit import dumps, mark_for_compilation
from tfxla_cluster.passes import dump as hlo_dump
from tfxla_cluster.process_state import PROCESS, ProcessState

PACKAGE = Path(flags.__file__).resolve().parent


def test_dump_names_count_per_name_as_tf_dump_graph() -> None:
    dumps.reset_counters()
    names = [dumps.unique_filename(n) for n in ("a/b", "a/b", "c", "a/b")]
    assert names == ["a_b.pbtxt", "a_b_1.pbtxt", "c.pbtxt", "a_b_2.pbtxt"]
    assert PROCESS.dump_names["a_b"] == 3
    dumps.reset_counters()
    assert dumps.unique_filename("a/b") == "a_b.pbtxt"


def test_module_ids_are_process_wide_and_increasing() -> None:
    first = hlo_dump.next_module_id()
    assert [hlo_dump.next_module_id() for _ in range(3)] == [first + 1, first + 2, first + 3]


def test_clustering_state_is_the_process_state_unless_a_fresh_one_is_given() -> None:
    assert mark_for_compilation.GLOBAL_STATE is PROCESS
    fresh = ProcessState()
    assert [fresh.next_sequence(7), fresh.next_sequence(7), fresh.next_sequence(8)] == [0, 1, 0]
    fresh.fuel = 3
    fresh.reset()
    assert fresh.fuel is None and fresh.next_sequence(7) == 0


def test_env_switches_are_read_when_used_with_their_defaults(monkeypatch) -> None:
    monkeypatch.delenv("TFXLA_NATIVE_LAUNCH", raising=False)
    assert flags.env_switch("TFXLA_NATIVE_LAUNCH") == "1"
    monkeypatch.setenv("TFXLA_NATIVE_LAUNCH", "0")
    assert flags.env_switch("TFXLA_NATIVE_LAUNCH") == "0"
    assert flags.env_switch("TF_ENABLE_ONEDNN_OPTS", {}) is None
    assert flags.env_switch("CC", {"CC": "clang"}) == "clang"


def test_no_module_reads_an_environment_variable_outside_the_tables() -> None:
    """Reads of os.environ outside flags.py/_quiet.py name a flag variable (TF_XLA_FLAGS, XLA_FLAGS,
    TFXLA_CLUSTER_FLAGS) or save one for restoring; every other variable goes through env_switch."""
    read = re.compile(r"os\.environ(?:\.get\(|\[)\s*([^,)\]]+)")
    allowed = {'"TF_XLA_FLAGS"', '"XLA_FLAGS"', "flags.TFXLA_CLUSTER_FLAGS", '"TFXLA_NATIVE_LAUNCH"'}
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("flags.py", "_quiet.py"):
            continue
        for m in read.finditer(path.read_text(encoding="utf-8")):
            line = path.read_text(encoding="utf-8")[:m.start()].count("\n") + 1
            assert m.group(1).strip() in allowed, f"{path.relative_to(PACKAGE)}:{line} reads {m.group(1)}"
    for name in ("TFXLA_NATIVE_LAUNCH", "TF_DUMP_GRAPH_PREFIX", "TFXLA_CODEGEN_POOL", "TFXLA_CLUSTER_PROGRESS"):
        assert name in flags.ENV_SWITCHES and flags.ENV_SWITCHES[name].help
