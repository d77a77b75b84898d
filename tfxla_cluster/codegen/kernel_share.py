"""Stage: one module's LLVM IR text → the same module with its kernels shared across modules (between the
emitter and LLVM; :class:`~tfxla_cluster.codegen.engine.JitEngine` applies it).

Auto-clustering cuts a model into many clusters, and each cluster is its own module: ResNet-50's 49 auto
clusters hold 153 kernels of which 22 are distinct, so LLVM optimised and compiled most of them again
(``program.py`` emits a repeated kernel once per module only). Here a kernel is compiled once per process:

- A *unit* is an internal kernel ``void k(ptr table, i64 lo, i64 hi)`` that calls no other function of its
  module and that only the exported entry references: either always by a direct call on one constant range
  (``call void @k(ptr %t, i64 0, i64 N)``: a *range* unit, whose code LLVM specialises to that range), or only
  by its address (handed to ``tfxla_parallel_for``: an *escaped* unit). Its key is its text with its name,
  and its metadata numbered by content, and the range: kernels identical up to those are one unit.
- A unit no live library provides yet stays in the module and is exported under ``tfxla_k.<digest>``: a
  range unit through a thunk ``tfxla_k.<digest>(ptr)`` that calls the (still internal) kernel on its constant
  range, exactly as ``split.py`` reaches a kernel in another part (the kernel keeps its constants); an
  escaped unit through a thunk ``tfxla_k.<digest>(ptr, i64, i64)`` (its address had escaped already: LLVM
  knew nothing of its range).
- A unit a live library provides is declared instead of defined, and the entry calls the provider's symbol.
  The engine resolves it through the process's symbol table (``engine.add_symbol``) and the importing
  library keeps its providers alive.

Guarantees: the rewritten module computes the same bits as the original (the code a unit runs is the code
the original module would have compiled for it, up to LLVM's per-module pipeline choice, which never changes
results: see ``engine.JitEngine.pipeline``); the digest names the unit's text, its range and the engine's key,
so a symbol never stands for other code; a text this module does not model (``split._parse`` refuses it) is
left whole.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from tfxla_cluster.codegen import split

#: Prefix of every shared kernel's symbol (the rest is a digest of its unit's key).
SYMBOL_PREFIX = "tfxla_k."

# A thunk is one call: not optimised (LLVM's per-function passes cost ~1 ms a function; measured on ResNet-50's
# 14 distinct auto modules: +7% of LLVM CPU with optimised thunks) and not inlined. IPSCCP still sees its call's
# constant range and specialises the kernel on it (as an optimised thunk inlined into the entry did).
_THUNK_ATTRIBUTES = "nounwind noinline optnone"
_QUOTED = re.compile(r'@"([^"]+)"')
_MD_REF = re.compile(r"!(\d+)\b")
_MD_LINE = re.compile(r"^!(\d+) = (.*)$")


@dataclass
class Unit:
    """One shareable kernel of a module."""

    kernel: str                      # its name in the module
    symbol: str                      # tfxla_k.<digest>
    span: tuple[str, str] | None     # the constant range of a range unit; None: escaped


@dataclass
class Shared:
    """A module's text with its units rewritten: what it imports from other libraries, what it exports."""

    text: str
    imports: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()


def units_of(ir_text: str, salt: str) -> list[Unit]:
    """The shareable kernels of ``ir_text`` (see the module docstring); ``salt`` (the engine's key) goes into
    every digest."""
    parsed = split.parse_functions(ir_text)
    if parsed is None:
        return []
    (_, tail), fns = parsed
    candidates = {name for name, f in fns.items()
                  if f.internal and not f.refs and split.is_range_kernel(f)}
    if not candidates:
        return []
    spans: dict[str, set[tuple[str, str]]] = {}
    escaped: set[str] = set()
    excluded: set[str] = set()
    for f in fns.values():
        for line in f.lines[1:]:
            if '@"' not in line:
                continue
            names = [m.group(1) for m in _QUOTED.finditer(line)]
            hits = [n for n in names if n in candidates]
            if not hits:
                continue
            if f.internal:   # referenced by another kernel or a row group: stays where it is
                excluded.update(hits)
                continue
            m = split.RANGE_CALL.search(line)
            for name in hits:
                if names.count(name) == 1 and m is not None and m.group(1) == name and \
                        line.lstrip().startswith("call void"):
                    spans.setdefault(name, set()).add((m.group(3), m.group(4)))
                else:
                    escaped.add(name)
    metadata = _metadata(tail)
    units = []
    for name in sorted(candidates - excluded):
        ranges = spans.get(name, set())
        if name in escaped:
            if ranges:
                continue   # called directly and by address: left as it is
            span = None
        elif len(ranges) == 1:
            (span,) = ranges
        else:
            continue       # several ranges (or none): LLVM sees no constant range, nothing to key on
        key = _unit_key(fns[name].lines, name, span, metadata)
        digest = hashlib.sha256((salt + "\n" + key).encode()).hexdigest()[:32]
        units.append(Unit(name, SYMBOL_PREFIX + digest, span))
    return units


def rewrite(ir_text: str, units: list[Unit], available: set[str]) -> Shared:
    """``ir_text`` with each unit of ``units`` imported (its symbol in ``available``: declared, called there) or
    exported for later modules (defined, reachable under its symbol)."""
    if not units:
        return Shared(ir_text)
    by_kernel = {u.kernel: u for u in units}
    imported = {u.kernel for u in units if u.symbol in available}
    lines = ir_text.split("\n")
    out: list[str] = []
    extra: list[str] = []
    skipping = False
    for line in lines:
        if skipping:
            if line == "}":
                skipping = False
            continue
        if line.startswith("define "):
            m = split.NAME.search(line)
            name = m.group(1) or m.group(2) if m else None
            unit = by_kernel.get(name)
            if unit is not None and name in imported:
                skipping = True
                continue
            out.append(line)
            continue
        if '@"' in line and not line.startswith("declare "):
            line = _redirect(line, by_kernel, imported)
        out.append(line)
    for unit in units:
        if unit.kernel in imported:
            params = "(ptr)" if unit.span is not None else "(ptr, i64, i64)"
            extra.append(f'declare void @"{unit.symbol}"{params}')
        elif unit.span is not None:
            lo, hi = unit.span
            extra += split.range_thunk(unit.symbol, unit.kernel, lo, hi, _THUNK_ATTRIBUTES)
        else:
            extra += [f'define void @"{unit.symbol}"(ptr noalias %"table", i64 %"lo", i64 %"hi") {_THUNK_ATTRIBUTES}', "{",
                      "entry:", f'  call void @"{unit.kernel}"(ptr %"table", i64 %"lo", i64 %"hi")', "  ret void",
                      "}"]
    # (after the last function and before the metadata: LLVM's parser takes either order, as split's parts)
    at = _first_metadata_line(out)
    text = "\n".join(out[:at] + extra + out[at:])
    imports = tuple(u.symbol for u in units if u.kernel in imported)
    provides = tuple(u.symbol for u in units if u.kernel not in imported)
    return Shared(text, imports, provides)


def _redirect(line: str, by_kernel: dict[str, Unit], imported: set[str]) -> str:
    """A line of the entry with its references to units pointed at their symbols: a range call becomes a call
    of the unit's thunk (``(ptr)``); an imported escaped unit's address becomes its provider's. (An escaped unit
    defined here keeps its internal address: split.py deals internal kernels to parts, exported ones not.)"""
    m = split.RANGE_CALL.search(line)
    if m is not None and m.group(1) in by_kernel and by_kernel[m.group(1)].span is not None:
        unit = by_kernel[m.group(1)]
        line = line[:m.start()] + f'call void @"{unit.symbol}"(ptr {m.group(2)})' + line[m.end():]

    def sub(mm: re.Match) -> str:
        unit = by_kernel.get(mm.group(1))
        return f'@"{unit.symbol}"' if unit is not None and unit.span is None and unit.kernel in imported \
            else mm.group(0)
    return _QUOTED.sub(sub, line)


def _first_metadata_line(lines: list[str]) -> int:
    for k in range(len(lines) - 1, -1, -1):
        if lines[k] == "}":
            return k + 1
    return len(lines)


def _metadata(tail: list[str]) -> dict[int, str]:
    out = {}
    for line in tail:
        m = _MD_LINE.match(line)
        if m is not None:
            out[int(m.group(1))] = m.group(2)
    return out


def _unit_key(lines: list[str], name: str, span: tuple[str, str] | None, metadata: dict[int, str]) -> str:
    """The kernel's text with its name replaced and its metadata nodes numbered in order of first use (their
    content appended), and its range: equal for kernels that compile to the same code."""
    numbers: dict[int, int] = {}
    nodes: list[str] = []

    def number(m: re.Match) -> str:
        old = int(m.group(1))
        new = numbers.get(old)
        if new is None:
            new = numbers[old] = len(numbers)
            nodes.append("")
            body = metadata.get(old)
            nodes[new] = _MD_REF.sub(number, body) if body is not None else "?"
        return f"!{new}"

    head = lines[0].replace(f'@"{name}"', "@k", 1)
    body = [_MD_REF.sub(number, line) if "!" in line else line for line in lines[1:]]
    return "\n".join([f"span {span}", head, *body, *(f"!{k} = {v}" for k, v in enumerate(nodes))])
