"""Our auto-mode clusters against TF's real ones, for corpus functions (tests/e2e/e2e_corpus.py).

TF's clustering comes from running the function in a fresh subprocess with
``TF_XLA_FLAGS="<flags> --tf_xla_clustering_debug"`` and ``TF_DUMP_GRAPH_PREFIX``
(``tools/tf_record.py``): the user function's ``before_mark_for_compilation`` and
``mark_for_compilation`` dumps. Ours is ``tfxla_cluster.function(fn, flags=...).get_compiled(*args)
.mark_result`` — the pre-clustering graph there comes from our grappler invocation
(``tfxla_cluster/graph/grappler.py``) and CloneConstants, so two things can differ:

* the **graph**: node names / ops of our pre-clustering graph vs TF's ``before_mark_for_compilation``;
* the **partition**: which nodes share a cluster. Clusters are compared as sets of node names
  (TF's cluster numbers are process-global); ``mark_on_tf_graph`` tells whether our pass, fed TF's
  own input graph, gives TF's partition, so a difference can be blamed on the graph or on the pass.

Run as a script for the report: ``python -m tests.e2e.e2e_tf_clusters [--flags F] [NAME ...]``.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.e2e import e2e_corpus as corpus

import tf_record  # tools/ is on sys.path (setup.cfg pythonpath)

DEFAULT_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
MIN1_FLAGS = corpus.AUTO_FLAGS
CORPUS_FILE = Path(corpus.__file__).resolve()


@dataclasses.dataclass
class TfClustering:
    """TF's pre-clustering graph and node → cluster map for one function under one flag set."""

    before: Any                  # GraphDef (before_mark_for_compilation, or the pass group's input)
    cluster_of: dict[str, str]   # node -> TF cluster name
    error: str = ""


@dataclasses.dataclass
class Comparison:
    """Ours vs TF's for one function: the graphs' node differences and the partitions."""

    name: str
    flags: str
    same_partition: bool
    only_tf: list[str]                   # "name (Op)" in TF's graph, not in ours
    only_ours: list[str]
    op_differences: dict[str, int]       # op -> (count in TF's graph) - (count in ours), nonzero only
    tf_clusters: list[list[str]]
    our_clusters: list[list[str]]
    mark_on_tf_graph: bool | None        # our pass on TF's own input graph gives TF's partition
    error: str = ""

    def summary(self) -> str:
        if self.error:
            return f"ERROR {self.error}"
        if self.same_partition:
            return f"equal ({len(self.tf_clusters)} clusters)"
        parts = [f"DIFFER: TF {len(self.tf_clusters)} clusters, ours {len(self.our_clusters)}"]
        if self.only_tf or self.only_ours:
            parts.append(f"graphs differ: only TF {self.only_tf[:6]}{'…' if len(self.only_tf) > 6 else ''}, "
                         f"only ours {self.only_ours[:6]}{'…' if len(self.only_ours) > 6 else ''}")
        if self.op_differences:
            parts.append(f"op counts TF-ours {self.op_differences}")
        if self.mark_on_tf_graph is not None:
            parts.append("our pass on TF's graph: " + ("TF's partition" if self.mark_on_tf_graph else "differs"))
        return "; ".join(parts)


def record_tf(name: str, flags: str) -> TfClustering:
    """Run corpus function ``name`` in a fresh TF process with ``flags`` and read TF's clustering."""
    with tempfile.TemporaryDirectory(prefix="tfclusters_") as tmp:
        meta = tf_record.record(f"{CORPUS_FILE}:{name}", tmp, flags, keep="function", annotated=False)
        return _clustering(meta, Path(tmp))


def _clustering(meta: dict[str, Any], out: Path) -> TfClustering:
    """TF's clustering of the user function from a recording's meta and its output directory."""
    if "error" in meta or meta.get("returncode"):
        return TfClustering(None, {}, meta.get("error") or meta.get("stderr_tail", "")[-500:])
    runs = [r for r in meta["runs"] if r.get("is_user_function")]
    if len(runs) != 1:
        return TfClustering(None, {}, f"{len(runs)} pass runs of the user function")
    run = runs[0]
    if run["dumps"]:
        before = tf_record.load_graph_def(out / run["dumps"]["before_mark_for_compilation"])
        after = tf_record.load_graph_def(out / run["dumps"]["mark_for_compilation"])
    elif run.get("input_dump"):  # no candidates: nothing clustered, no mark dumps
        before = after = tf_record.load_graph_def(out / run["input_dump"])
    else:
        return TfClustering(None, {}, "no dump of the user function's graph")
    cluster_of = {n.name: n.attr["_XlaCluster"].s.decode() for n in after.node if "_XlaCluster" in n.attr}
    return TfClustering(before, cluster_of)


def _partition(cluster_of: dict[str, str]) -> list[list[str]]:
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for node, cluster in cluster_of.items():
        groups[cluster].append(node)
    return sorted(sorted(g) for g in groups.values())


def our_clustering(name: str, flags: str) -> tuple[Any, dict[str, str]]:
    """Our pre-clustering GraphDef and node → cluster map (``tfxla_cluster.function`` in auto mode)."""
    import tensorflow as tf

    import tfxla_cluster as txc

    c = corpus.CASES[name]
    s = c.build()
    fn = txc.function(s.fn, flags=flags, input_signature=corpus.input_signature(c, s))
    compiled = fn.get_compiled(*[tf.constant(a) for a in s.inputs])
    clusters = compiled.mark_result.clusters if compiled.mark_result else {}
    return compiled.graph.graph_def, {m: cname for cname, members in clusters.items() for m in members}


def _mark_on(graph_def: Any, flags: str) -> dict[str, str]:
    from tfxla_cluster import ProcessState, mark_for_compilation

    result = mark_for_compilation(graph_def, flags, state=ProcessState())
    return {m: cname for cname, members in result.clusters.items() for m in members}


def compare(name: str, flags: str, tf_side: TfClustering | None = None) -> Comparison:
    """Record TF (unless given) and compare with ours; see :class:`Comparison`."""
    tf_side = tf_side or record_tf(name, flags)
    if tf_side.error:
        return Comparison(name, flags, False, [], [], {}, [], [], None, error=f"TF recording: {tf_side.error}")
    ours_gd, ours = our_clustering(name, flags)
    tf_nodes = {n.name: n.op for n in tf_side.before.node}
    our_nodes = {n.name: n.op for n in ours_gd.node}
    only_tf = [f"{n} ({op})" for n, op in tf_nodes.items() if n not in our_nodes]
    only_ours = [f"{n} ({op})" for n, op in our_nodes.items() if n not in tf_nodes]
    ops = collections.Counter(tf_nodes.values())
    ops.subtract(collections.Counter(our_nodes.values()))
    tf_part, our_part = _partition(tf_side.cluster_of), _partition(ours)
    same = tf_part == our_part
    on_tf = None if same else _partition(_mark_on(tf_side.before, flags)) == tf_part
    return Comparison(name, flags, same, only_tf, only_ours, {k: v for k, v in sorted(ops.items()) if v},
                      tf_part, our_part, on_tf)


def record_many(names: list[str], flags: str) -> dict[str, TfClustering]:
    """TF's clustering of several functions, all recorded by one TF process (tf_record.record_batch:
    node names and partitions are those of a fresh process per function; cluster numbers are not)."""
    with tempfile.TemporaryDirectory(prefix="tfclusters_") as tmp:
        outs = [Path(tmp) / name for name in names]
        metas = tf_record.record_batch([f"{CORPUS_FILE}:{n}" for n in names], outs, flags, annotated=False)
        return {name: _clustering(meta, out) for name, meta, out in zip(names, metas, outs)}


def record_flagsets(names: dict[str, list[str]], flagsets: dict[str, str]) -> dict[str, dict[str, TfClustering]]:
    """:func:`record_many` of ``names[fs]`` under each flag set ``fs``, one TF process per flag set, run
    side by side."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        futures = {fs: pool.submit(record_many, names[fs], flagsets[fs]) for fs in names}
        return {fs: f.result() for fs, f in futures.items()}


#: The functions the clustering test compares: every bundled sample and a cross-section of the corpus.
SELECTED = [n for n in corpus.CASES if n.startswith("sample_")] + [
    "cond_both_ways", "while_data_dependent", "switch_case", "var_updates", "strings_mid", "unique_mid",
    "py_function_mid", "stateless_random", "conv_pool", "softmax_xent", "keras_dense",
    "keras_batchnorm_train", "train_sgd_manual", "train_keras_sgd", "boolean_mask_mid", "image_resize",
    "complex_math", "while_tensorarray", "keras_conv2d", "keras_mha", "train_keras_adam", "int_math",
    "nested_tf_function", "dynamic_batch", "print_and_asserts"]


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=SELECTED)
    ap.add_argument("--flags", default=DEFAULT_FLAGS)
    ap.add_argument("-v", "--verbose", action="store_true", help="print both partitions when they differ")
    args = ap.parse_args(argv)
    recorded = record_many(args.names, args.flags)
    print(f"flags: {args.flags}")
    print("| function | clusters vs TF |")
    print("|---|---|")
    for name in args.names:
        cmp = compare(name, args.flags, recorded[name])
        print(f"| {name} | {cmp.summary()} |", flush=True)
        if args.verbose and not cmp.same_partition and not cmp.error:
            print(f"    TF:   {cmp.tf_clusters}\n    ours: {cmp.our_clusters}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
