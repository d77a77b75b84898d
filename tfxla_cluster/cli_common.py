"""Stage: command line — what every ``tfxla-cluster`` command module shares, below all of them.

``cli.py`` holds the one command table and the main loop; ``report/``, ``viz/`` and ``tools/`` define
their commands' argument set-up and handlers with the helpers here, and never import ``cli.py`` back.
Importing this module imports nothing heavy (TensorFlow loads when a command runs), so
``tfxla-cluster --help`` stays fast.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One subcommand: ``help`` shows in ``--help``; ``setup`` adds its arguments; ``handler`` runs it
    and returns the exit code."""

    name: str
    help: str
    setup: Callable[[argparse.ArgumentParser], None]
    handler: Handler


def error_line(e) -> str:
    """A typed error as the one stderr line the CLI prints (multi-line messages, such as hints or cycle
    drawings, are joined)."""
    one_line = " | ".join(part.strip() for part in e.status.splitlines() if part.strip())
    return f"tfxla-cluster: error: {one_line}"


def graph_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="a GraphDef (.pbtxt text or .pb binary) or a SavedModel directory")
    p.add_argument("--signature", default="serving_default",
                   help="SavedModel signature to load (default: %(default)s)")
    p.add_argument("--grappler", action="store_true",
                   help="run TF's grappler first, as TF's runtime does before clustering")
    p.add_argument("--no-inline", action="store_true", help="keep function calls as call nodes")


def load_graph(args: argparse.Namespace):
    from tfxla_cluster.graph import load_graph

    return load_graph(args.graph, signature=args.signature, grappler=args.grappler,
                      inline=not args.no_inline, flags=getattr(args, "flags", None))


def naming_input(e, args: argparse.Namespace):
    """``e`` with the command's input file named in front, where its message does not name it already.

    Errors from deep in a stage (a function body's bad node found while clustering, a grappler status)
    do not know the file; a command line user must be told which input is wrong. Flag errors and errors
    about an option (``--name ...``) name that instead; an error type with its own constructor is kept."""
    from tfxla_cluster.errors import FlagError

    source = getattr(args, "graph", None)
    if not source or isinstance(e, FlagError) or str(source) in e.message or e.message.startswith("--"):
        return e  # named already, or about a command-line option (which the message names)
    try:
        return type(e)(f"{source}: {e.message}")
    except TypeError:
        return e


def mark_args(p: argparse.ArgumentParser) -> None:
    graph_args(p)
    p.add_argument("--flags", default=None,
                   help="TF_XLA_FLAGS-style string (default: the TF_XLA_FLAGS environment variable)")
    p.add_argument("--session-name", default="", help="cluster-name prefix (TF's session metadata name)")
    p.add_argument("--dump-prefix", default=None,
                   help="where --tf_xla_clustering_debug writes TF's dumps (default: $TF_DUMP_GRAPH_PREFIX)")


def run_mark(args: argparse.Namespace):
    """The MarkResult for the graph and flags on the command line (``result.flags`` has the flags)."""
    from tfxla_cluster import flags as flags_mod
    from tfxla_cluster.jit.mark_for_compilation import mark_for_compilation

    # Parse flags before loading: a bad flag should fail fast, before TF and grappler start.
    flags = flags_mod.Flags.resolve(args.flags)
    return mark_for_compilation(load_graph(args), flags, session_name=args.session_name,
                                dump_prefix=getattr(args, "dump_prefix", None))
