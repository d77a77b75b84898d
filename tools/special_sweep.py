"""Special-value sweep: every elementwise op of the fuzzer's table × dtype × special value, TF's XLA vs ours.

Stage: testing tool (not part of the package). For each unary op and dtype, one program applies the op to a
vector of every special value of the dtype (NaN, ±inf, ±0, denormals, ±max, ±1, ...; ints: min, max, 0, ±1,
...); a binary op gets every pair of them. Each program runs twice: the values as function arguments
(``arg``: computed by generated code) and baked into the graph as constants (``const``: folded at compile
time). TF's XLA (``jit_compile=True``) is the oracle; ours runs with ``jit_compile=True``. A case is one
op × dtype × value (or value pair) × mode; it differs when its element differs from TF's XLA under the
fuzzer's rules (``tools/fuzz.py``: exact for ints and bools, the op's ulp budget for floats, NaN positions and,
for exact ops, signed zeros).

    python tools/special_sweep.py                      # everything, a summary and each differing case
    python tools/special_sweep.py --ops log,erf --dtypes float64 --modes const
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz  # noqa: E402


def programs(ops: list[str], dtypes: list[str], modes: list[str]):
    """(op, dtype, mode, program, operand tuples) for each swept combination."""
    for name in ops:
        spec = fuzz.OPS[name]
        if spec.kind not in ("unary", "binary"):
            continue
        for dtype in spec.dtypes:
            if dtype not in dtypes:
                continue
            vals = fuzz.special_values(dtype)
            if spec.kind == "unary":
                cases = [(v,) for v in vals]
            else:
                cases = list(itertools.product(vals, vals))
            out = spec.result(dtype)
            for mode in modes:
                ins = [fuzz.Input(mode, dtype, (len(cases),), [c[k] for c in cases]) for k in range(len(cases[0]))]
                node = fuzz.Node(name, list(range(len(ins))), {}, out, (len(cases),))
                yield name, dtype, mode, fuzz.Program(ins, [node], [len(ins)]), cases


def sweep(ops: list[str], dtypes: list[str], modes: list[str], log=print) -> dict:
    stats = {"cases": 0, "differ": 0, "errors": 0, "rejected": 0, "by": {}}
    for name, dtype, mode, prog, cases in programs(ops, dtypes, modes):
        ref = fuzz.run(prog, "xla")
        if not ref.ok:
            stats["rejected"] += len(cases)
            continue
        got = fuzz.run(prog, "jit")
        stats["cases"] += len(cases)
        key = f"{name}:{dtype}:{mode}"
        if not got.ok:
            stats["errors"] += len(cases)
            stats["by"][key] = len(cases)
            log(f"ERROR {key}: {got.error}")
            continue
        spec = fuzz.OPS[name]
        out = spec.result(dtype)
        tol = spec.ulps + (1 if out in ("float16", "bfloat16") and spec.ulps else 0)
        e, g = ref.values[0], got.values[0]
        bad = []
        for k, case in enumerate(cases):
            why = fuzz.compare(e[k:k + 1], g[k:k + 1], out, tol, 0.0)
            if why:
                bad.append(f"{name}{case!r}: ours {g[k]!r}, TF's XLA {e[k]!r}")
        if bad:
            stats["differ"] += len(bad)
            stats["by"][key] = len(bad)
            log(f"DIFF {key} ({len(bad)} of {len(cases)})\n  " + "\n  ".join(bad[:8]) +
                ("\n  ..." if len(bad) > 8 else ""))
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", help="comma-separated op names of tools/fuzz.py's table (default: all elementwise)")
    ap.add_argument("--dtypes", default=",".join(fuzz.ALL + fuzz.COMPLEX))
    ap.add_argument("--modes", default="arg,const")
    a = ap.parse_args(argv)
    import tfxla_cluster._quiet  # noqa: F401
    ops = a.ops.split(",") if a.ops else list(fuzz.OPS)
    unknown = [o for o in ops if o not in fuzz.OPS]
    if unknown:
        ap.error(f"unknown ops: {', '.join(unknown)}")
    stats = sweep(ops, a.dtypes.split(","), a.modes.split(","))
    print(f"cases {stats['cases']}  differ from TF's XLA {stats['differ']}  fail to compile {stats['errors']}  "
          f"rejected by TF's XLA {stats['rejected']}")
    return 1 if stats["differ"] or stats["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
