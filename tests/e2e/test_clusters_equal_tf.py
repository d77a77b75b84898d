"""In auto mode our clusters equal TF's real ones (issue 7's proof), for every bundled sample and a
cross-section of the corpus, under TF's default auto-jit flags and under the corpus' min-size-1 flags.

TF's clustering is recorded live: each function runs in a fresh TF subprocess with
``TF_XLA_FLAGS="<flags> --tf_xla_clustering_debug"`` and ``TF_DUMP_GRAPH_PREFIX`` (tools/tf_record.py),
and its ``mark_for_compilation`` dump gives TF's node → cluster map. Ours is
``tfxla_cluster.function(fn, flags=...).get_compiled(*args).mark_result``. Partitions (sets of node
sets) are compared; cluster numbers are process-global in TF, so names are not.

Where they differ, the test tells whether our *input graph* differs from TF's
``before_mark_for_compilation`` graph (our grappler invocation, tfxla_cluster/graph/) or our *pass*
does (our mark_for_compilation run on TF's own graph). Known differences are strict xfails whose
failure must be exactly that kind of difference.
"""
from __future__ import annotations

import pytest

import e2e_tf_clusters as tfc

pytestmark = pytest.mark.tfsweep  # ~72 TF subprocesses: about 3 minutes on 2 cores

FLAGSETS = {"default": tfc.DEFAULT_FLAGS, "min_cluster_size_1": tfc.MIN1_FLAGS}


class KnownDifference(Exception):
    """The partitions differ exactly in the way the xfail reason says."""


_XENT_RESHAPES = ("grappler: TF's runtime grappler drops the no-op softmax_cross_entropy_with_logits/"
                  "Reshape, Reshape_1 ([4,6]->[4,6]) and their concat shape Const; our "
                  "tf_optimizer.OptimizeGraph run keeps them (tfxla_cluster/graph/grappler.py). Our pass "
                  "on TF's graph gives TF's partition")
_ADD_N = ("grappler: TF's ArithmeticOptimizer AddOpsRewrite turns add_6/add_7 into "
          "ArithmeticOptimizer/AddOpsRewrite_add_7 (AddN + AddV2); ours keeps add_6/add_7 "
          "(tfxla_cluster/graph/grappler.py). Our pass on TF's graph gives TF's partition")
_COND_NAMES = ("grappler/If lowering: TF's lowered cond keeps cond/pivot_t, cond/pivot_f Identity nodes; "
               "ours has ConstantFoldingCtrl/cond/switch_pred/_N_{0,1} instead (node names differ, "
               "tfxla_cluster/graph/). Our pass on TF's graph gives TF's partition")
_SWITCH_N_DEADNESS = ("jit/deadness: TF does not simplify the deadness of the Merge of a 3-branch _SwitchN "
                      "(i=0 | (~i=0 & i=1) | (~i=0 & ~i=1)) to #true, so Const sub/y (#true) is not "
                      "contracted into sub; our deadness analysis treats it as live and clusters sub/y "
                      "with sub (tfxla_cluster/jit/deadness.py)")

_SHAPE_REWRITES = ("grappler: TF's runtime grappler rewrites with the inputs' shapes known; our "
                   "tf_optimizer.OptimizeGraph run makes no shape-dependent rewrites (here: folds of "
                   "inner-call arithmetic, log(x + 1) -> Log1p), tfxla_cluster/graph/grappler.py. Our pass on "
                   "TF's graph gives TF's partition")
_CALL_SHAPES = ("runtime/grappler: TF's eager runtime instantiates the function for the call's input shapes "
                "([5, 8] for a [None, 8] signature) and grappler folds Shape/strided_slice/Cast of the batch "
                "dim; our pre-clustering graph is built once per concrete function, batch dim unknown (and "
                "our grappler run makes no shape-dependent rewrites). Our pass on TF's graph gives TF's "
                "partition")

#: (flag set, function) -> (xfail reason, nodes only in our graph that identify it, or None for "the pass")
KNOWN: dict[tuple[str, str], tuple[str, tuple[str, ...] | None]] = {}
for _fs in FLAGSETS:
    KNOWN[(_fs, "sample_softmax_xent")] = (_XENT_RESHAPES, ("softmax_cross_entropy_with_logits/Reshape",))
    KNOWN[(_fs, "softmax_xent")] = (_XENT_RESHAPES, ("softmax_cross_entropy_with_logits/Reshape",))
    KNOWN[(_fs, "sample_transformer_block")] = (_ADD_N, ("add_6", "add_7"))
KNOWN[("min_cluster_size_1", "sample_cond")] = (_COND_NAMES, ("ConstantFoldingCtrl/cond/switch_pred/_2_0",))
KNOWN[("min_cluster_size_1", "cond_both_ways")] = (_COND_NAMES, ("ConstantFoldingCtrl/cond/switch_pred/_2_0",))
KNOWN[("min_cluster_size_1", "switch_case")] = (_SWITCH_N_DEADNESS, None)
for _fs in FLAGSETS:
    KNOWN[(_fs, "nested_tf_function")] = (_SHAPE_REWRITES, ("sub", "add/y"))
    KNOWN[(_fs, "dynamic_batch")] = (_CALL_SHAPES, ("Shape", "strided_slice"))
KNOWN[("min_cluster_size_1", "print_and_asserts")] = (_SHAPE_REWRITES, ("add",))

_recorded: dict[str, dict[str, tfc.TfClustering]] = {}


def _tf_side(flagset: str, name: str) -> tfc.TfClustering:
    """TF's clustering, recorded for all selected functions of a flag set at once (2 TF processes)."""
    if flagset not in _recorded:
        _recorded[flagset] = tfc.record_many(tfc.SELECTED, FLAGSETS[flagset])
    return _recorded[flagset][name]


def _params() -> list:
    out = []
    for fs in FLAGSETS:
        for name in tfc.SELECTED:
            known = KNOWN.get((fs, name))
            marks = [pytest.mark.xfail(strict=True, raises=KnownDifference, reason=known[0])] if known else []
            out.append(pytest.param(fs, name, id=f"{fs}/{name}", marks=marks))
    return out


@pytest.mark.parametrize("flagset,name", _params())
def test_partition_equals_tf(flagset: str, name: str) -> None:
    cmp = tfc.compare(name, FLAGSETS[flagset], _tf_side(flagset, name))
    assert not cmp.error, cmp.error
    if cmp.same_partition:
        return
    known = KNOWN.get((flagset, name))
    if known is not None:
        _, our_nodes = known
        only_ours = {entry.split(" (")[0] for entry in cmp.only_ours}
        if our_nodes is None and not cmp.only_tf and not cmp.only_ours and cmp.mark_on_tf_graph is False:
            raise KnownDifference(cmp.summary())      # same graph, our pass differs
        if our_nodes is not None and set(our_nodes) <= only_ours and cmp.mark_on_tf_graph:
            raise KnownDifference(cmp.summary())      # our graph differs, our pass is right
    pytest.fail(f"{cmp.summary()}\nTF:   {cmp.tf_clusters}\nours: {cmp.our_clusters}")


def test_selection_covers_samples_and_corpus() -> None:
    assert len([n for n in tfc.SELECTED if n.startswith("sample_")]) >= 11
    assert len([n for n in tfc.SELECTED if not n.startswith("sample_")]) >= 10
