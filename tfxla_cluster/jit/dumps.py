"""TF's debug dumps of the clustering pass, with TF's file names and renaming rules.

Stage: clustering output. ``dump_graph(name, graph_def)`` writes ``$TF_DUMP_GRAPH_PREFIX/<name>.pbtxt``
the first time a name is used in the process, then ``<name>_1.pbtxt``, ``<name>_2.pbtxt``, ... (TF's
process-global per-name counter in dump_graph.cc; ``/ [ ] * ? \\`` in names become ``_``).
``annotated`` renames nodes ``<cluster>/<node>``, ``varhandle/<node>`` or ``unclustered/<node>`` (inputs
follow), as TF's ``mark_for_compilation_annotated`` dump does. Nothing is written without a prefix.

Which dumps TF writes depends on two triggers: ``--tf_xla_clustering_debug`` (the clustering pass,
``before_increase_dynamism_for_auto_jit_pass``) and ``VLOG_IS_ON(1)`` in the pass's source file
(``encapsulate_subgraphs_*`` / ``encapsulate_fdef_*`` in encapsulate_subgraphs_pass.cc, ``build_xla_ops``
in build_xla_ops_pass.cc) — :func:`vlog_is_on` answers the latter from TF's own environment variables.
"""
from __future__ import annotations

import fnmatch
import logging
import math
import re
from pathlib import Path

from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from tfxla_cluster.flags import env_switch
from tfxla_cluster.process_state import PROCESS

log = logging.getLogger("tfxla_cluster.dump_graph")

_ILLEGAL = str.maketrans({c: "_" for c in "/[]*?\\"})


def after_clustering_triggers(flags=None) -> tuple[bool, bool, bool]:
    """Which of TF's dumps of the passes after clustering are on (``build_xla_ops_dump.write_tf_dumps``
    writes them): (``before_increase_dynamism_for_auto_jit_pass``: ``--tf_xla_clustering_debug`` in ``flags``
    or ``VLOG_IS_ON(1)`` in its pass; the encapsulate pass's; build_xla_ops'). All off: the rewrite need not
    import the dump writer."""
    debug = bool(flags is not None and flags.tf_xla_clustering_debug)
    return (debug or vlog_is_on("increase_dynamism_for_auto_jit_pass"), vlog_is_on("encapsulate_subgraphs_pass"),
            vlog_is_on("build_xla_ops_pass"))


def vlog_is_on(module: str, level: int = 1) -> bool:
    """TF's ``VLOG_IS_ON(level)`` inside source file ``module`` (basename without ``.cc``): true when
    ``TF_CPP_MAX_VLOG_LEVEL`` (legacy ``TF_CPP_MIN_VLOG_LEVEL``) is at least ``level`` or
    ``TF_CPP_VMODULE`` (``name=level,...``; globs as absl allows) gives the module at least ``level``.
    Read at each call (TF reads them once at start-up), so a test can switch dumps on and off."""
    for var in ("TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_MIN_VLOG_LEVEL"):
        value = env_switch(var).strip()
        if value.lstrip("-").isdigit():
            if int(value) >= level:
                return True
            break
    for item in env_switch("TF_CPP_VMODULE").split(","):
        pattern, sep, value = item.strip().partition("=")
        if sep and value.strip().lstrip("-").isdigit() and fnmatch.fnmatchcase(module, pattern.strip()):
            return int(value) >= level
    return False


def reset_counters() -> None:
    """Dump names as in a fresh process (the per-name counter of :data:`~tfxla_cluster.process_state.PROCESS`)."""
    PROCESS.reset_dump_names()


def unique_filename(name: str, suffix: str = ".pbtxt") -> str:
    name = name.translate(_ILLEGAL)
    count = PROCESS.next_dump_count(name)
    return f"{name}_{count}{suffix}" if count else f"{name}{suffix}"


def dump_graph(name: str, graph_def, prefix: str | None = None) -> str:
    """Write ``graph_def`` as TF's DumpGraphToFile would (or a FunctionDef, as DumpFunctionDefToFile —
    same counter); returns the path or TF's "not specified" text."""
    prefix = prefix if prefix is not None else env_switch("TF_DUMP_GRAPH_PREFIX")
    if not prefix:
        return "(TF_DUMP_GRAPH_PREFIX not specified)"
    path = Path(prefix) / unique_filename(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tf_text_format(graph_def))
    log.info("Dumped GraphDef to %s", path)
    return str(path)


_FLOAT_FIELD = re.compile(r"^(\s*)(float_val|f|scomplex_val): (\S+)$", re.M)
_DOUBLE_FIELD = re.compile(r"^(\s*)(double_val|dcomplex_val): (\S+)$", re.M)


def _simple_ftoa(text: str, single: bool) -> str:
    """TF's SimpleFtoa/SimpleDtoa (what C++ TextFormat prints): ``%.6g`` (``%.15g``) if it reads back
    as the same value, else ``%.9g`` (``%.17g``) — so 1.0 prints ``1`` and 0.70710677 ``0.707106769``."""
    import numpy as np

    value = float(np.float32(text)) if single else float(text)   # the field's exact value
    if math.isnan(value) or math.isinf(value):
        return text
    short, full = (6, 9) if single else (15, 17)
    out = "%.*g" % (short, value)
    same = np.float32(float(out)) == np.float32(value) if single else float(out) == value
    return out if same else "%.*g" % (full, value)


def tf_text_format(message) -> str:
    """``message`` in protobuf text format as TF's C++ dumps write it (Python's printer differs only in
    how it prints float and double fields)."""
    text = text_format.MessageToString(message)
    text = _FLOAT_FIELD.sub(lambda m: f"{m[1]}{m[2]}: {_simple_ftoa(m[3], True)}", text)
    return _DOUBLE_FIELD.sub(lambda m: f"{m[1]}{m[2]}: {_simple_ftoa(m[3], False)}", text)


def annotated(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """The ``mark_for_compilation_annotated`` form: node names prefixed by their cluster."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    rename = {}
    for nd in out.node:
        if "_XlaCluster" in nd.attr:
            rename[nd.name] = f"{nd.attr['_XlaCluster'].s.decode()}/{nd.name}"
        elif nd.op == "VarHandleOp":
            rename[nd.name] = f"varhandle/{nd.name}"
        else:
            rename[nd.name] = f"unclustered/{nd.name}"
    for nd in out.node:
        nd.name = rename[nd.name]
        refs = list(nd.input)
        del nd.input[:]
        for ref in refs:
            ctrl = ref.startswith("^")
            base, sep, idx = ref.lstrip("^").partition(":")
            nd.input.append(("^" if ctrl else "") + rename.get(base, base) + (sep + idx if sep else ""))
    return out
