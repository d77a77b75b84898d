"""TF's dumps of the passes after clustering (``encapsulate_subgraphs_before/after``, ``build_xla_ops``,
``encapsulate_fdef_<cluster>``), written by :func:`tfxla_cluster.jit.build_xla_ops_dump.write_tf_dumps`,
against real TF's.

TF writes them when ``VLOG_IS_ON(1)`` holds in encapsulate_subgraphs_pass.cc / build_xla_ops_pass.cc
(``TF_CPP_VMODULE=encapsulate_subgraphs_pass=1,build_xla_ops_pass=1`` or ``TF_CPP_MAX_VLOG_LEVEL>=1``),
not under ``--tf_xla_clustering_debug`` (which only adds ``before_increase_dynamism_for_auto_jit_pass``).

The recordings (``tests/data/encapsulate_tf/<function>/``) are real TF's dumps for corpus functions
(``PYTHONPATH=tools python -m tests.e2e.test_encapsulate_dumps --record`` rewrites them). Each test feeds TF's own
``encapsulate_subgraphs_before`` graph (the marked graph) to our TF-form rewrite and requires TF's
``encapsulate_subgraphs_after`` (node names, ops, inputs, attribute names; the cluster functions
equal as protos) and ``build_xla_ops`` (same, incl. the ``_XlaCompile``/``_XlaRun``/``_XlaMerge``
attributes' values).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest


HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "encapsulate_tf"
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
#: corpus functions: plain, outputs used by TF ops, resources, control flow, Keras, training
FUNCTIONS = ["strings_mid", "var_updates", "cond_both_ways", "while_data_dependent", "keras_dense",
             "train_sgd_manual", "print_and_asserts", "dynamic_batch"]
KINDS = ("encapsulate_subgraphs_before", "encapsulate_subgraphs_after", "build_xla_ops")


def _load(path: Path):
    import tf_record

    return tf_record.load_graph_def(path)


def _ours(before):
    from tfxla_cluster.graph.graph import Graph
    from tfxla_cluster.tfops.cluster_boundary import cluster_boundaries
    from tfxla_cluster.jit import build_xla_ops_dump as enc

    clusters: dict[str, list[str]] = {}
    for nd in before.node:
        if "_XlaCluster" in nd.attr:
            clusters.setdefault(nd.attr["_XlaCluster"].s.decode(), []).append(nd.name)
    graph = Graph(before)
    tfcs = enc.tf_clusters(cluster_boundaries(graph, clusters).values())
    after = enc.tf_encapsulated_graph(graph, tfcs)
    return after, enc.tf_build_xla_ops_graph(after, tfcs)


def _structure(gd, values: bool = False) -> list[tuple]:
    """Per node: name, op, inputs, attribute names (and values of the small structural attrs). Sorted:
    TF adds the call nodes (and so their _XlaCompile/_XlaRun groups) in the order of a hash map that
    differs from process to process."""
    out = []
    for nd in gd.node:
        attrs = tuple(sorted(nd.attr))
        if values:
            attrs = tuple((k, _attr_bytes(nd, k)) for k in attrs if k not in ("value", "_output_shapes"))
        out.append((nd.name, nd.op, tuple(nd.input), nd.device, attrs))
    return sorted(out)


def _attr_bytes(nd, key: str) -> bytes:
    if key == "config_proto":   # a serialized ConfigProto whose map order TF does not fix
        from tensorflow.core.protobuf import config_pb2

        cfg = config_pb2.ConfigProto()
        cfg.ParseFromString(nd.attr[key].s)
        return cfg.SerializeToString(deterministic=True)
    return nd.attr[key].SerializeToString(deterministic=True)


def _recorded() -> list[str]:
    return [n for n in FUNCTIONS if (DATA / n / "meta.json").exists()]


def test_recordings_present() -> None:
    assert _recorded() == FUNCTIONS, "run: python -m tests.e2e.test_encapsulate_dumps --record"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_tf_form_equals_tf_dumps(name: str) -> None:
    meta = json.loads((DATA / name / "meta.json").read_text(encoding="utf-8"))
    before, tf_after, tf_build = (_load(DATA / name / meta["files"][k]) for k in KINDS)
    assert any("_XlaCluster" in nd.attr for nd in before.node), "TF clustered nothing"
    after, build = _ours(before)
    assert _structure(after) == _structure(tf_after)
    ours_fns = {f.signature.name: f for f in after.library.function}
    for fdef in tf_after.library.function:
        if fdef.signature.name.startswith("cluster_"):
            assert ours_fns[fdef.signature.name] == fdef, fdef.signature.name
    assert _structure(build, values=True) == _structure(tf_build, values=True)


def test_single_cluster_dumps_are_byte_identical() -> None:
    """With one cluster there is no hash-map order to differ in: the files equal TF's byte for byte
    (TF's float printing included, see dumps.tf_text_format)."""
    from tfxla_cluster.jit.dumps import tf_text_format

    meta = json.loads((DATA / "dynamic_batch" / "meta.json").read_text(encoding="utf-8"))
    before = _load(DATA / "dynamic_batch" / meta["files"]["encapsulate_subgraphs_before"])
    after, build = _ours(before)
    assert tf_text_format(before) == (DATA / "dynamic_batch" / meta["files"]["encapsulate_subgraphs_before"]).read_text(encoding="utf-8")
    assert tf_text_format(after) == (DATA / "dynamic_batch" / meta["files"]["encapsulate_subgraphs_after"]).read_text(encoding="utf-8")
    assert tf_text_format(build) == (DATA / "dynamic_batch" / meta["files"]["build_xla_ops"]).read_text(encoding="utf-8")


def _dumps(before, clusters: dict[str, list[str]], flags) -> list[str]:
    from tfxla_cluster.graph.graph import Graph
    from tfxla_cluster.tfops.cluster_boundary import cluster_boundaries
    from tfxla_cluster.jit.build_xla_ops_dump import write_tf_dumps

    graph = Graph(before)
    return write_tf_dumps(graph, cluster_boundaries(graph, clusters).values(), flags)


def test_dumps_follow_tf_triggers(tmp_path, monkeypatch) -> None:
    """``write_tf_dumps`` writes TF's file names under TF's triggers, in TF's order."""
    from tfxla_cluster import flags as flags_mod
    from tfxla_cluster.jit import dumps

    meta = json.loads((DATA / "strings_mid" / "meta.json").read_text(encoding="utf-8"))
    before = _load(DATA / "strings_mid" / meta["files"]["encapsulate_subgraphs_before"])
    clusters: dict[str, list[str]] = {}
    for nd in before.node:
        if "_XlaCluster" in nd.attr:
            clusters.setdefault(nd.attr["_XlaCluster"].s.decode(), []).append(nd.name)
    monkeypatch.setenv("TF_DUMP_GRAPH_PREFIX", str(tmp_path))
    monkeypatch.delenv("TF_CPP_VMODULE", raising=False)
    monkeypatch.delenv("TF_CPP_MAX_VLOG_LEVEL", raising=False)
    monkeypatch.delenv("TF_CPP_MIN_VLOG_LEVEL", raising=False)
    dumps.reset_counters()
    debug = flags_mod.Flags.parse(FLAGS + " --tf_xla_clustering_debug")
    assert [Path(p).name for p in _dumps(before, clusters, debug)] == \
        ["before_increase_dynamism_for_auto_jit_pass.pbtxt"]
    assert _dumps(before, clusters, flags_mod.Flags.parse(FLAGS)) == []
    monkeypatch.setenv("TF_CPP_VMODULE", "mark_for_compilation_pass=3,encapsulate_subgraphs_pass=1,build_xla_ops_pass=2")
    names = [Path(p).name for p in _dumps(before, clusters, flags_mod.Flags.parse(FLAGS))]
    cl = sorted(clusters)
    assert names == ["encapsulate_subgraphs_before.pbtxt"] + [
        f for c in cl for f in (f"encapsulate_subgraphs_subgraph_{c}.pbtxt", f"encapsulate_fdef_graph_{c}.pbtxt",
                                f"encapsulate_fdef_{c}.pbtxt")] + ["encapsulate_subgraphs_after.pbtxt",
                                                                    "build_xla_ops.pbtxt"]
    assert (tmp_path / "build_xla_ops.pbtxt").read_text(encoding="utf-8").count('op: "_XlaCompile"') == len(cl)
    monkeypatch.setenv("TF_CPP_VMODULE", "")
    monkeypatch.setenv("TF_CPP_MAX_VLOG_LEVEL", "1")
    assert Path(_dumps(before, clusters, flags_mod.Flags.parse(FLAGS))[-1]).name == "build_xla_ops_1.pbtxt"


def test_vlog_is_on_parses_tf_env(monkeypatch) -> None:
    from tfxla_cluster.jit.dumps import vlog_is_on

    for var in ("TF_CPP_VMODULE", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_MIN_VLOG_LEVEL"):
        monkeypatch.delenv(var, raising=False)
    assert not vlog_is_on("build_xla_ops_pass")
    monkeypatch.setenv("TF_CPP_VMODULE", "build_xla_ops_pass=0,encapsulate_*=2")
    assert not vlog_is_on("build_xla_ops_pass") and vlog_is_on("encapsulate_subgraphs_pass", 2)
    assert not vlog_is_on("encapsulate_subgraphs_pass", 3)
    monkeypatch.setenv("TF_CPP_MIN_VLOG_LEVEL", "1")   # the legacy name still counts
    assert vlog_is_on("build_xla_ops_pass")


def record(names: list[str]) -> None:
    """Record real TF's post-clustering dumps for ``names`` (fresh TF process each)."""
    import shutil
    import tempfile

    import tf_record

    corpus = HERE / "e2e_corpus.py"
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            meta = tf_record.record(f"{corpus}:{name}", tmp, FLAGS, keep="function", annotated=False,
                                    post_clustering=True)
            runs = [r for r in meta["runs"] if r.get("is_user_function")]
            assert len(runs) == 1 and runs[0].get("post_dumps"), (name, meta.get("stderr_tail", "")[-2000:])
            out = DATA / name
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            files = {}
            for kind in KINDS:
                src = runs[0]["post_dumps"][kind]
                shutil.copy(Path(tmp) / src, out / f"{kind}.pbtxt")
                files[kind] = f"{kind}.pbtxt"
            (out / "meta.json").write_text(json.dumps(
                {"function": name, "flags": FLAGS, "tf_version": meta["tf_version"],
                 "tf_cpp_vmodule": meta["tf_cpp_vmodule"], "files": files}, indent=1) + "\n")
            print(name, "ok", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--record"]:
        record(sys.argv[2:] or FUNCTIONS)
