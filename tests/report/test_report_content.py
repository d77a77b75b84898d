"""What the report says: clusters, reasons, compiles, timings, kernels, HLO and the advisor's findings,
for a script run under the plugin and for a GraphDef run on generated inputs; the static fallback when
a graph can't run; the advisor's rules on hand-made cluster reports; the CLI's errors."""
from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

from tfxla_cluster.report.advisor import advise_cluster
from tfxla_cluster.report.collect import key_text
from tfxla_cluster.report.model import ClusterReport, SignatureRun

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def _clusters(report):
    return {c.name: c for f in report.functions for c in f.clusters.values()}


# ----------------------------------------------------------------------------------------- script mode
def test_script_report_clusters_compiles_and_timings(script_report):
    report, _ = script_report
    assert report.dynamic and not report.dynamic_missing
    names = [f.name for f in report.functions]
    assert any(n.startswith("step [") for n in names) and any(n.startswith("varying [") for n in names)
    step = next(f for f in report.functions if f.name.startswith("step"))
    assert step.mark_result is not None and len(step.clusters) == 2
    tiny = next(c for c in step.clusters.values() if "Abs" in c.ops)
    big = next(c for c in step.clusters.values() if "MatMul" in c.ops)
    assert tiny.elements <= 16 and tiny.compiles == 1 and tiny.executions == 3
    for c in (tiny, big):
        s = c.signatures[0]
        assert s.launches == 3 and s.cause
        assert s.tf_ms is not None and s.tf_ms > 0 and s.launch_ms is not None and s.kernel_ms is not None
        assert s.compiled.hlo_text.startswith("HloModule") and s.compiled.optimized_hlo_text
        assert c.kernels, c.name
    assert any(k.kind.startswith("k") and k.instructions > 1 for k in big.kernels)   # a fusion with its kind
    varying = next(f for f in report.functions if f.name.startswith("varying"))
    (vc,) = varying.clusters.values()
    compiled = [s for s in vc.signatures if s.compiled is not None]
    assert vc.compiles == 4 and len(compiled) == 4 and len(vc.causes) == 4
    assert [s.key_text for s in compiled] == [f"f32[{n}]" for n in (5, 6, 7, 8)]
    # TF's lazy compilation: each later length's first call ran on TF's kernels, its second compiled
    assert sorted(s.key_text for s in vc.signatures if s.compiled is None) == [f"f32[{n}]" for n in (6, 7, 8)]


def test_script_report_advisor(script_report):
    report, _ = script_report
    by_kind = collections.defaultdict(list)
    for a in report.advice:
        by_kind[a.kind].append(a)
    clusters = _clusters(report)
    tiny = [a for a in by_kind["tiny_cluster"] if "Abs" in clusters[a.cluster].ops]
    assert tiny, [a.title for a in report.advice]
    assert "launch overhead dominates" in tiny[0].title and "4 elements" in tiny[0].text
    assert any("TF's kernels" in e for e in tiny[0].evidence)
    (storm,) = by_kind["recompilation"]
    assert "compiled 4 times" in storm.title and "input_signature" in storm.text
    assert any("causes:" in e for e in storm.evidence)
    (split,) = by_kind["splitter"]
    assert split.node == "Unique" and "[unique]" in split.text and "TF never auto-clusters Unique" in split.text
    assert report.advice[0].severity == "warn" or not any(a.severity == "warn" for a in report.advice)


def test_script_report_numerics_within_tolerance(script_report):
    report, _ = script_report
    checker = report.numerics
    assert checker is not None and checker.ok and checker.results
    for res in checker.results.values():
        assert res.launches >= 1 and res.outputs and not res.error
        for o in res.outputs.values():
            assert o.comparison.ok and o.comparison.max_abs <= 1e-3


def test_script_report_html(script_report):
    report, path = script_report
    text = path.read_text(encoding="utf-8")
    for section in ('id="summary"', 'id="advisor"', 'id="numerics"', 'id="fn-0"', 'id="fn-1"', 'id="flags"'):
        assert section in text
    assert "TF_XLA_FLAGS=&quot;--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit&quot;" in text
    assert "Clustering info for graph of size" in text      # TF's summary text
    assert 'data-kind="tiny_cluster"' in text and 'data-kind="recompilation"' in text
    assert text.count('class="cluster-detail"') == len(_clusters(report))
    assert "HLO before optimisation" in text and "HLO after our XLA:CPU pipeline" in text
    assert "HloModule" in text and "fusion" in text
    # Every DOM id is unique although two functions both have pictures.
    ids = re.findall(r'\sid="([^"]+)"', text)
    dup = [i for i, n in collections.Counter(ids).items() if n > 1]
    assert not dup, dup[:5]
    assert "<script src" not in text and "http://" not in text.replace("http://www.w3.org", "")


# ------------------------------------------------------------------------------------------ graph mode
def test_graph_report_runs_on_generated_inputs(graph_report):
    report, path = graph_report
    assert report.dynamic, report.dynamic_missing
    assert report.inputs == ["x: float32[3, 4]"]
    (fn,) = report.functions
    assert sorted(fn.clusters) == sorted(fn.mark_result.clusters)
    for c in fn.clusters.values():
        assert c.executions == 3 and c.signatures[0].tf_ms is not None
    text = path.read_text(encoding="utf-8")
    assert "Unique op" in text and "[unique]" in text and 'data-node="Unique"' in text
    assert 'data-kind="splitter"' in text


def test_graph_with_resource_inputs_renders_static_parts(tmp_path):
    from tfxla_cluster.report import build_report, write_report

    report = build_report(str(ROOT / "graphs" / "variables.pbtxt"), flags=FLAGS)
    assert not report.dynamic and "resource" in report.dynamic_missing
    text = write_report(report, tmp_path / "v.html").read_text(encoding="utf-8")
    assert 'id="dynamic-missing"' in text and "is a resource" in text
    assert text.count('class="cluster-detail"') == len(report.functions[0].clusters) > 0
    assert "Did not run." in text


def test_unknown_input_shape_says_why_and_input_shape_fixes_it(tmp_path):
    import tensorflow as tf

    from tfxla_cluster.report import build_report

    gd = tf.compat.v1.GraphDef()
    ph = gd.node.add(name="x", op="Placeholder")
    ph.attr["dtype"].type = tf.float32.as_datatype_enum
    prev = "x"
    for i, op in enumerate(["Exp", "Neg", "Tanh", "Relu", "Abs"]):
        nd = gd.node.add(name=f"op{i}", op=op, input=[prev])
        nd.attr["T"].type = tf.float32.as_datatype_enum
        prev = nd.name
    report = build_report(gd, flags=FLAGS, repeats=1)
    assert not report.dynamic and "unknown shape" in report.dynamic_missing and "--input-shape x=" in report.dynamic_missing
    report = build_report(gd, flags=FLAGS, input_shapes={"x": (2, 3)}, repeats=1, calls=1)
    assert report.dynamic, report.dynamic_missing
    (c,) = report.functions[0].clusters.values()
    assert c.executions == 1 and c.signatures[0].key_text == "f32[2,3]"


# ------------------------------------------------------------------------------------------- advisor
def _cluster(ops: dict, *, launch: float, tf: float, kernel: float = 0.01, elements: int = 10**6,
             groups: int = 1, compiles: int = 1, fallback: str = "") -> ClusterReport:
    c = ClusterReport("cluster_9", [f"n{i}" for i in range(sum(ops.values()))], collections.Counter(ops),
                      compiles=compiles, executions=10, elements=elements, groups=groups, fallback_reason=fallback,
                      causes=["first signature"] + ["arg0 shape [1]→[2]"] * (compiles - 1))
    c.signatures = [SignatureRun("f32[1000]", compiled=object(), launch_ms=launch, tf_ms=tf, kernel_ms=kernel,
                                 arrays=[], launches=10)]
    return c


def test_advisor_rules():
    kinds = lambda c, threads=4: [a.kind for a in advise_cluster(c, threads)]  # noqa: E731
    big = {"MatMul": 2, "Tanh": 3, "Mul": 4}
    assert kinds(_cluster(big, launch=1.0, tf=2.0)) == []                       # faster: nothing to say
    assert kinds(_cluster(big, launch=3.0, tf=1.0)) == ["slower_than_tf"]
    assert kinds(_cluster(big, launch=3.0, tf=1.0, groups=3)) == ["lost_parallelism"]
    assert kinds(_cluster(big, launch=3.0, tf=1.0, groups=3), threads=1) == ["slower_than_tf"]
    tiny = advise_cluster(_cluster({"AddV2": 1, "Const": 2}, launch=0.2, tf=0.05, kernel=0.01, elements=8), 4)
    assert [a.kind for a in tiny] == ["tiny_cluster"] and tiny[0].severity == "warn"
    assert "95%" in tiny[0].text                                                  # (0.2-0.01)/0.2 overhead
    storm = advise_cluster(_cluster(big, launch=1.0, tf=2.0, compiles=5), 4)
    assert [a.kind for a in storm] == ["recompilation"] and "5 compiles" in storm[0].evidence[0]
    fb = advise_cluster(_cluster(big, launch=1.0, tf=2.0, fallback="UnimplementedError: no lowering for op Foo"), 4)
    assert fb[0].kind == "fallback" and "no lowering for op Foo" in fb[0].evidence[0]


def test_key_text_of_tuple_and_codegen_signature():
    import numpy as np

    assert key_text((("<f4", (4, 8)), ("<i4", ()))) == "f32[4,8], s32[]"
    from tfxla_cluster.runtime.compile_cache import Signature

    assert key_text(Signature.of([np.zeros((2, 3), np.float32), np.int64(3)], (1,))) == "f32[2,3], s64[] (const)"


# ---------------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("argv, message", [
    (["report", "graphs/unique_in_middle.pbtxt", "-o", "r.svg"], "must be an .html file"),
    (["report", "no/such.pbtxt", "-o", "r.html"], "No such file or directory"),
    (["report", "graphs/unique_in_middle.pbtxt", "-o", "r.html", "--input-shape", "x"], "bad --input-shape"),
    (["report", "graphs/unique_in_middle.pbtxt", "-o", "r.html", "--flags", "--tf_xla_bogus=1"], "tf_xla_bogus"),
    (["report", "-o", "r.html", "--", "no_such_script.py"], "No such file or directory"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, capsys, monkeypatch):
    from tfxla_cluster.cli import main

    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err


def test_cli_static_report(tmp_path, capsys):
    from tfxla_cluster.cli import main

    out = tmp_path / "r.html"
    assert main(["report", str(ROOT / "graphs" / "unique_in_middle.pbtxt"), "-o", str(out), "--no-run",
                 "--flags", FLAGS]) == 0
    printed = capsys.readouterr().out
    assert "wrote" in printed and "static report requested" in printed
    text = out.read_text(encoding="utf-8")
    assert 'id="advisor"' in text and "Did not run." in text and 'xla-cluster' in text and 'data-cluster="cluster_0"' in text


def test_big_graphs_collapse_and_focus(graph_report, tmp_path, monkeypatch):
    """Over COLLAPSE_OVER nodes the picture shows clusters collapsed; --around draws a neighbourhood."""
    from tfxla_cluster.report import html as report_html
    from tfxla_cluster.report import write_report

    report, _ = graph_report
    monkeypatch.setattr(report_html, "COLLAPSE_OVER", 5)
    text = write_report(report, tmp_path / "c.html").read_text(encoding="utf-8")
    assert "clusters collapsed" in text and "xla-cluster collapsed" in text
    text = write_report(report, tmp_path / "f.html", around="Unique", depth=1).read_text(encoding="utf-8")
    assert "around Unique, depth 1" in text and 'data-node="Unique"' in text
    assert "clusters collapsed" not in text


def test_saved_model_runs_with_its_variables(tmp_path):
    """A SavedModel's variables make its GraphDef unrunnable alone; the report runs its signature
    function through our runtime instead (variables included) and times its clusters."""
    import tensorflow as tf

    from tfxla_cluster.report import build_report, write_report

    class Model(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.stateless_normal([6, 4], seed=[1, 2]))

        @tf.function(input_signature=[tf.TensorSpec([3, 6], tf.float32)])
        def __call__(self, x):
            return {"y": tf.reduce_sum(tf.tanh(x @ self.w) * 2.0 + 1.0, axis=1)}

    model = Model()
    tf.saved_model.save(model, str(tmp_path / "sm"), signatures=model.__call__)
    report = build_report(str(tmp_path / "sm"), flags=FLAGS, calls=2, repeats=1)
    assert report.dynamic, report.dynamic_missing
    assert report.inputs == ["x: float32[3, 6]"]
    (fn,) = report.functions
    assert fn.clusters and all(c.executions == 2 for c in fn.clusters.values())
    assert any(s.tf_ms is not None for c in fn.clusters.values() for s in c.signatures)
    text = write_report(report, tmp_path / "sm.html").read_text(encoding="utf-8")
    assert "HLO before optimisation" in text


def test_advisor_reports_a_numerics_divergence():
    from tfxla_cluster.runtime.numerics import ClusterNumerics, Comparison, Divergence, OutputCheck

    c = _cluster({"Exp": 1, "Mul": 4, "Sum": 1}, launch=1.0, tf=2.0)
    bad = Comparison(3.0, 0.5, 1e-5, 1e-4, False)
    c.numerics = ClusterNumerics("cluster_9", launches=1,
                                 outputs={("output", 0): OutputCheck(0, "Sum:0", "output", "float32", (), bad)})
    c.numerics.divergence = Divergence("Exp", "exponential", "f32[5]", "Exp", "model/Exp", "%Exp = ...", bad,
                                       True, 4, 8)
    (a,) = advise_cluster(c, 4)
    assert a.kind == "numerics" and a.severity == "warn" and "%Exp (exponential)" in a.text
    assert "model/Exp" in a.text and "max rel 0.5" in a.evidence[0]


def test_cli_report_profile_prints_and_shows_each_clusters_compile(tmp_path, capsys):
    """``report --profile``: the first calls' compile profile, per cluster, on stderr and in the page."""
    from tfxla_cluster.cli import main

    out = tmp_path / "p.html"
    assert main(["report", str(ROOT / "graphs" / "layer_norm.pbtxt"), "-o", str(out), "--flags", FLAGS,
                 "--repeats", "1", "--profile"]) == 0
    err = capsys.readouterr().err
    assert "compile profile:" in err and "cluster_0:" in err
    for stage in ("encapsulation", "lowering", "llvm-ir", "run"):
        assert stage in err, (stage, err)
    # LLVM compiles it, or reuses the code of identical IR compiled earlier in this process.
    assert ("llvm-opt" in err and "machine-code" in err) or "code-reuse" in err, err
    assert 'id="compile-profile"' in out.read_text(encoding="utf-8")


def test_graph_report_keeps_the_profile_of_every_compiled_cluster(graph_report):
    report, path = graph_report
    compiled = sorted(c.name for f in report.functions for c in f.clusters.values() if c.compiles)
    assert compiled and sorted(report.profile.clusters()) == compiled
    assert 'id="compile-profile"' in path.read_text(encoding="utf-8")
