"""The ``run-hlo`` and ``aot`` subcommands of ``tfxla-cluster``.

Stage: command line (tools). Argument set-up and handlers; ``cli.COMMANDS`` lists them. Heavy imports
(TensorFlow, llvmlite) happen when a command runs.
"""
from __future__ import annotations

import argparse
import textwrap

_RUN_HLO_EPILOG = """\
examples:
  # a module as XLA printed it after its optimizations (the sample is jax's
  # jax.jit(f).lower(x).compile().as_text()), random inputs, checked against our HLO evaluator, timed:
  tfxla-cluster run-hlo tools/examples/run_hlo/mlp.optimized.hlo --reference evaluator --iterations 20
  # given inputs (npz with arg0, arg1, ...), results to out.npz (out0, out1, ...):
  tfxla-cluster run-hlo tools/examples/run_hlo/mlp.hlo --inputs tools/examples/run_hlo/mlp.inputs.npz \
      --output out.npz --print-literals

exit codes: 0 ok; 1 results differ from the reference beyond the bounds; 2 bad input (unparseable HLO,
wrong number, shape or dtype of inputs: one line, file:line:column: what)
"""


def _raw_help(p: argparse.ArgumentParser, epilog: str) -> None:
    """Keep the epilog's examples as written (and wrap the description ourselves)."""
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.description = textwrap.fill(p.description or "", 100)
    p.epilog = epilog


def run_hlo_args(p: argparse.ArgumentParser) -> None:
    _raw_help(p, _RUN_HLO_EPILOG)
    p.add_argument("module", help="HLO text (ours, or as XLA prints it: unoptimized or optimized)")
    p.add_argument("--inputs", metavar="IN.npz",
                   help="arguments: an npz with arg0 ... argN-1 in ENTRY parameter order (default: random)")
    p.add_argument("--output", metavar="OUT.npz",
                   help="write the results here: out0 ... outK-1 (a tuple result flattened in order)")
    p.add_argument("--reference", choices=("evaluator",), default=None,
                   help="also run the HLO reference evaluator and compare (exit 1 on a difference)")
    p.add_argument("--random-seed", type=int, default=0, metavar="N",
                   help="seed of the random inputs when --inputs is not given (default: %(default)s)")
    p.add_argument("--iterations", type=int, default=1, metavar="N",
                   help="run N times and print the median time (default: %(default)s)")
    p.add_argument("--print-literals", action="store_true", help="print the arguments and results")
    p.add_argument("--abs-error-bound", type=float, default=1e-3, metavar="E",
                   help="absolute error bound for --reference (default: %(default)s)")
    p.add_argument("--rel-error-bound", type=float, default=1e-3, metavar="E",
                   help="relative error bound for --reference (default: %(default)s); an element differs "
                        "when it is beyond both bounds")


def cmd_run_hlo(args: argparse.Namespace) -> int:
    from tfxla_cluster.tools import run_hlo

    return run_hlo.run(args)


_AOT_EPILOG = """\
example (tools/examples/aot also has a Makefile: make -C tools/examples/aot run):
  tfxla-cluster aot --graph tools/examples/aot/model.pbtxt --config tools/examples/aot/model.config.pbtxt \
      --name mlp --out-dir build
  cc tools/examples/aot/main.c build/mlp.o -Ibuild -lm -lpthread -o build/mlp && build/mlp

CONFIG is tfcompile's tf2xla.Config text proto:
  feed  { id { node_name: "x" } shape { dim { size: 2 } dim { size: 8 } } type: DT_FLOAT }
  fetch { id { node_name: "probs" output_index: 0 } }
  variable { node_name: "step" shape { } type: DT_INT32 readonly: true }   # a VarHandleOp the graph only reads

NAME.h declares, with NAME literally the given name:
  #define NAME_NUM_ARGS n / NAME_NUM_RESULTS m
  extern const int64_t NAME_arg_bytes[NAME_NUM_ARGS], NAME_result_bytes[NAME_NUM_RESULTS];
  int NAME_run(const void* const* args, void* const* results);   /* 0 on success */
args: feeds in config order, then variables; results: fetches in config order, then the new value of
each variable not marked readonly. Buffers are dense row-major and allocated by the caller.
"""


def aot_args(p: argparse.ArgumentParser) -> None:
    _raw_help(p, _AOT_EPILOG)
    p.add_argument("--graph", required=True, metavar="GRAPH.pb|GRAPH.pbtxt", help="the GraphDef to compile")
    p.add_argument("--config", required=True, metavar="CONFIG.pbtxt",
                   help="tf2xla.Config text proto: feeds, fetches, variables")
    p.add_argument("--name", required=True, help="C name prefix of the generated symbols and files")
    p.add_argument("--out-dir", required=True, metavar="DIR", help="where NAME.o and NAME.h are written")
    p.add_argument("--target-cpu", default=None,
                   help="LLVM CPU name to compile for, e.g. x86-64-v3, skylake-avx512 (default: this machine's)")
    p.add_argument("--target-features", default=None,
                   help="LLVM feature string, e.g. +avx2,+fma (default: this machine's, or the named CPU's)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="split large kernels over up to N threads (a pthread pool linked into the object); "
                        "default 1: single-threaded, like tfcompile without a thread pool")


def cmd_aot(args: argparse.Namespace) -> int:
    from tfxla_cluster.tools.aot import compile_aot

    result = compile_aot(args.graph, args.config, args.name, args.out_dir, target_cpu=args.target_cpu,
                         target_features=args.target_features, threads=args.threads)
    obj = result.obj
    print(f"wrote {result.object_path} ({len(obj.object_code)} bytes; {obj.cpu}"
          f"{', ' + str(obj.threads) + ' threads' if obj.threads > 1 else ''}) and {result.header_path}")
    for kind, specs in (("arg", result.args), ("result", result.results)):
        for k, s in enumerate(specs):
            print(f"  {kind} {k}: {s.name} ({s.origin}) {s.dtype_name} "
                  f"[{','.join(map(str, s.dims))}] {s.nbytes} bytes")
    return 0
