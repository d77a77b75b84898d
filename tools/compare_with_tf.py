"""Clustering parity against real TensorFlow: record TF's decisions, then compare ours with them.

``record``  runs every (corpus function x flag set) of ``tools/corpus.py`` in its own fresh TF
            process (at most ``--jobs`` = 2 at a time) through ``tools/tf_record.py`` and stores
            ``tests/data/tf_parity/<flagset>/<fn>/``: ``meta.json``, ``vlog.txt`` (TF's reasons)
            and the gzipped ``before_mark_for_compilation_<k>.pbtxt.gz`` /
            ``mark_for_compilation_<k>.pbtxt.gz`` of every pass run of the function (``<k>`` is
            TF's process-global dump index). A run with no compilation candidates dumps nothing;
            then the graph entering the POST_REWRITE_FOR_EXEC group is stored instead.
``compare`` feeds each stored "before" graph to ``tfxla_cluster.mark_for_compilation(graph_def,
            flags=...)`` and compares the result with TF's "after" dump: the partition of nodes
            into clusters (set of frozensets + the unclustered set) and the ``_XlaCluster`` names.

Process-global state: TF numbers clusters with a counter shared by every graph of the process
(eager single-op graphs such as ``_EagerConst`` included), and ``--tf_xla_clustering_fuel`` is
global too. If our pass accepts ``state=`` (tfxla_cluster's ``ProcessState``), each run gets a
fresh state seeded with TF's counters (``cluster_names_before``) and remaining fuel
(``starting_fuel``), and names are compared verbatim. Otherwise TF's ``<prefix><n>`` is shifted
down by the earlier clusters with the same prefix, and the fuel flag is set to what TF had left.

Examples::

    python tools/compare_with_tf.py record                      # everything, ~2 TF processes
    python tools/compare_with_tf.py record -f unique_split -s default,fuel_5
    python tools/compare_with_tf.py compare --json > parity.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import inspect
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402
import tf_record  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tf_parity"
CORPUS_FILE = Path(corpus.__file__).resolve()


# ----------------------------------------------------------------------------- record

def _select(names: str | None, universe: list[str], what: str) -> list[str]:
    if not names:
        return universe
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in universe]
    if unknown:
        raise SystemExit(f"error: unknown {what}: {', '.join(unknown)} "
                         f"(known: {', '.join(universe)})")
    return chosen


def record_one(fn: str, flagset: str, out_root: Path, gz: bool = True) -> dict[str, Any]:
    out = out_root / flagset / fn
    if out.exists():
        shutil.rmtree(out)  # a re-recording must not leave stale dumps with other indices
    meta = tf_record.record(f"{CORPUS_FILE}:{fn}", out, corpus.FLAGSETS[flagset], keep="function",
                            gz=gz, annotated=False,
                            extra_meta={"function": fn, "flagset": flagset,
                                        "target": f"tools/corpus.py:{fn}"})
    return meta


def cmd_record(args: argparse.Namespace) -> int:
    fns = _select(args.functions, list(corpus.REGISTRY), "functions")
    flagsets = _select(args.flagsets, list(corpus.FLAGSETS), "flag sets")
    out_root = Path(args.out)
    jobs = [(fn, fs) for fs in flagsets for fn in fns]
    print(f"recording {len(jobs)} (function, flag set) pairs with {args.jobs} TF processes "
          f"-> {out_root}")
    t0 = time.perf_counter()
    failures = []
    # Threads are enough: each job is a TF subprocess; the pool bounds concurrent TF processes.
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = {pool.submit(record_one, fn, fs, out_root, not args.no_gz): (fn, fs)
                for fn, fs in jobs}
        for i, fut in enumerate(concurrent.futures.as_completed(futs), 1):
            fn, fs = futs[fut]
            try:
                meta = fut.result()
            except Exception as e:  # a crashed recording must not stop the sweep
                failures.append((fs, fn, f"{type(e).__name__}: {e}"))
                print(f"[{i}/{len(jobs)}] {fs}/{fn}: FAILED {e}", flush=True)
                continue
            user = [r for r in meta["runs"] if r.get("is_user_function")]
            clusters = sum(len(r["clusters"]) for r in user)
            problem = meta.get("error") or meta.get("call_error") or (
                f"exit {meta['returncode']}" if meta["returncode"] else "")
            if problem or not user:
                failures.append((fs, fn, problem or "no pass run for the function"))
            print(f"[{i}/{len(jobs)}] {fs}/{fn}: {meta['wall_seconds']:.1f}s runs={len(user)} "
                  f"clusters={clusters} {problem}", flush=True)
    total = time.perf_counter() - t0
    write_index(out_root, {"recordings": len(jobs), "seconds": round(total, 1), "jobs": args.jobs,
                           "failures": failures})
    print(f"done in {total:.0f}s ({total / max(len(jobs), 1):.1f}s per recording); "
          f"{len(failures)} problems")
    for fs, fn, why in failures:
        print(f"  {fs}/{fn}: {why}")
    return 1 if failures else 0


def write_index(out_root: Path, last_record: dict[str, Any]) -> None:
    """``index.json``: what is on disk (rebuilt from the recordings) + the last record's timing."""
    recs = recordings(out_root)
    metas = [json.loads((rec / "meta.json").read_text(encoding="utf-8")) for _, _, rec in recs]
    index = {
        "tf_version": sorted({m.get("tf_version") or "?" for m in metas}),
        "flagsets": {fs: corpus.FLAGSETS.get(fs) for fs in sorted({fs for fs, _, _ in recs})},
        "functions": sorted({fn for _, fn, _ in recs}),
        "recordings": len(recs),
        "total_bytes": sum(p.stat().st_size for p in out_root.rglob("*") if p.is_file()),
        "sum_wall_seconds": round(sum(m.get("wall_seconds", 0) for m in metas), 1),
        "last_record": last_record,
    }
    (out_root / "index.json").write_text(json.dumps(index, indent=1) + "\n")


# ----------------------------------------------------------------------------- compare

@dataclasses.dataclass
class RunResult:
    flagset: str
    function: str
    run: int
    tf_function: str | None
    tf_clusters: int
    our_clusters: int | None
    partition_match: bool
    names_match: bool
    node_agreement: float  # fraction of nodes whose co-cluster set agrees
    error: str | None = None
    details: list[str] = dataclasses.field(default_factory=list)


def recordings(data: Path, fns: list[str] | None = None,
               flagsets: list[str] | None = None) -> list[tuple[str, str, Path]]:
    """(flagset, function, dir) of every stored recording, sorted."""
    out = []
    for meta in sorted(data.glob("*/*/meta.json")):
        fs, fn = meta.parent.parent.name, meta.parent.name
        if (fns is None or fn in fns) and (flagsets is None or fs in flagsets):
            out.append((fs, fn, meta.parent))
    return out


def runs_to_compare(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The kept pass runs of the function (its own graph and nested instantiations)."""
    return [r for r in meta["runs"] if r.get("kept")]


def fresh_name(name: str, earlier: list[str]) -> str:
    """TF's process-global ``<prefix><seq>`` as a fresh process would have numbered it."""
    m = re.fullmatch(r"(.*_)(\d+)", name)
    if not m:
        return name
    prefix = m.group(1)
    offset = sum(1 for e in earlier if re.fullmatch(re.escape(prefix) + r"\d+", e))
    return f"{prefix}{int(m.group(2)) - offset}"


def flags_for_run(meta: dict[str, Any], run: dict[str, Any]) -> str:
    """The flags to give our pass: TF's, with the fuel TF had left when this graph's run began."""
    flags = meta["flags"]
    fuel = run.get("starting_fuel")
    if fuel and fuel != "infinity" and "--tf_xla_clustering_fuel" in flags:
        flags = re.sub(r"--tf_xla_clustering_fuel=\S+", f"--tf_xla_clustering_fuel={fuel}", flags)
    return flags


def partition(cluster_of: dict[str, str]) -> set[frozenset[str]]:
    groups: dict[str, set[str]] = {}
    for node, c in cluster_of.items():
        groups.setdefault(c, set()).add(node)
    return {frozenset(g) for g in groups.values()}


def node_clusters(graph_def: Any) -> dict[str, str]:
    return {n.name: n.attr["_XlaCluster"].s.decode() for n in graph_def.node
            if "_XlaCluster" in n.attr}


def load_impl(spec: str) -> Any:
    """Our pass. ``spec`` is ``module:function``; a clear SystemExit if it is not there yet."""
    mod_name, _, fn_name = spec.partition(":")
    try:
        module = __import__(mod_name, fromlist=[fn_name])
        return getattr(module, fn_name)
    except (ImportError, AttributeError) as e:
        raise SystemExit(
            f"cannot compare yet: {spec.replace(':', '.')} is not importable ({type(e).__name__}: "
            f"{e}).\nThe recordings are in place ({len(recordings(DATA))} under {DATA}); run "
            f"again once the package provides mark_for_compilation(graph_def, flags=...).") from None


def seeded_state(impl: Any, run: dict[str, Any]) -> Any | None:
    """A fresh process state for our pass, set to what TF's process had when this run began.

    Used when our pass takes ``state=`` (tfxla_cluster's ``ProcessState``: ``fuel`` and
    ``sequence[fingerprint]``): the fuel TF had left and the per-fingerprint cluster counters
    (key 0 for ``cluster_<n>``, the fingerprint for ``cluster_<fp>_<n>``). Then TF's names can be
    compared verbatim. Returns None when the pass has no such parameter.
    """
    try:
        if "state" not in inspect.signature(impl).parameters:
            return None
        module = sys.modules.get(impl.__module__)
        cls = getattr(module, "ProcessState", None)
        if cls is None:
            from tfxla_cluster.jit.mark_for_compilation import ProcessState as cls
    except (ImportError, TypeError, ValueError):
        return None
    state = cls()
    fuel = run.get("starting_fuel")
    if fuel and fuel != "infinity":
        state.fuel = int(fuel)
    for name in run.get("cluster_names_before", []):
        m = re.fullmatch(r"cluster_(?:(\d+)_)?(\d+)", name)
        if m:
            key = int(m.group(1) or 0)
            state.sequence[key] = max(state.sequence[key], int(m.group(2)) + 1)
    return state


def _our_result(impl: Any, graph_def: Any, flags: str,
                state: Any | None = None) -> tuple[dict[str, str], list[str]]:
    """Run our pass; returns node -> cluster name, plus any inconsistency notes."""
    res = impl(graph_def, flags=flags) if state is None else impl(graph_def, flags=flags,
                                                                  state=state)
    notes: list[str] = []
    gd = getattr(res, "graph_def", None)
    from_attrs = node_clusters(gd) if gd is not None else None
    from_dict = None
    if getattr(res, "clusters", None) is not None:
        from_dict = {node: name for name, nodes in res.clusters.items() for node in nodes}
    if from_attrs is not None and from_dict is not None and from_attrs != from_dict:
        notes.append("our .clusters disagrees with the _XlaCluster attrs of our .graph_def")
    chosen = from_attrs if from_attrs is not None else from_dict
    if chosen is None:
        raise TypeError("result has neither .graph_def nor .clusters")
    return chosen, notes


def compare_run(impl: Any, fs: str, fn: str, rec: Path, meta: dict[str, Any],
                run: dict[str, Any]) -> RunResult:
    before_name = run["dumps"].get("before_mark_for_compilation") or run.get("input_dump")
    after_name = run["dumps"].get("mark_for_compilation")
    base = RunResult(fs, fn, run["run"], run.get("function"), len(run["clusters"]), None,
                     False, False, 0.0)
    if not before_name:
        base.error = "no input graph recorded for this run"
        return base
    before = tf_record.load_graph_def(rec / before_name)
    tf_of = node_clusters(tf_record.load_graph_def(rec / after_name)) if after_name else {}
    state = seeded_state(impl, run)
    if state is None:
        # Our pass starts a fresh sequence: compare with the names a fresh TF process would give.
        tf_of = {n: fresh_name(c, run.get("cluster_names_before", [])) for n, c in tf_of.items()}
    try:
        ours, notes = _our_result(impl, before, flags_for_run(meta, run), state)
    except Exception as e:  # report, keep sweeping
        base.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return base
    base.details += notes
    base.our_clusters = len(set(ours.values()))
    base.partition_match = partition(tf_of) == partition(ours)
    base.names_match = tf_of == ours
    nodes = [n.name for n in before.node]
    tf_groups = {n: frozenset(k for k, c in tf_of.items() if c == tf_of[n]) if n in tf_of
                 else frozenset() for n in nodes}
    our_groups = {n: frozenset(k for k, c in ours.items() if c == ours[n]) if n in ours
                  else frozenset() for n in nodes}
    base.node_agreement = sum(tf_groups[n] == our_groups[n] for n in nodes) / max(len(nodes), 1)
    if not base.partition_match:
        only_tf = sorted(set(tf_of) - set(ours))
        only_ours = sorted(set(ours) - set(tf_of))
        if only_tf:
            base.details.append(f"clustered only by TF: {', '.join(only_tf[:12])}")
        if only_ours:
            base.details.append(f"clustered only by us: {', '.join(only_ours[:12])}")
        if not only_tf and not only_ours:
            base.details.append("same clustered nodes, different grouping")
    elif not base.names_match:
        diff = sorted({(tf_of[n], ours[n]) for n in tf_of if tf_of[n] != ours.get(n)})
        base.details.append("names differ (TF->ours): "
                            + ", ".join(f"{a}->{b}" for a, b in diff[:6]))
    return base


def self_check_impl(rec_lookup: dict[str, Path]) -> Any:
    """An 'implementation' that replays TF's own answer; proves the compare plumbing (100%)."""
    @dataclasses.dataclass
    class Replay:
        graph_def: Any
        clusters: dict[str, list[str]]

    def impl(graph_def: Any, flags: str = "") -> Replay:
        after = rec_lookup.get("after")
        gd = tf_record.load_graph_def(after) if after else graph_def
        meta_run = rec_lookup["run"]
        for n in gd.node:  # undo the process-global numbering like a fresh process would
            if "_XlaCluster" in n.attr:
                n.attr["_XlaCluster"].s = fresh_name(
                    n.attr["_XlaCluster"].s.decode(), meta_run.get("cluster_names_before", [])).encode()
        return Replay(gd, tf_record.clusters_of(gd))
    return impl


def cmd_compare(args: argparse.Namespace) -> int:
    data = Path(args.data)
    fns = args.functions.split(",") if args.functions else None
    flagsets = args.flagsets.split(",") if args.flagsets else None
    recs = recordings(data, fns, flagsets)
    if not recs:
        print(f"no recordings under {data}; run `python tools/compare_with_tf.py record` first",
              file=sys.stderr)
        return 2
    impl = None if args.self_check else load_impl(args.impl)
    results: list[RunResult] = []
    from tfxla_cluster import progress

    for fs, fn, rec in progress.track(recs, "compare with TF", label=lambda r: f"{r[0]}/{r[1]}"):
        meta = json.loads((rec / "meta.json").read_text(encoding="utf-8"))
        for run in runs_to_compare(meta):
            use = impl
            if args.self_check:
                after = run["dumps"].get("mark_for_compilation")
                use = self_check_impl({"after": rec / after if after else None, "run": run})
            results.append(compare_run(use, fs, fn, rec, meta, run))
    if args.json:
        print(json.dumps(summary(results) | {"runs": [dataclasses.asdict(r) for r in results]},
                         indent=1))
    else:
        print_table(results, args.verbose)
    return 0 if all(r.partition_match and r.names_match for r in results) else 1


def summary(results: list[RunResult]) -> dict[str, Any]:
    n = max(len(results), 1)
    per_fs: dict[str, list[RunResult]] = {}
    for r in results:
        per_fs.setdefault(r.flagset, []).append(r)
    return {
        "runs": len(results),
        "partition_agreement_pct": round(100 * sum(r.partition_match for r in results) / n, 2),
        "name_agreement_pct": round(100 * sum(r.names_match for r in results) / n, 2),
        "node_agreement_pct": round(100 * sum(r.node_agreement for r in results) / n, 2),
        "errors": sum(r.error is not None for r in results),
        "per_flagset": {fs: round(100 * sum(r.partition_match for r in rs) / len(rs), 2)
                        for fs, rs in per_fs.items()},
    }


def print_table(results: list[RunResult], verbose: bool) -> None:
    print(f"{'flagset':22s} {'function':30s} {'run':>3s} {'TF':>3s} {'us':>3s} part names nodes")
    for r in results:
        ours = "-" if r.our_clusters is None else str(r.our_clusters)
        print(f"{r.flagset:22s} {r.function:30s} {r.run:3d} {r.tf_clusters:3d} {ours:>3s} "
              f"{'ok' if r.partition_match else 'XX':>4s} {'ok' if r.names_match else 'XX':>5s} "
              f"{100 * r.node_agreement:5.1f}%" + (f"  ERROR {r.error}" if r.error else ""))
        if verbose or r.error:
            for d in r.details:
                print(f"{'':60s}{d}")
    s = summary(results)
    print(f"\n{s['runs']} pass runs: partition agreement {s['partition_agreement_pct']}%, "
          f"cluster-name agreement {s['name_agreement_pct']}%, node agreement "
          f"{s['node_agreement_pct']}%, errors {s['errors']}")
    for fs, pct in s["per_flagset"].items():
        print(f"  {fs:22s} {pct:6.2f}% partitions agree")


# ----------------------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="compare_with_tf.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("record", help="run real TF on the corpus and store its clustering")
    rp.add_argument("-f", "--functions", help="comma list of corpus functions (default: all)")
    rp.add_argument("-s", "--flagsets", help=f"comma list of flag sets (default: all of "
                                             f"{', '.join(corpus.FLAGSETS)})")
    rp.add_argument("-j", "--jobs", type=int, default=2, help="concurrent TF processes (default 2)")
    rp.add_argument("-o", "--out", default=str(DATA), help=f"output root (default {DATA})")
    rp.add_argument("--no-gz", action="store_true", help="store plain .pbtxt instead of .pbtxt.gz")
    cp = sub.add_parser("compare", help="run our pass on TF's inputs and compare with TF's output")
    cp.add_argument("-f", "--functions", help="comma list of corpus functions (default: all)")
    cp.add_argument("-s", "--flagsets", help="comma list of flag sets (default: all)")
    cp.add_argument("-d", "--data", default=str(DATA), help=f"recordings root (default {DATA})")
    cp.add_argument("--impl", default="tfxla_cluster:mark_for_compilation",
                    help="our pass as module:function (default tfxla_cluster:mark_for_compilation)")
    cp.add_argument("--self-check", action="store_true",
                    help="replay TF's own answers instead of our pass (tests this tool: expect 100%%)")
    cp.add_argument("--json", action="store_true", help="machine-readable output")
    cp.add_argument("-v", "--verbose", action="store_true", help="explain every mismatch")
    lp = sub.add_parser("list", help="list corpus functions and flag sets")
    lp.set_defaults(cmd="list")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        return cmd_record(args)
    if args.cmd == "compare":
        sys.path.insert(0, str(ROOT))
        return cmd_compare(args)
    print("flag sets:")
    for k, v in corpus.FLAGSETS.items():
        print(f"  {k:22s} {v}")
    print(f"functions ({len(corpus.REGISTRY)}):")
    for k in corpus.REGISTRY:
        print(f"  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
