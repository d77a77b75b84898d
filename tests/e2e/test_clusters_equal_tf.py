"""In auto mode our clusters equal TF's real ones (issue 7's proof), for every bundled sample and a
cross-section of the corpus, under TF's default auto-jit flags and under the corpus' min-size-1 flags.

TF's clustering is recorded live: the functions run in a TF subprocess per flag set (one after another,
tools/tf_record.py's record_batch) with
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

from tests.e2e import e2e_tf_clusters as tfc

pytestmark = pytest.mark.tfsweep  # 2 TF subprocesses recording 36 functions each

FLAGSETS = {"default": tfc.DEFAULT_FLAGS, "min_cluster_size_1": tfc.MIN1_FLAGS}


class KnownDifference(Exception):
    """The partitions differ exactly in the way the xfail reason says."""


#: (flag set, function) -> (xfail reason, nodes only in our graph that identify it, or None for "the pass").
#: Fixed since the first sweep: no-op Reshape removal, AddN, Log1p/nested-call folds (grappler now sees the
#: _Arg shapes and calls are inlined with TF's names first, tfxla_cluster/graph/grappler.py), the
#: dynamic_batch "call-shape specialisation" (TF was recorded with a static signature; the recording now
#: uses the corpus' [None, 8] one), the 3-way _SwitchN deadness (tfxla_cluster/jit/deadness.py),
#: print_and_asserts' cond names (grappler keeps the function's control outputs, as TF's runtime does) and
#: the tf.cond names under min_cluster_size=1 (If/Case lowered before grappler as TF's PRE_PLACEMENT pass
#: does, tfxla_cluster/graph/lower_functional.py: grappler no longer anchors branch constants on
#: ConstantFoldingCtrl nodes).
KNOWN: dict[tuple[str, str], tuple[str, tuple[str, ...] | None]] = {}

@pytest.fixture(scope="module")
def tf_sides(request) -> dict[str, dict[str, tfc.TfClustering]]:
    """TF's clustering of the functions this session runs (``-k``/``-m`` selections record only theirs),
    one TF process per flag set, side by side."""
    wanted: dict[str, list[str]] = {}
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and "flagset" in params:
            wanted.setdefault(params["flagset"], []).append(params["name"])
    return tfc.record_flagsets(wanted, FLAGSETS)


def _params() -> list:
    out = []
    for fs in FLAGSETS:
        for name in tfc.SELECTED:
            known = KNOWN.get((fs, name))
            marks = [pytest.mark.xfail(strict=True, raises=KnownDifference, reason=known[0])] if known else []
            if fs == "default":  # re-run in TF's other oneDNN mode too (tests/test_onednn_modes.py)
                marks.append(pytest.mark.onednn_mode)
            out.append(pytest.param(fs, name, id=f"{fs}/{name}", marks=marks))
    return out


@pytest.mark.parametrize("flagset,name", _params())
def test_partition_equals_tf(tf_sides, flagset: str, name: str) -> None:
    cmp = tfc.compare(name, FLAGSETS[flagset], tf_sides[flagset][name])
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
