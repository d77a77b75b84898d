"""The CPU pipeline end to end: values equal after every single pass on every sample module (TF's own
HLO dumps and the HLO corpus), idempotence, dump files, and kernel counts against real XLA."""
import json
import os

import pytest

from tests.passes.passes_helpers import (TF_GOLDENS, TF_GRAPHS, assert_same_values, kernel_count, load_tf_golden,
                                         load_tf_graph, random_args, tf_golden_modules, tf_graph_modules)
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.flags import Flags
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.passes import PassContext, cpu_pipeline, optimize, optimize_with_report
from tfxla_cluster.passes.dump import sanitize_file_name

FLAGS = Flags.parse()
SAMPLES = [("graph", n) for n in tf_graph_modules()] + [("golden", n) for n in tf_golden_modules()]


class EveryPassChecker:
    """Stands in for the dumper: after each pass, the module must verify and compute the same values."""

    def __init__(self, args, want):
        self.args, self.want, self.checked = args, want, []

    def after_pass(self, module, pipeline_name, pass_name, changed):
        if changed:
            verify_module(module)
            assert_same_values(evaluate(module, *self.args), self.want, rtol=2e-4, atol=2e-5,
                               context=f"after {pipeline_name}/{pass_name}")
        self.checked.append((pass_name, changed))


def load(kind, name):
    return load_tf_graph(name) if kind == "graph" else load_tf_golden(name)


@pytest.mark.parametrize("kind,name", SAMPLES, ids=[f"{k}-{n}" for k, n in SAMPLES])
def test_values_equal_after_every_pass(kind, name):
    module, args = load(kind, name)
    want = evaluate(_xla_semantics(module), *args)
    checker = EveryPassChecker(args, want)
    cpu_pipeline(FLAGS).run(module, PassContext(dumper=checker))
    assert any(changed for _, changed in checker.checked)
    assert_same_values(evaluate(module, *args), want, rtol=2e-4, atol=2e-5, context=name)


def _xla_semantics(module):
    """``module`` as XLA runs it: bounded dynamic shapes (TF's unique_in_middle) padded by XLA's dynamic
    padder, whose semantics our evaluator does not model on its own (its reductions would read the padding;
    real XLA agrees with the padded module)."""
    from tfxla_cluster.passes.dynamic_padder import DynamicPadder, has_dynamic_shapes

    if not has_dynamic_shapes(module):
        return module
    padded = module.clone()
    DynamicPadder().run(padded)
    return padded


def _corpus():
    from tests.hlo.hlo_corpus import MODULES
    return MODULES


CORPUS = sorted(_corpus())


@pytest.mark.parametrize("name", CORPUS)
def test_values_equal_on_the_hlo_corpus(name):
    module = parse_module(_corpus()[name])
    args = random_args(module, seed=5)
    try:
        want = evaluate(module, *args)
    except UnimplementedError as e:  # ALL_OPS only tests printing: its custom-call "foo" has no semantics
        pytest.skip(f"not evaluatable: {e}")
    checker = EveryPassChecker(args, want)
    cpu_pipeline(FLAGS).run(module, PassContext(dumper=checker))
    assert_same_values(evaluate(module, *args), want, rtol=2e-4, atol=2e-5, context=name)


@pytest.mark.parametrize("kind,name", SAMPLES, ids=[f"{k}-{n}" for k, n in SAMPLES])
def test_second_run_changes_nothing(kind, name):
    module, _ = load(kind, name)
    optimize(module, FLAGS)
    text = module.to_string()
    optimize(module, FLAGS)
    assert module.to_string() == text


# ---------------------------------------------------------------- against real XLA
def xla_kernels(kind, name):
    path = TF_GRAPHS / name / "optimized_hlo.txt" if kind == "graph" else TF_GOLDENS / f"{name}.optimized_hlo.txt"
    return kernel_count(parse_module(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("targets", [frozenset(), frozenset({"TopK"})], ids=["default", "with-TopK"])
@pytest.mark.parametrize("kind,name", SAMPLES, ids=[f"{k}-{n}" for k, n in SAMPLES])
def test_kernel_count_no_worse_than_xla(kind, name, targets):
    """Fusions + unfused kernels: never more than XLA:CPU makes for the same TF HLO."""
    module, _ = load(kind, name)
    optimize(module, FLAGS, runtime_targets=targets)
    ours, xla = kernel_count(module), xla_kernels(kind, name)
    assert ours <= xla, f"{name}: {ours} kernels, XLA:CPU makes {xla}"


def test_without_a_topk_routine_the_sort_stays():
    module, _ = load_tf_golden("misc")
    optimize(module, FLAGS)
    assert "custom-call" not in module.to_string()
    # iota+sort+slice instead of one TopK call, but a one-kernel gather where XLA makes two
    assert kernel_count(module) <= xla_kernels("golden", "misc")


# ---------------------------------------------------------------- dumps
MLP = TF_GRAPHS / "mlp" / "hlo.txt"


def test_dump_files(tmp_path):
    flags = Flags.parse(xla_flags=f"--xla_dump_to={tmp_path} --xla_dump_hlo_as_text")
    module = parse_module(MLP.read_text(encoding="utf-8"))
    report = optimize_with_report(module, flags, function="mlp", cluster="cluster_0")
    prefix = report.dump_files[0].split(".before_optimizations")[0]
    assert prefix.startswith("module_") and prefix.endswith("." + sanitize_file_name(module.name))
    names = sorted(os.listdir(tmp_path))
    assert names == sorted([f"{prefix}.before_optimizations.txt", f"{prefix}.after_optimizations.txt",
                            f"{prefix}.buffer-assignment.txt", f"{prefix}.fusion-decisions.txt",
                            "manifest.json"])
    after = (tmp_path / f"{prefix}.after_optimizations.txt").read_text(encoding="utf-8")
    assert parse_module(after).to_string() == module.to_string()
    assert "fusion(" in after
    assert "BufferAssignment:" in (tmp_path / f"{prefix}.buffer-assignment.txt").read_text(encoding="utf-8")
    assert "fused into" in (tmp_path / f"{prefix}.fusion-decisions.txt").read_text(encoding="utf-8")
    manifest = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    (entry,) = manifest["modules"]
    assert entry["function"] == "mlp" and entry["cluster"] == "cluster_0" and entry["module"] == module.name
    assert set(entry["files"]) == set(names) - {"manifest.json"}


def test_dump_per_pass_files_and_counter(tmp_path):
    flags = Flags.parse(xla_flags=f"--xla_dump_to={tmp_path} --xla_dump_hlo_pass_re=^(fusion|cse)$")
    r1 = optimize_with_report(parse_module(MLP.read_text(encoding="utf-8")), flags)
    r2 = optimize_with_report(parse_module(MLP.read_text(encoding="utf-8")), flags)
    n1 = int(r1.dump_files[0].split(".")[0].split("_")[1])
    n2 = int(r2.dump_files[0].split(".")[0].split("_")[1])
    assert n2 == n1 + 1  # a process-global module counter, like XLA's unique ids
    per_pass = [f for f in r1.dump_files if ".after_" in f and not f.endswith(".after_optimizations.txt")]
    assert {f.split(".after_")[1] for f in per_pass} == {"cse.txt", "fusion.txt"}
    steps = [int(f.split(".after_")[0].split(".")[-2]) for f in per_pass]
    assert steps == list(range(1, len(per_pass) + 1))
    manifest = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    assert [m["module_id"] for m in manifest["modules"]] == [n1, n2]


def test_module_filter_and_no_flags_means_no_files(tmp_path, monkeypatch):
    flags = Flags.parse(xla_flags=f"--xla_dump_to={tmp_path} --xla_dump_hlo_module_re=^nomatch$")
    optimize(parse_module(MLP.read_text(encoding="utf-8")), flags)
    assert os.listdir(tmp_path) == []
    monkeypatch.chdir(tmp_path)
    report = optimize_with_report(parse_module(MLP.read_text(encoding="utf-8")), Flags.parse())
    assert report.dump_files == [] and os.listdir(tmp_path) == []


def test_disabling_fusion_by_flag():
    flags = Flags.parse(xla_flags="--xla_disable_hlo_passes=fusion")
    module = parse_module(MLP.read_text(encoding="utf-8"))
    optimize(module, flags)
    assert "fusion(" not in module.to_string()


def test_pipeline_pass_names():
    names = cpu_pipeline(FLAGS).pass_names()
    for expected in ("dce", "call-inliner", "dot_decomposer", "logistic-expander", "simplification", "algsimp",
                     "constant_folding", "transpose-folding", "cse", "layout-assignment", "fusion",
                     "simplification_after_layout_assignment"):
        assert expected in names
    assert names.index("simplification") < names.index("cse") < names.index("layout-assignment") \
        < names.index("fusion") < names.index("simplification_after_layout_assignment")
    mof = cpu_pipeline(Flags.parse(xla_flags="--xla_backend_extra_options=xla_cpu_use_multi_output_fusion"))
    assert "cpu-multi-output-fusion" in mof.pass_names()
    assert "cpu-multi-output-fusion" not in names
