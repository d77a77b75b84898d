"""The ``viz`` and ``tensorboard`` subcommands of ``tfxla-cluster``.

Stage: command line (visualization). Argument set-up and handlers; ``cli.COMMANDS`` lists them. It
imports nothing heavy (TensorFlow loads when a command runs), so
``tfxla-cluster --help`` stays fast. Errors are the library's typed errors, which the CLI turns into
one line and exit code 2. No format needs Graphviz: ``.svg``/``.html`` use our own layout.
"""
from __future__ import annotations

import argparse
import os

from tfxla_cluster.cli_common import mark_args, run_mark
from tfxla_cluster.viz.layout import COLLAPSE_OVER


def _graph_and_flags_args(p: argparse.ArgumentParser) -> None:
    mark_args(p)


def _mark(args: argparse.Namespace):
    """(result, flags) for the graph and flags on the command line."""
    result = run_mark(args)
    return result, result.flags


def viz_args(p: argparse.ArgumentParser) -> None:
    _graph_and_flags_args(p)
    p.add_argument("-o", "--output", required=True,
                   help="output file: .dot (Graphviz text), .svg or .html (interactive page); all made by "
                        "Python alone")
    p.add_argument("--format", choices=("dot", "svg", "html"), default=None,
                   help="output format (default: from the file extension)")
    p.add_argument("--around", metavar="NODE", default=None,
                   help="draw only NODE's neighbourhood (for big graphs); its boundary is marked")
    p.add_argument("--depth", metavar="K", type=int, default=2,
                   help="with --around: how many edges away from NODE to draw (default: %(default)s)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--collapse", dest="collapse", action="store_const", const=True, default=None,
                      help="start with each cluster drawn as one box (the .html page expands one on a click); "
                           f"the default for .svg/.html of graphs over {COLLAPSE_OVER} nodes")
    view.add_argument("--expand", dest="collapse", action="store_const", const=False,
                      help="start with every cluster drawn with its nodes, however big the graph")
    p.add_argument("--no-legend", action="store_true", help="leave out the legend")
    p.add_argument("--title", default=None, help="picture title (default: the graph file's name)")


def cmd_viz(args: argparse.Namespace) -> int:
    from tfxla_cluster.viz.layout import format_for

    # A bad file name fails at once, before TensorFlow loads.
    fmt = format_for(args.output, args.format)
    from tfxla_cluster.viz.api import write

    result, flags = _mark(args)
    title = args.title if args.title is not None else os.path.basename(os.path.normpath(args.graph))
    path = write(result, args.output, fmt=fmt, flags=flags, title=title, around=args.around,
                 depth=args.depth, collapse=args.collapse, legend=not args.no_legend)
    print(f"wrote {path} ({len(result.clusters)} cluster{'s' if len(result.clusters) != 1 else ''}, "
          f"{len(result.decisions)} nodes)")
    return 0


def tensorboard_args(p: argparse.ArgumentParser) -> None:
    _graph_and_flags_args(p)
    p.add_argument("--logdir", required=True, help="directory for the event file (created if missing)")
    p.add_argument("--no-shapes", action="store_true",
                   help="do not add _output_shapes (tensor shapes on TensorBoard's edges)")


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from tfxla_cluster.viz.tensorboard import write_tensorboard

    result, _ = _mark(args)
    path = write_tensorboard(result, args.logdir, add_shapes=not args.no_shapes)
    print(f"wrote {path} ({len(result.clusters)} cluster{'s' if len(result.clusters) != 1 else ''})")
    print(f"view it with: tensorboard --logdir {args.logdir}  (Graphs tab, Color by: XLA Cluster)")
    return 0
