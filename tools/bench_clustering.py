"""Benchmark: our MarkForCompilation pass on synthetic graphs of 1k, 10k and 100k nodes.

The graphs are random DAGs with locality (each node reads one or two recent nodes), mixing compilable
elementwise ops with a few ops XLA can't compile (barriers that split clusters and create would-be
cycles), constants and control edges — the shape of real training graphs, at chosen sizes. Prints one
line per size: nodes, clusters, seconds for Graph construction and for the pass (wall clock, and the
process's CPU time, which other load on the machine disturbs less), and µs per node.

    python tools/bench_clustering.py            # 1k, 10k, 100k
    python tools/bench_clustering.py 2000 20000
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

from tensorflow.core.framework import graph_pb2, types_pb2


def synthetic_graph(n: int, seed: int = 0) -> graph_pb2.GraphDef:
    rng = random.Random(seed)
    gd = graph_pb2.GraphDef()
    names: list[str] = []

    def add(op: str, inputs: list[str], **attrs) -> str:
        nd = gd.node.add(name=f"n{len(names)}", op=op)
        nd.input.extend(inputs)
        nd.attr["T"].type = types_pb2.DT_FLOAT
        for k, v in attrs.items():
            nd.attr[k].CopyFrom(v)
        names.append(nd.name)
        return nd.name

    ph = gd.node.add(name="input", op="Placeholder")
    ph.attr["dtype"].type = types_pb2.DT_FLOAT
    names.append("input")
    for i in range(1, n):
        recent = names[max(0, i - 20):i]
        r = rng.random()
        if r < 0.04:
            add("DebugIdentity", [rng.choice(recent)])          # no XLA kernel: a barrier
        elif r < 0.06:
            nd = gd.node.add(name=f"n{len(names)}", op="Const")
            nd.attr["dtype"].type = types_pb2.DT_FLOAT
            nd.attr["value"].tensor.dtype = types_pb2.DT_FLOAT
            nd.attr["value"].tensor.float_val.append(1.0)
            names.append(nd.name)
        elif r < 0.5:
            add(rng.choice(["Relu", "Tanh", "Exp", "Neg"]), [rng.choice(recent)])
        else:
            add(rng.choice(["AddV2", "Mul", "Sub", "Maximum"]), [rng.choice(recent), rng.choice(recent)])
        if rng.random() < 0.02 and len(recent) > 2:
            gd.node[-1].input.append("^" + rng.choice(recent[:-1]))
    return gd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--no-explain-cycles", action="store_true",
                    help="skip computing the cycle path of failed contractions (TF only does it at VLOG3)")
    args = ap.parse_args(argv)

    import tfxla_cluster as txc
    from tfxla_cluster.graph import Graph

    flags = txc.Flags.parse("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    txc.mark_for_compilation(synthetic_graph(50), flags, state=txc.ProcessState())  # warm-up: XLA registry
    print(f"{'nodes':>8} {'clusters':>8} {'graph s':>8} {'pass s':>8} {'pass cpu':>8} {'us/node':>8}")
    for n in args.sizes:
        gd = synthetic_graph(n)
        t0 = time.perf_counter()
        graph = Graph(gd)
        t1 = time.perf_counter()
        c1 = time.process_time()
        result = txc.mark_for_compilation(graph, flags, state=txc.ProcessState(),
                                          explain_cycles=not args.no_explain_cycles)
        t2 = time.perf_counter()
        c2 = time.process_time()
        print(f"{n:>8} {len(result.clusters):>8} {t1 - t0:>8.2f} {t2 - t1:>8.2f} {c2 - c1:>8.2f} "
              f"{1e6 * (t2 - t1) / n:>8.1f}",
              flush=True)
    # CPU time still grows with other load on the machine (shared caches), so say how loaded it was.
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
