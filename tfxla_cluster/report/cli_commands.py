"""The ``report`` subcommand of ``tfxla-cluster``.

Stage: command line (report). ``tfxla-cluster report GRAPH -o report.html`` or
``tfxla-cluster report -o report.html -- script.py ARGS``. Argument set-up and handler; ``cli.COMMANDS``
lists them. Importing it imports nothing heavy. Bad input (missing file, bad flag, bad ``--input-shape``,
an output that is not ``.html``) is a typed error: one line and exit code 2.
"""
from __future__ import annotations

import argparse
import os

from tfxla_cluster.viz.layout import COLLAPSE_OVER


def report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", nargs="+", metavar="SOURCE",
                   help="GRAPH: a GraphDef (.pbtxt/.pb) or SavedModel directory; or, after --, "
                        "script.py ARGS: a Python TF program and its arguments (run under the plugin)")
    p.add_argument("-o", "--output", required=True, help="the HTML file to write")
    p.add_argument("--flags", default=None,
                   help="TF_XLA_FLAGS-style string (default: the TF_XLA_FLAGS environment variable)")
    p.add_argument("--signature", default="serving_default",
                   help="SavedModel signature to load (default: %(default)s)")
    p.add_argument("--grappler", action="store_true",
                   help="run TF's grappler first, as TF's runtime does before clustering")
    p.add_argument("--no-run", action="store_true", help="static report only: do not compile or run anything")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="shape for a graph input whose static shape is unknown (repeatable)")
    p.add_argument("--calls", type=int, default=3, help="how many times a GRAPH is run (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=5,
                   help="timing runs per cluster, compiled and on TF's kernels; the median is shown "
                        "(default: %(default)s)")
    p.add_argument("--check-numerics", action="store_true",
                   help="compare every cluster launch with TF's kernels; bisect divergences to an HLO instruction")
    p.add_argument("--backend", choices=("llvm", "evaluator"), default="llvm",
                   help="how clusters run: native code (default) or the HLO reference evaluator")
    p.add_argument("--around", metavar="NODE", default=None, help="picture: only NODE's neighbourhood")
    p.add_argument("--depth", metavar="K", type=int, default=2, help="with --around: edges away (default: %(default)s)")
    collapse = p.add_mutually_exclusive_group()
    collapse.add_argument("--collapse", dest="collapse", action="store_const", const=True, default=None,
                          help="picture: start with each cluster drawn as one box, click to expand "
                               f"(default: only for graphs over {COLLAPSE_OVER} nodes)")
    collapse.add_argument("--no-collapse", dest="collapse", action="store_const", const=False,
                          help="picture: draw every node, however big the graph")
    p.add_argument("--title", default=None, help="page title (default: the graph's or script's file name)")
    p.add_argument("--profile", action="store_true",
                   help="also print where first calls spent their time (per cluster: lowering, each HLO pass, "
                        "LLVM IR, LLVM optimisation, machine code, first run); the page always shows it")


def parse_input_shapes(specs: list[str]) -> dict[str, tuple[int, ...]]:
    """``NAME=D0,D1`` (``NAME=`` for a scalar) → {name: dims}."""
    from tfxla_cluster.errors import InvalidArgumentError

    out = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise InvalidArgumentError(f"bad --input-shape '{spec}': expected NAME=D0,D1,...") from None
    return out


def cmd_report(args: argparse.Namespace) -> int:
    from tfxla_cluster.errors import InvalidArgumentError, NotFoundError

    if not args.output.endswith((".html", ".htm")):
        raise InvalidArgumentError(f"report output must be an .html file, got '{args.output}'")
    shapes = parse_input_shapes(args.input_shape)
    first, rest = args.source[0], args.source[1:]
    script = first if first.endswith(".py") else None
    if script is None and rest:
        raise InvalidArgumentError(f"unexpected arguments after GRAPH: {' '.join(rest)} "
                                   "(a script goes after --: report -o out.html -- script.py ARGS)")
    if not os.path.exists(first):
        raise NotFoundError(f"{first}: No such file or directory")
    from tfxla_cluster import flags as flags_mod

    # Parse flags before anything heavy: a bad flag fails fast.
    flags = flags_mod.Flags.resolve(args.flags)
    from tfxla_cluster.report.api import build_report, write_report

    if script is not None:
        if args.flags is not None:   # the program's tf.functions read TF_XLA_FLAGS
            os.environ["TF_XLA_FLAGS"] = args.flags
        report = build_report(script=script, script_args=rest, flags=flags, title=args.title,
                              check_numerics=args.check_numerics, backend=args.backend, repeats=args.repeats,
                              measure_timings=not args.no_run)
    else:
        report = build_report(first, flags=flags, title=args.title, run=not args.no_run, input_shapes=shapes,
                              calls=args.calls, repeats=args.repeats, check_numerics=args.check_numerics,
                              backend=args.backend, grappler=args.grappler, signature=args.signature)
    path = write_report(report, args.output, around=args.around, depth=args.depth, collapse=args.collapse)
    clusters = sum(len(f.clusters) for f in report.functions)
    warn = sum(1 for a in report.advice if a.severity == "warn")
    print(f"wrote {path} ({clusters} cluster{'s' if clusters != 1 else ''}, {len(report.advice)} advisor "
          f"finding{'s' if len(report.advice) != 1 else ''}, {warn} costing time)")
    if report.dynamic_missing:
        print(f"no run-time numbers: {report.dynamic_missing}")
    if args.profile and report.profile is not None:
        import sys

        print(report.profile.table(), file=sys.stderr)
    if report.numerics is not None:
        print(report.numerics.report())
        return 0 if report.numerics.ok else 1
    return 0
