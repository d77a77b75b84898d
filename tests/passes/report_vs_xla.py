"""Print the kernel-count and buffer tables: ours vs XLA:CPU's optimized HLO, per sample module.

    python -m tests.passes.report_vs_xla       (from the repository root)

Ours uses XLA:CPU's TopK runtime routine (``runtime_targets={"TopK"}``), as XLA does.
Kernels = fusions + unfused non-trivial instructions (parameters, constants, tuples,
get-tuple-elements and bitcasts are not kernels) in the computations that run as code. Temp bytes are
the entry computation's arena after buffer assignment; "unfused intermediates" is the sum of every
intermediate value of the same module optimized with ``--xla_disable_hlo_passes=fusion`` (one kernel
per instruction, nothing reused), and "TF HLO intermediates" the same sum on the module as TF lowered it.
"""
from __future__ import annotations

import time

from tests.passes.passes_helpers import (TF_GOLDENS, TF_GRAPHS, kernel_count, load_tf_golden, load_tf_graph,
                                         tf_golden_modules, tf_graph_modules)
from tfxla_cluster.flags import Flags
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes import optimize, unfused_intermediate_bytes


def rows():
    flags = Flags.parse()
    unfused_flags = Flags.parse(xla_flags="--xla_disable_hlo_passes=fusion")
    samples = [("graphs/tf", n, load_tf_graph, TF_GRAPHS / n / "optimized_hlo.txt") for n in tf_graph_modules()]
    samples += [("tests/hlo/data/tf", n, load_tf_golden, TF_GOLDENS / f"{n}.optimized_hlo.txt")
                for n in tf_golden_modules()]
    for where, name, load, xla_path in samples:
        module, _ = load(name)
        tf_bytes = unfused_intermediate_bytes(module)
        t0 = time.perf_counter()
        module, ba = optimize(module, flags, runtime_targets=frozenset({"TopK"}))
        seconds = time.perf_counter() - t0
        plain, _ = load(name)
        plain, _ = optimize(plain, unfused_flags)
        xla = kernel_count(parse_module(xla_path.read_text(encoding="utf-8")))
        yield (where, name, kernel_count(module), xla, ba.temp_bytes, unfused_intermediate_bytes(plain), tf_bytes,
               seconds)


def main() -> None:
    print("| sample | ours | XLA:CPU | peak temp bytes (ours) | unfused intermediates | TF HLO intermediates | optimize s |")
    print("|---|---|---|---|---|---|---|")
    for where, name, ours, xla, temp, unfused, tf_bytes, seconds in rows():
        print(f"| {where}/{name} | {ours} | {xla} | {temp} | {unfused} | {tf_bytes} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
