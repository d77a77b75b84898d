"""Consistency of the recorded TF data: ``graphs/`` samples and ``tests/data/tf_parity``.

* every sample's pbtxt parses as a GraphDef and, run with a TF Session on ``inputs.npz``,
  reproduces ``outputs.npz`` (and the variables' values after the call);
* every sample / parity recording has a matching before/after MarkForCompilation dump pair:
  the same nodes, ops and inputs, the "after" graph only adding ``_XlaCluster`` /
  ``_XlaAlreadyClustered`` attributes, with exactly the cluster names meta.json lists;
* the compare tool's plumbing (process-global cluster-number shifting) is exact: replaying TF's
  own answers agrees 100%.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
GRAPHS = ROOT / "graphs"
PARITY = ROOT / "tests" / "data" / "tf_parity"

tf = pytest.importorskip("tensorflow")
import compare_with_tf  # noqa: E402
import corpus  # noqa: E402
import tf_record  # noqa: E402

SAMPLES = sorted(p.stem for p in GRAPHS.glob("*.json"))
PARITY_RECS = compare_with_tf.recordings(PARITY)
MARK_ATTRS = {"_XlaCluster", "_XlaAlreadyClustered"}


def _parse(path: Path) -> "tf.compat.v1.GraphDef":
    return tf_record.load_graph_def(path)


def _strip(node) -> tuple:
    """A node's identity apart from the attributes MarkForCompilation adds."""
    attrs = {k: v.SerializeToString(deterministic=True) for k, v in node.attr.items()
             if k not in MARK_ATTRS}
    return node.op, tuple(node.input), node.device, tuple(sorted(attrs.items()))


def check_pair(before_path: Path, after_path: Path, expected_clusters: list[str]) -> None:
    before, after = _parse(before_path), _parse(after_path)
    b = {n.name: n for n in before.node}
    a = {n.name: n for n in after.node}
    assert list(b) == list(a), f"{after_path.name}: node set/order differs from {before_path.name}"
    for name in b:
        assert not MARK_ATTRS & set(b[name].attr), f"{before_path.name}:{name} already marked"
        assert _strip(b[name]) == _strip(a[name]), \
            f"{after_path.name}:{name} changed beyond marking"
        if "_XlaCluster" in a[name].attr:
            assert a[name].attr["_XlaAlreadyClustered"].b, name
    assert sorted(tf_record.clusters_of(after)) == sorted(expected_clusters)


# ----------------------------------------------------------------------------- samples

def test_samples_present() -> None:
    expected = {"mlp", "layer_norm", "softmax_xent", "attention", "conv_block", "unique_in_middle",
                "string_ops", "variables", "while_loop", "cond", "transformer_block"}
    assert expected <= set(SAMPLES)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_files(name: str) -> None:
    meta = json.loads((GRAPHS / f"{name}.json").read_text(encoding="utf-8"))
    d = GRAPHS / "tf" / name
    for f in ("inputs.npz", "outputs.npz", "meta.json", "vlog.txt"):
        assert (d / f).exists(), f
    assert (GRAPHS / f"{name}.pbtxt").stat().st_size < 1_000_000
    if meta["jit_compiles"]:
        assert (d / "hlo.txt").read_text(encoding="utf-8").startswith("HloModule")
        assert (d / "optimized_hlo.txt").read_text(encoding="utf-8").startswith("HloModule")
    else:
        assert "Detected unsupported operations" in (d / "jit_error.txt").read_text(encoding="utf-8")
    vlog = (d / "vlog.txt").read_text(encoding="utf-8")
    assert "@@TFREC BEGIN" in vlog and "@@TFREC END" in vlog


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_pbtxt_parses(name: str) -> None:
    from google.protobuf import text_format

    gd = tf.compat.v1.GraphDef()
    text_format.Parse((GRAPHS / f"{name}.pbtxt").read_text(encoding="utf-8"), gd)
    meta = json.loads((GRAPHS / f"{name}.json").read_text(encoding="utf-8"))
    assert len(gd.node) == meta["node_count"]
    names = {n.name for n in gd.node}
    for t in meta["inputs"] + meta["outputs"] + meta["captured_variables"]:
        assert (t.get("tensor") or t["placeholder"]).split(":")[0] in names


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_outputs_reproduce(name: str) -> None:
    """Run NAME.pbtxt in a v1 Session on inputs.npz; it must give outputs.npz."""
    meta = json.loads((GRAPHS / f"{name}.json").read_text(encoding="utf-8"))
    d = GRAPHS / "tf" / name
    gd = _parse(GRAPHS / f"{name}.pbtxt")
    inputs = np.load(d / "inputs.npz")
    expected = np.load(d / "outputs.npz")
    graph = tf.Graph()
    with graph.as_default():
        input_map = {i["tensor"]: tf.constant(inputs[i["name"]]) for i in meta["inputs"]}
        variables = {}
        if meta["captured_variables"]:
            init = np.load(d / "variables.npz")
            for cap in meta["captured_variables"]:
                v = tf.compat.v1.Variable(init[cap["variable"]], use_resource=True,
                                          name=f"var_{cap['variable']}")
                variables[cap["variable"]] = v
                input_map[cap["placeholder"]] = v.handle
        outs = tf.compat.v1.import_graph_def(gd, input_map=input_map, name="sample",
                                             return_elements=[o["tensor"] for o in meta["outputs"]])
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            got = sess.run(outs)
            after = {k: sess.run(v.read_value()) for k, v in variables.items()}
    assert len(got) == len(expected.files)
    for i, value in enumerate(got):
        want = expected[f"output_{i}"]
        if want.dtype.kind == "S":
            np.testing.assert_array_equal(np.asarray(value).astype(bytes), want)
        else:
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6, err_msg=f"output_{i}")
    if variables:
        want_after = np.load(d / "variables_after.npz")
        for k, value in after.items():
            np.testing.assert_allclose(value, want_after[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_clustering_dumps(name: str) -> None:
    d = GRAPHS / "tf" / name
    meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    assert meta["tf_version"] == tf.__version__
    user = [r for r in meta["runs"] if r.get("is_user_function")]
    assert len(user) == 1, "exactly one pass run of the sample's own graph"
    run = user[0]
    assert set(run["dumps"]) == {"before_mark_for_compilation", "mark_for_compilation",
                                 "mark_for_compilation_annotated"}
    check_pair(d / run["dumps"]["before_mark_for_compilation"],
               d / run["dumps"]["mark_for_compilation"], run["clusters"])
    annotated = _parse(d / run["dumps"]["mark_for_compilation_annotated"])
    for node in annotated.node:
        prefix = node.name.split("/", 1)[0]
        assert prefix in set(run["clusters"]) | {"unclustered", "varhandle"}, node.name


# ----------------------------------------------------------------------------- parity data

def test_parity_corpus_and_flagsets() -> None:
    assert len(corpus.REGISTRY) >= 40
    if not PARITY_RECS:
        pytest.skip("no parity recordings yet (python tools/compare_with_tf.py record)")
    recorded = {(fs, fn) for fs, fn, _ in PARITY_RECS}
    missing = {(fs, fn) for fs in corpus.FLAGSETS for fn in corpus.REGISTRY} - recorded
    assert not missing, f"missing recordings: {sorted(missing)[:10]}"
    total = sum(p.stat().st_size for p in PARITY.rglob("*") if p.is_file())
    assert total < 30_000_000, f"tests/data/tf_parity is {total / 1e6:.1f} MB"


@pytest.mark.parametrize("flagset,fn,rec", PARITY_RECS,
                         ids=[f"{fs}/{fn}" for fs, fn, _ in PARITY_RECS])
def test_parity_recording_consistent(flagset: str, fn: str, rec: Path) -> None:
    meta = json.loads((rec / "meta.json").read_text(encoding="utf-8"))
    assert meta["flagset"] == flagset and meta["function"] == fn
    assert meta["flags"] == corpus.FLAGSETS[flagset]
    assert meta["returncode"] == 0 and "error" not in meta, meta.get("error")
    assert meta["tf_version"] == tf.__version__
    user = [r for r in meta["runs"] if r.get("is_user_function")]
    assert len(user) == 1, "the function's own graph must have exactly one pass run"
    earlier: list[str] = []
    for run in meta["runs"]:
        assert run["cluster_names_before"] == earlier  # process-global bookkeeping is cumulative
        earlier += [c for c in run["clusters"] if c not in earlier]
        if not run["kept"]:
            continue
        if run["dumps"]:
            check_pair(rec / run["dumps"]["before_mark_for_compilation"],
                       rec / run["dumps"]["mark_for_compilation"], run["clusters"])
        else:
            assert run["no_candidates"] and not run["clusters"]
            assert (rec / run["input_dump"]).exists()
    assert (rec / "vlog.txt").read_text(encoding="utf-8").count("@@TFREC") == 2


def test_compare_self_check_is_exact() -> None:
    """Replaying TF's answers through compare_with_tf must agree 100% (tests name shifting)."""
    if not PARITY_RECS:
        pytest.skip("no parity recordings yet")
    results = []
    for fs, fn, rec in PARITY_RECS:
        if fs not in ("min_cluster_size_1", "deterministic_names", "fuel_5"):
            continue  # these exercise the process-global offsets
        meta = json.loads((rec / "meta.json").read_text(encoding="utf-8"))
        for run in compare_with_tf.runs_to_compare(meta):
            after = run["dumps"].get("mark_for_compilation")
            impl = compare_with_tf.self_check_impl({"after": rec / after if after else None,
                                                    "run": run})
            results.append(compare_with_tf.compare_run(impl, fs, fn, rec, meta, run))
    assert results
    bad = [(r.flagset, r.function, r.details) for r in results
           if not (r.partition_match and r.names_match)]
    assert not bad, bad


def test_fresh_numbering_is_contiguous_from_zero() -> None:
    """After undoing the process-global offset, every run's clusters are <prefix>0..n-1.

    This checks the recorder's ``cluster_names_before`` bookkeeping against TF's own numbering
    (a missed eager-op run would leave a gap or a non-zero start).
    """
    import re

    checked = 0
    for fs, fn, rec in PARITY_RECS:
        meta = json.loads((rec / "meta.json").read_text(encoding="utf-8"))
        for run in meta["runs"]:
            by_prefix: dict[str, list[int]] = {}
            for c in run["clusters"]:
                fresh = compare_with_tf.fresh_name(c, run["cluster_names_before"])
                m = re.fullmatch(r"(.*_)(\d+)", fresh)
                by_prefix.setdefault(m.group(1), []).append(int(m.group(2)))
            for prefix, seqs in by_prefix.items():
                assert sorted(seqs) == list(range(len(seqs))), (fs, fn, run["run"], prefix, seqs)
                checked += 1
    if not PARITY_RECS:
        pytest.skip("no parity recordings yet")
    assert checked


def test_fresh_name_shifts_process_global_numbering() -> None:
    assert compare_with_tf.fresh_name("cluster_3", ["cluster_0", "cluster_1"]) == "cluster_1"
    shifted = compare_with_tf.fresh_name("cluster_abc_1", ["cluster_0", "cluster_abc_0"])
    assert shifted == "cluster_abc_0"
    assert compare_with_tf.fresh_name("cluster_abc_0", ["cluster_0"]) == "cluster_abc_0"
