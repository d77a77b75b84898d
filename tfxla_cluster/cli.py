"""The ``tfxla-cluster`` command line.

Each subcommand is one row of ``COMMANDS``: name, help, argparse set-up, handler (the handlers of
``viz``, ``report`` and the tools live in those packages' ``cli_commands.py``; what they share with this
module is in ``cli_common.py``, below all of them). Bad input of any kind (missing file, bad graph,
bad flag) ends with exit code 2 and one line on stderr — never a traceback. Set ``TFXLA_CLUSTER_DEBUG=1``
to see tracebacks of internal errors.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

from tfxla_cluster.cli_common import (Command, error_line, graph_args, load_graph, mark_args, naming_input,
                                      run_mark)
from tfxla_cluster.report import cli_commands as report_cli
from tfxla_cluster.tools import cli_commands as tools_cli
from tfxla_cluster.viz import cli_commands as viz_cli

# TF's C++ logging is noise for a CLI user; keep it quiet unless they asked for it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _fmt_shape(shape) -> str:
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def cmd_info(args: argparse.Namespace) -> int:
    from tfxla_cluster.graph.opdefs import ARG_OPS, RETVAL_OPS, base_dtype, dtype_name

    from tfxla_cluster.hostinfo import onednn_mode

    graph = load_graph(args)
    nodes = list(graph.op_nodes())
    print(f"graph: {args.graph}")
    print(f"TF oneDNN: {onednn_mode()}")
    print(f"nodes: {len(nodes)}  edges: {sum(1 for e in graph.edges() if e.src.is_op and e.dst.is_op)}")
    hist = collections.Counter(n.op for n in nodes)
    print("ops:")
    for op, count in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {op:<32} {count}")
    funcs = [f.signature.name for f in graph.library.function]
    print(f"functions: {len(funcs)}")
    for name in funcs:
        print(f"  {name}")

    def describe(node, i: int) -> str:
        dtype = dtype_name(base_dtype(node.outputs[i].dtype)) if i < len(node.outputs) else "?"
        return f"{dtype} {_fmt_shape(graph.output_shapes(node)[i])}"

    inputs = [n for n in nodes if n.op in (*ARG_OPS, "Placeholder", "PlaceholderWithDefault")
              and not n.data_inputs()]
    print("inputs:")
    for n in inputs:
        print(f"  {n.name}: {describe(n, 0)}")
    print("outputs:")
    retvals = [n for n in nodes if n.op in RETVAL_OPS]
    if retvals:
        for n in retvals:
            src = n.data_inputs()[0]
            print(f"  {n.name} <- {src.src.name}:{src.src_output}: {describe(src.src, src.src_output)}")
    else:
        for n in nodes:
            if n.outputs and not any(e.dst.is_op for e in n.out_edges):
                print(f"  {n.name}: " + ", ".join(describe(n, i) for i in range(len(n.outputs))))
    return 0


def _flags_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--flags", default=None,
                   help="TF_XLA_FLAGS-style string (default: the TF_XLA_FLAGS environment variable)")
    p.add_argument("--xla-flags", default=None,
                   help="XLA_FLAGS-style string (default: the XLA_FLAGS environment variable)")
    p.add_argument("--changed", action="store_true", help="show only flags that differ from TF's defaults")


def cmd_flags(args: argparse.Namespace) -> int:
    from tfxla_cluster import flags

    tf_flags = args.flags if args.flags is not None else os.environ.get("TF_XLA_FLAGS", "")
    xla_flags = args.xla_flags if args.xla_flags is not None else os.environ.get("XLA_FLAGS", "")
    own = os.environ.get(flags.TFXLA_CLUSTER_FLAGS, "")
    print(flags.describe(flags.Flags.parse(tf_flags, xla_flags, own), only_non_default=args.changed))
    return 0


def _mark_cmd_args(p: argparse.ArgumentParser) -> None:
    mark_args(p)
    p.add_argument("-o", "--output", help="write the marked GraphDef here (.pbtxt text, else binary)")


def cmd_mark(args: argparse.Namespace) -> int:
    from tfxla_cluster.graph.io import write_graph_def

    result = run_mark(args)
    print(result.summary(verbose=True))
    if args.output:
        path = write_graph_def(result.graph_def, args.output)
        print(f"wrote {path}")
    return 0


def _explain_args(p: argparse.ArgumentParser) -> None:
    mark_args(p)
    p.add_argument("--node", action="append", default=[], help="explain only this node (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def cmd_explain(args: argparse.Namespace) -> int:
    from tfxla_cluster.jit import explain

    result = run_mark(args)
    if args.json:
        text = explain.as_json(result)
        if args.grappler:  # the graph is TF's grappler output, which TF's oneDNN mode shapes
            import json

            from tfxla_cluster.hostinfo import onednn_mode

            text = json.dumps({"tf_onednn_mode": onednn_mode(), **json.loads(text)}, indent=2)
        print(text)
    elif args.node:
        for name in args.node:
            if name not in result.decisions:
                from tfxla_cluster.errors import NotFoundError

                raise NotFoundError(f"graph has no node named '{name}'")
            print(explain.explain_node(result, name))
    else:
        if args.grappler:
            from tfxla_cluster.hostinfo import onednn_mode

            print(f"TF oneDNN: {onednn_mode()} (grappler's remapper makes oneDNN fusions such as _FusedMatMul "
                  "only when it is on; TF_ENABLE_ONEDNN_OPTS=0/1 chooses)")
        print(explain.explain(result))
    return 0


def _hlo_args(p: argparse.ArgumentParser) -> None:
    mark_args(p)
    p.add_argument("--cluster", action="append", default=[], help="only this cluster (repeatable)")
    p.add_argument("--optimized", action="store_true", help="print the module after our XLA:CPU pipeline")
    p.add_argument("--dot", action="store_true", help="print Graphviz DOT (fusions as nested boxes)")
    p.add_argument("--arg-shape", action="append", default=[], metavar="NODE[:SLOT]=D0,D1,...[:DTYPE]",
                   help="shape (and dtype, e.g. float32) of a cluster input the graph leaves unknown, such as "
                        "a resource variable's; '=' alone or '=:int64' is a scalar (repeatable). Shapes the "
                        "graph declares (VarHandleOp 'shape', _Arg '_output_shapes'/'_handle_shapes') are "
                        "used without it")


def _lower_all(result, names: list[str], shapes: dict, fetches: list) -> dict:
    """Each named cluster's HLO module. A cluster fed by another whose output shape the graph leaves
    unknown (it depends on a variable's shape given by --arg-shape) is lowered once that producer has
    been: its lowered output shapes fill the gap, as TF's shape inference would at run time."""
    from tfxla_cluster import progress

    known = dict(shapes)
    modules: dict = {}
    pending = list(dict.fromkeys([*names, *result.clusters]))  # others may produce a needed shape
    with progress.task("hlo: lowering clusters", total=len(names)) as bar:
        while pending and not all(n in modules for n in names):
            _lower_round(result, pending, known, modules, fetches, names, bar)
    return modules


def _lower_round(result, pending: list[str], known: dict, modules: dict, fetches: list, names: list[str],
                 bar) -> None:
    """One pass over the clusters not lowered yet; raises the first failure when none could be."""
    from tfxla_cluster.errors import InvalidArgumentError
    from tfxla_cluster.tf2hlo import lower_cluster

    failed: Exception | None = None
    progressed = False
    for name in list(pending):
        try:
            lowered = lower_cluster(result.graph, result.clusters[name], name=name, arg_shapes=known,
                                    fetches=fetches)
        except InvalidArgumentError as e:
            failed = failed or e
            continue
        pending.remove(name)
        progressed = True
        modules[name] = lowered.module
        if name in names:
            bar.advance(name)
        results = lowered.module.entry.root.shape.tuple_shapes
        for out in lowered.outputs:
            if out.kind == "tensor" and out.tensor not in known:
                known[out.tensor] = tuple(results[out.index].dimensions)
    if not progressed:
        raise failed


def _graph_outputs(graph) -> list[tuple[str, int]]:
    """The tensors a GraphDef's caller fetches: every data output of a node no other node consumes
    (what ``info`` lists as outputs; a function graph's ``_Retval`` inputs are consumed, so none)."""
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.graph.opdefs import base_dtype

    return [(n.name, i) for n in graph.op_nodes() if n.outputs and not any(e.dst.is_op for e in n.out_edges)
            for i in range(len(n.outputs)) if base_dtype(n.outputs[i].dtype) != types_pb2.DT_RESOURCE]


def _parse_arg_shape(spec: str) -> tuple[tuple[str, int], tuple]:
    """``NODE[:SLOT]=D0,D1,...[:DTYPE]`` → ((node, slot), (numpy dtype or None, dims))."""
    from tfxla_cluster.errors import InvalidArgumentError

    tensor, eq, rest = spec.partition("=")
    dims_text, _, dtype_text = rest.partition(":")
    node, _, slot = tensor.rpartition(":") if tensor.rpartition(":")[2].isdigit() else (tensor, "", "0")
    try:
        if not eq or not node:
            raise ValueError
        dims = tuple(int(d) for d in dims_text.split(",") if d.strip())
        if any(d < 0 for d in dims):
            raise ValueError
    except ValueError:
        raise InvalidArgumentError(f"bad --arg-shape '{spec}': expected NODE[:SLOT]=D0,D1,...[:DTYPE]") from None
    dtype = None
    if dtype_text:
        import tensorflow as tf

        try:
            dtype = tf.as_dtype(dtype_text).as_numpy_dtype
        except TypeError:
            raise InvalidArgumentError(f"bad --arg-shape '{spec}': unknown dtype '{dtype_text}'") from None
    return (node, int(slot)), (dtype, dims)


def cmd_hlo(args: argparse.Namespace) -> int:
    from tfxla_cluster.errors import NotFoundError

    shapes = {}
    for spec in args.arg_shape:
        shapes.update([_parse_arg_shape(spec)])
    result = run_mark(args)
    for node, _ in shapes:
        if node not in result.graph:
            raise NotFoundError(f"--arg-shape: graph has no node named '{node}'")
    names = args.cluster or list(result.clusters)
    for name in names:
        if name not in result.clusters:
            raise NotFoundError(f"no cluster named '{name}'; clusters: {', '.join(result.clusters) or '(none)'}")
    if not names:
        print(f"# no clusters{': ' + result.skipped if result.skipped else ''}")
    # The graph's own outputs (nodes nothing consumes, which a session fetches) are cluster outputs
    # too; without them a cluster that ends the graph would lower to an empty module.
    fetches = _graph_outputs(result.graph)
    modules = _lower_all(result, names, shapes, fetches)
    for name in names:
        module = modules[name]
        if args.optimized:
            from tfxla_cluster.passes.pipeline import optimize

            module, _ = optimize(module, cluster=name)
        if args.dot:
            from tfxla_cluster.viz import hlo_to_dot

            print(hlo_to_dot(module))
        else:
            print(module.to_string())
    return 0


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", help="a Python TF program, run unmodified")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    p.add_argument("--backend", choices=("llvm", "evaluator"), default="llvm",
                   help="how clusters run: native code (default) or the HLO reference evaluator")
    p.add_argument("--check-numerics", action="store_true",
                   help="also run every cluster launch on TF's kernels and compare (max abs/rel error per "
                        "output); a divergence is bisected to the first differing HLO instruction, and the "
                        "exit code is 1 if the script itself succeeded")
    p.add_argument("--profile", action="store_true",
                   help="after the summary, print where first calls spent their time: trace, import, grappler, "
                        "clustering, encapsulation, then per cluster lowering, each HLO pass, LLVM IR, LLVM "
                        "optimisation, machine code and the first run")


def cmd_run(args: argparse.Namespace) -> int:
    import runpy

    from tfxla_cluster.errors import NotFoundError
    from tfxla_cluster.runtime import plugin

    if not os.path.exists(args.script):
        raise NotFoundError(f"{args.script}: No such file or directory")
    checker = None
    if getattr(args, "check_numerics", False):
        from tfxla_cluster.runtime.numerics import NumericsChecker

        checker = NumericsChecker().install()
    plugin.install(backend=args.backend)
    sys.argv = [args.script, *args.args]
    code = 0
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as e:  # the script's own exit code
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        plugin.uninstall()
        if checker is not None:
            checker.uninstall()
    print(plugin.summary(), file=sys.stderr)
    if getattr(args, "profile", False):
        print(plugin.profile().table(), file=sys.stderr)
    if checker is not None:
        print(checker.report(), file=sys.stderr)
        if code == 0 and not checker.ok:
            return 1
    return code


def _cache_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("list", "verify", "clear"), help="what to do with the persistent cache")
    p.add_argument("--dir", default=None,
                   help="cache directory (default: --tf_xla_persistent_cache_directory from TF_XLA_FLAGS, "
                        "else the default compile cache, see TFXLA_COMPILE_CACHE)")


def cmd_cache(args: argparse.Namespace) -> int:
    from tfxla_cluster import flags as flags_mod
    from tfxla_cluster.runtime import compile_cache as cache
    from tfxla_cluster.errors import InvalidArgumentError

    flags = flags_mod.Flags.from_env()
    directory = args.dir or flags.tf_xla_persistent_cache_directory or cache.default_directory()
    if not directory:
        raise InvalidArgumentError("no cache directory: pass --dir or set "
                                   "TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR (TFXLA_COMPILE_CACHE "
                                   "turns the default one off)")
    prefix = flags.tf_xla_persistent_cache_prefix
    try:
        if args.action == "clear":
            theirs = len(cache.tf_entries(directory, prefix))
            removed = cache.clear_entries(directory, prefix)
            print(f"removed {removed} entries from {directory}" + (f" ({theirs} of them TF's own)" if theirs else ""))
            left = cache.unremovable_entries(directory, prefix)
            for p in left:
                print(f"{p.name}  CORRUPT (is a directory; not removed)")
            return 1 if left else 0
        entries = cache.list_entries(directory, prefix)
    except OSError as e:
        raise InvalidArgumentError(f"{e.filename or directory}: {e.strerror or e}") from None
    bad = [e for e in entries if not e["ok"]]
    for e in entries if args.action == "list" else bad:
        status = "ok" if e["ok"] else f"CORRUPT ({e['error']})"
        print(f"{e['file']}  {e['module']}  {e['bytes']} bytes  {status}")
    print(f"{len(entries)} entries, {len(bad)} corrupt, in {directory}")
    return 1 if (args.action == "verify" and bad) else 0


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sample", nargs="?", default="transformer_block",
                   help="a sample in graphs/ (default: %(default)s)")


def cmd_demo(args: argparse.Namespace) -> int:
    from tfxla_cluster import demo

    return demo.run(args.sample)


def _bench_args(p: argparse.ArgumentParser) -> None:
    from tfxla_cluster import bench

    bench.add_arguments(p)


def cmd_bench(args: argparse.Namespace) -> int:
    from tfxla_cluster import bench

    return bench.run(args)


def _ops_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", nargs="?", default=None,
                   help="a GraphDef (.pbtxt/.pb) or SavedModel directory: only its ops, with node counts "
                        "(default: every op of TF's XLA_CPU_JIT registry and every op we lower)")
    p.add_argument("--signature", default="serving_default",
                   help="SavedModel signature to load (default: %(default)s)")
    p.add_argument("--grappler", action="store_true", help="run TF's grappler first")
    p.add_argument("--no-inline", action="store_true", help="keep function calls as call nodes")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def cmd_ops(args: argparse.Namespace) -> int:
    import json

    from tfxla_cluster.tf2hlo import coverage

    rows = coverage.graph_ops(load_graph(args)) if args.graph else coverage.all_ops()
    counts = coverage.summary(rows)
    if args.json:
        print(json.dumps({"graph": args.graph, "jit_device": coverage.JIT_DEVICE, "summary": counts,
                          "ops": [r.as_dict() for r in rows]}, indent=2))
        return 0
    if args.graph:
        print(f"{args.graph}: {sum(r.nodes for r in rows)} nodes of {len(rows)} ops: {counts['tf_registry']} in "
              f"TF's {coverage.JIT_DEVICE} registry, we lower {counts['lowered']} of them, not "
              f"{counts['not_lowered']}; {counts['no_xla_kernel']} with no XLA kernel (TF's XLA does not compile "
              f"them either); {counts['lowered_outside_registry']} lowered outside the registry")
    else:
        print(f"TF's {coverage.JIT_DEVICE} registry: {counts['tf_registry']} ops, we lower {counts['lowered']}, "
              f"not {counts['not_lowered']}; {counts['lowered_outside_registry']} more lowered outside the registry")
    width = max([len(r.op) for r in rows] + [2])
    for r in rows:
        count = f"{r.nodes:>5}  " if args.graph else ""
        types = "; ".join(f"{attr}: {','.join(ts)}" for attr, ts in r.dtypes.items()) or "-"
        if args.graph and r.used:
            types = "uses " + "; ".join(f"{a}={','.join(ts)}" for a, ts in r.used.items()) + f"  (allowed {types})"
        print(f"  {r.op:<{width}}  {count}{r.status:<11}  {types}")
        if r.reason:
            print(f"  {'':<{width}}  {'':>{7 if args.graph else 0}}why: {r.reason}")
        for why in r.dtype_refused[:3]:
            print(f"  {'':<{width}}  {'':>{7 if args.graph else 0}}TF's XLA refuses: {why}")
        if len(r.dtype_refused) > 3:
            print(f"  {'':<{width}}  {'':>{7 if args.graph else 0}}... and {len(r.dtype_refused) - 3} more node(s)")
    return 0


# The one table of subcommands, in --help order.
COMMANDS: tuple[Command, ...] = (
    Command("info", "summarize a graph: nodes, op histogram, functions, inputs and outputs",
            graph_args, cmd_info),
    Command("flags", "print the effective TF_XLA_FLAGS / XLA_FLAGS configuration with each flag's help",
            _flags_args, cmd_flags),
    Command("mark", "run TF's MarkForCompilation pass: print TF's clustering summary, write the marked graph",
            _mark_cmd_args, cmd_mark),
    Command("explain", "say for every node which cluster it joined, or why it was left out",
            _explain_args, cmd_explain),
    Command("hlo", "lower each cluster to HLO (XLA's text syntax) and print it",
            _hlo_args, cmd_hlo),
    Command("ops", "which ops we lower, with the dtypes TF's XLA_CPU_JIT kernels allow, next to TF's registry "
                   "(in general or for a graph); the ones we do not lower, with why",
            _ops_args, cmd_ops),
    Command("run", "run a TF program with every tf.function going through tfxla_cluster (TF_XLA_FLAGS apply)",
            _run_args, cmd_run),
    Command("cache", "list, verify or clear the persistent compile cache (--tf_xla_persistent_cache_directory)",
            _cache_args, cmd_cache),
    Command("demo", "cluster, explain, lower, optimize, compile, run and time a bundled model against TF",
            _demo_args, cmd_demo),
    Command("bench", "time TF graph mode, real XLA (jit_compile=True) and us on standard workloads; print ratios",
            _bench_args, cmd_bench),
    Command("viz", "draw the graph with its XLA clusters (.dot, .svg or interactive .html); "
                   "unclustered nodes show why",
            viz_cli.viz_args, viz_cli.cmd_viz),
    Command("tensorboard", "write the marked graph as a TensorBoard event file (Graphs tab: color by XLA "
                           "cluster)",
            viz_cli.tensorboard_args, viz_cli.cmd_tensorboard),
    Command("report", "one HTML page: flags, clusters and reasons, HLO before/after, kernels, compile and run "
                      "times vs TF's kernels, a performance advisor (and --check-numerics)",
            report_cli.report_args, report_cli.cmd_report),
    Command("run-hlo", "run an HLO text module on the native backend (XLA's run_hlo_module): random or npz "
                       "inputs, npz outputs, compare with the HLO evaluator, time it",
            tools_cli.run_hlo_args, tools_cli.cmd_run_hlo),
    Command("aot", "compile a TF graph ahead of time (tfcompile): an ELF object + C header that link with "
                   "libc/libm/libpthread only",
            tools_cli.aot_args, tools_cli.cmd_aot),
)


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (exit 2), like every other bad input: argparse's own
    ``error`` prints the whole usage block first."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tfxla-cluster",
        description="See, test and speed up how TensorFlow's XLA JIT clusters and compiles a graph.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.setup(p)
        p.set_defaults(handler=cmd.handler)
    return parser


def _join_flag_values(argv: list[str]) -> list[str]:
    """``--flags --tf_xla_auto_jit=2`` → ``--flags=--tf_xla_auto_jit=2``: flag strings start with
    dashes, which argparse would otherwise take for options of ours."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in ("--flags", "--xla-flags") and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_join_flag_values(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    if argv is None:  # a real command line, not a test calling main([...])
        from tfxla_cluster import _quiet

        _quiet.install()
    from tfxla_cluster.errors import TfXlaError  # imports TF: after the log filter is in place
    try:
        return args.handler(args)
    except BrokenPipeError:  # e.g. `tfxla-cluster info g.pbtxt | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except TfXlaError as e:
        print(error_line(naming_input(e, args)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # documented: a bug of ours is still one line (exit 1), unless TFXLA_CLUSTER_DEBUG
        from tfxla_cluster.flags import env_switch

        if env_switch("TFXLA_CLUSTER_DEBUG"):
            raise
        print(f"tfxla-cluster: internal error: {type(e).__name__}: {e} "
              "(set TFXLA_CLUSTER_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
