"""HLO dumps with XLA's file names (xla/service/dump.cc), driven by XLA_FLAGS.

Enabled only by ``--xla_dump_to=DIR`` (``-`` prints to stdout instead); without it ``Dumper.create``
returns None and nothing is touched. Text is the format (XLA dumps text when no other format flag is
given; ``--xla_dump_hlo_as_text`` asks for it explicitly). ``--xla_dump_hlo_module_re`` filters modules
by name and ``--xla_dump_max_hlo_modules`` caps how many modules one directory receives.

Every dumped module gets the next number of a process-global counter (XLA's module unique id) and the
prefix ``module_NNNN.<sanitized name>``:

    module_0000.<name>.before_optimizations.txt
    module_0000.<name>.0003.cpu.after_fusion.txt        one per pass matching --xla_dump_hlo_pass_re
    module_0000.<name>.after_optimizations.txt
    module_0000.<name>.buffer-assignment.txt
    module_0000.<name>.fusion-decisions.txt             every fuse / no-fuse decision with its reason
    manifest.json                                       module -> function, cluster and files

``manifest.json`` is merged (read, update this module's entry, atomic replace), so several modules,
and several processes in turn, can share one dump directory.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
import warnings

from tfxla_cluster.process_state import PROCESS

_LOCK = threading.Lock()   # the manifest's read-update-replace


def next_module_id() -> int:
    """XLA's next module unique id (process-wide: :data:`tfxla_cluster.process_state.PROCESS`)."""
    return PROCESS.next_module_id()


def sanitize_file_name(name: str) -> str:
    """XLA's SanitizeFileName: path separators, brackets and spaces become underscores."""
    return re.sub(r"[/\\\[\] ]", "_", name)


class Dumper:
    """Writes one module's dump files (see module docstring)."""

    def __init__(self, directory: str, module_id: int, module_name: str, pass_re: str = "",
                 function: str | None = None, cluster: str | None = None) -> None:
        self.directory = directory
        self.module_id = module_id
        self.module_name = module_name
        self.prefix = f"module_{module_id:04d}.{sanitize_file_name(module_name)}"
        self.pass_re = re.compile(pass_re) if pass_re else None
        self.function = function
        self.cluster = cluster
        self.files: list[str] = []
        self._step = 0

    @staticmethod
    def create(flags, module, *, function: str | None = None, cluster: str | None = None) -> "Dumper | None":
        directory = flags.xla_dump_to
        if not directory:
            return None
        if flags.xla_dump_hlo_module_re and not re.search(flags.xla_dump_hlo_module_re, module.name):
            return None
        other_formats = flags.xla_dump_hlo_as_proto or flags.xla_dump_hlo_as_dot or flags.xla_dump_hlo_as_html
        if other_formats and not flags.xla_dump_hlo_as_text:
            return None  # only the text format is implemented
        if directory != "-":
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as e:  # XLA logs a failed dump and compiles anyway
                warnings.warn(f"cannot dump HLO to {directory}: {e}", RuntimeWarning, stacklevel=2)
                return None
            limit = flags.xla_dump_max_hlo_modules
            if limit >= 0 and len(_read_manifest(directory).get("modules", [])) >= limit:
                return None
        return Dumper(directory, next_module_id(), module.name, flags.xla_dump_hlo_pass_re, function, cluster)

    # ---- files
    def write(self, suffix: str, text: str) -> str:
        name = f"{self.prefix}.{suffix}.txt"
        if self.directory == "-":
            sys.stdout.write(f"*** Begin {name} ***\n{text}\n*** End {name} ***\n")
        else:
            try:
                with open(os.path.join(self.directory, name), "w") as f:
                    f.write(text)
            except OSError as e:
                warnings.warn(f"cannot write HLO dump {name}: {e}", RuntimeWarning, stacklevel=2)
                return name
        self.files.append(name)
        return name

    def before_optimizations(self, module) -> None:
        self.write("before_optimizations", module.to_string())

    def after_pass(self, module, pipeline_name: str, pass_name: str, changed: bool) -> None:
        if self.pass_re is None or not self.pass_re.search(pass_name):
            return
        self._step += 1
        self.write(f"{self._step:04d}.{sanitize_file_name(pipeline_name)}.after_{sanitize_file_name(pass_name)}",
                   module.to_string())

    def after_optimizations(self, module, assignment, fusion_log: str = "", history=()) -> None:
        self.write("after_optimizations", module.to_string())
        if assignment is not None:
            self.write("buffer-assignment", assignment.to_text())
        if fusion_log:
            self.write("fusion-decisions", fusion_log)
        if self.directory != "-":
            self._update_manifest(history)

    def _update_manifest(self, history) -> None:
        entry = {
            "module_id": self.module_id, "module": self.module_name, "prefix": self.prefix,
            "function": self.function, "cluster": self.cluster, "files": list(self.files),
            "passes_changed": [r.path for r in history if r.changed],
        }
        with _LOCK:
            manifest = _read_manifest(self.directory)
            modules = [m for m in manifest.get("modules", []) if m.get("prefix") != self.prefix]
            modules.append(entry)
            modules.sort(key=lambda m: (m.get("module_id", 0), m.get("prefix", "")))
            manifest["modules"] = modules
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".manifest.", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(manifest, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, os.path.join(self.directory, "manifest.json"))


def _read_manifest(directory: str) -> dict:
    try:
        with open(os.path.join(directory, "manifest.json")) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def module_to_dot(module) -> str:
    """The entry computation of ``module`` as a Graphviz digraph (XLA's ``RenderGraph(kDot)`` role,
    simplified): one node per instruction labelled with its name, opcode and shape — a fusion lists its
    fused opcodes — and one edge per operand, from producer to user. Deterministic (post order)."""
    def quote(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    entry = module.entry
    lines = [f"digraph {quote(module.name)} {{", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
    ids: dict[int, str] = {}
    for k, instr in enumerate(entry.post_order()):
        ids[id(instr)] = f"n{k}"
        label = f"{instr.name}\n{instr.opcode.text} {instr.shape}"
        style = ""
        if instr.opcode.text == "fusion":
            ops = [i.opcode.text for i in instr.fused_computation.post_order() if i.opcode.text != "parameter"]
            label += f"\nkind={instr.fusion_kind}\n" + ", ".join(ops)
            style = ', style=filled, fillcolor="#dbe9ff"'
        elif instr.opcode.text in ("dot", "convolution"):
            style = ', style=filled, fillcolor="#ffe4c4"'
        lines.append(f"  n{k} [label={quote(label)}{style}];")
    for instr in entry.post_order():
        for op in instr.operands:
            lines.append(f"  {ids[id(op)]} -> {ids[id(instr)]};")
    lines.append("}")
    return "\n".join(lines) + "\n"
