"""Stage: one LLVM module's IR text → a few module texts that compile independently (XLA:CPU's
``xla_cpu_parallel_codegen_split_count``, llvm::SplitModule's role).

A program module (``program.py``) is one exported entry function that calls a hundred or more
``internal`` kernels; LLVM's optimisation and machine-code stages take time in proportion to the kernels,
so the kernels are dealt out to parts that ``engine.JitEngine`` compiles on several threads and loads into
one execution engine, where the parts' symbols resolve against each other.

Splitting keeps what LLVM knew about a kernel in one module. The entry calls most kernels on a constant
range (``call void @"k"(ptr %t, i64 0, i64 N)``); with the kernel internal, LLVM propagates the constants
into it (known trip counts). So a kernel moved to another part stays internal there and the entry calls
an external *thunk* in that part, ``k.r0_N(ptr)``, which calls the kernel on the same constants; a kernel
referenced any other way (its address handed to ``tfxla_parallel_for``) becomes external, as its address
escaped already.

Guarantees:
- the parts are a deterministic function of the text and the part count (the threads compiling them do
  not matter), so their object code is too;
- a text this module does not recognise (global variables, functions referencing each other in ways it
  does not model) is returned whole: splitting is an optimisation, never a requirement.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Characters of IR per part, about, whatever the idle cores: below two parts' worth a module is compiled
#: whole on one thread. Each part costs LLVM a few ms of its own (pipelines, object file), so parts stay big:
#: about 5 per MB of IR.
PART_IR_SIZE = 192 * 1024
#: With idle cores, a smaller module is split into one part per idle core, down to parts of this size.
#: Measured (issue 17, jit modules of small_cnn_infer, gru_infer, transformer_block_infer and bert_tiny_infer,
#: 42k-117k characters; per-thread CPU time of each part): two parts cost 3-10% more CPU than the whole
#: module, and the bigger part takes 55-65% of the whole module's time: on two idle cores the LLVM stages
#: take 0.55-0.65x as long. The outputs are the same bits (a kernel keeps its constant ranges through thunks).
MIN_PART_IR_SIZE = 16 * 1024

#: An exported function's characters weigh this much against a kernel's when kernels are dealt to parts: the
#: entry is straight-line code (calls, table stores), cheap for LLVM per character next to the kernels'
#: loops. Measured on the four modules above, split in two: at weight 1 the part holding the entry took
#: 30-45% of the time of the other; at 0.25, 60-95%.
ROOT_WEIGHT = 0.25

NAME = re.compile(r'@"([^"]+)"|@([A-Za-z_.$][A-Za-z0-9_.$]*)')
_QUOTED = re.compile(r'@"([^"]+)"')
_LINKAGE = ("internal ", "private ")
# A direct call of a kernel on a constant range, as llvmlite prints it.
RANGE_CALL = re.compile(r'call void @"([^"]+)"\(ptr (%"[^"]+"|%[A-Za-z0-9_.]+), i64 (-?\d+), i64 (-?\d+)\)')


@dataclass
class _Fn:
    name: str
    lines: list[str]
    internal: bool
    size: int = 0
    refs: set[str] = field(default_factory=set)


def part_count(ir_size: int, max_parts: int, threads: int = 1) -> int:
    """How many parts a module of ``ir_size`` characters is split into (1: not split) when ``threads``
    threads are free to compile them: one per ``PART_IR_SIZE``, and at least one per free thread down to
    parts of ``MIN_PART_IR_SIZE``."""
    if max_parts <= 1:
        return 1
    parts = ir_size // PART_IR_SIZE
    if threads > 1:
        parts = max(parts, min(threads, ir_size // MIN_PART_IR_SIZE))
    return max(1, min(max_parts, parts))


def split_module(ir_text: str, parts: int) -> list[str]:
    """``ir_text`` as ``parts`` module texts (fewer when there are not enough kernels; ``[ir_text]`` when it
    cannot be split). Every function defined in the text is defined in exactly one part."""
    if parts <= 1:
        return [ir_text]
    parsed = parse_functions(ir_text)
    if parsed is None:
        return [ir_text]
    shared, fns = parsed
    roots = [f for f in fns.values() if not f.internal]
    if not roots:
        return [ir_text]
    # Internal functions that reference each other stay together (union-find over internal references).
    group_of = {n: n for n in fns}

    def find(n: str) -> str:
        while group_of[n] != n:
            group_of[n] = group_of[group_of[n]]
            n = group_of[n]
        return n

    for f in fns.values():
        for r in f.refs:
            if f.internal and fns[r].internal:
                group_of[find(r)] = find(f.name)
    groups: dict[str, list[_Fn]] = {}
    for f in fns.values():
        if f.internal:
            groups.setdefault(find(f.name), []).append(f)
    units = sorted(groups.values(), key=lambda g: (-sum(f.size for f in g), g[0].name))
    if len(units) < 2:
        return [ir_text]
    parts = min(parts, len(units))
    # Part 0 holds the exported functions; the kernels go, biggest first, to the lightest part.
    load = [sum(f.size for f in roots) * ROOT_WEIGHT] + [0] * (parts - 1)
    part_of: dict[str, int] = {f.name: 0 for f in roots}
    for unit in units:
        k = min(range(parts), key=lambda i: (load[i], i))
        load[k] += sum(f.size for f in unit)
        for f in unit:
            part_of[f.name] = k
    # How each part reaches the functions of other parts: thunks for constant-range calls, else external.
    external: set[str] = set()
    thunks: dict[str, set[tuple[str, str]]] = {}   # kernel -> {(lo, hi)}
    calls_elsewhere: dict[str, list[_Fn]] = {}
    for f in fns.values():
        for r in f.refs:
            if part_of[r] != part_of[f.name] and fns[r].internal:
                calls_elsewhere.setdefault(r, []).append(f)
    ranges_of, other = _references(calls_elsewhere, part_of)
    for kernel in calls_elsewhere:
        ranges = ranges_of.get(kernel)
        if kernel in other or not ranges or not is_range_kernel(fns[kernel]):
            external.add(kernel)
        else:
            thunks[kernel] = ranges
    rewritten: dict[str, list[str]] = {}
    for f in fns.values():
        lines = f.lines
        if any(r in thunks and part_of[r] != part_of[f.name] for r in f.refs):
            lines = [_thunk_call_sub(line, thunks, part_of, part_of[f.name]) for line in lines]
        rewritten[f.name] = lines

    texts = []
    for k in range(parts):
        body: list[str] = []
        decls: list[str] = []
        for f in fns.values():
            if part_of[f.name] == k:
                lines = rewritten[f.name]
                if f.name in external:
                    lines = [_drop_linkage(lines[0])] + lines[1:]
                body.extend(lines)
        for kernel, ranges in sorted(thunks.items()):
            for lo, hi in sorted(ranges):
                if part_of[kernel] == k:
                    body.extend(range_thunk(_thunk_name(kernel, lo, hi), kernel, lo, hi))
                elif any(part_of[c.name] == k for c in calls_elsewhere[kernel]):
                    decls.append(f'declare void @"{_thunk_name(kernel, lo, hi)}"(ptr)')
        needed = {r for f in fns.values() if part_of[f.name] == k for r in f.refs if part_of[r] != k}
        for name in sorted(needed & external):
            decls.append(_declaration(fns[name].lines[0]))
        texts.append("\n".join(shared[0] + body + decls + shared[1]) + "\n")
    return texts


def parse_functions(ir_text: str) -> tuple[tuple[list[str], list[str]], dict[str, _Fn]] | None:
    """(lines before the first define, the other non-define lines), functions by name; None if the text
    holds something splitting does not model."""
    head: list[str] = []
    tail: list[str] = []
    fns: dict[str, _Fn] = {}
    cur: _Fn | None = None
    for line in ir_text.split("\n"):
        if cur is not None:
            cur.lines.append(line)
            cur.size += len(line) + 1
            if line == "}":
                cur = None
            continue
        if line.startswith("define "):
            m = NAME.search(line)
            if m is None:
                return None
            name = m.group(1) or m.group(2)
            rest = line[len("define "):]
            cur = fns[name] = _Fn(name, [line], rest.startswith(_LINKAGE), len(line) + 1)
            continue
        # A global variable would be copied into every part (each with its own state): not split.
        if line.startswith("@") or line.startswith(("module asm", "$")):
            return None
        (tail if fns else head).append(line)
    if cur is not None:
        return None
    for f in fns.values():
        f.refs = {m.group(1) or m.group(2) for line in f.lines[1:] if "@" in line
                  for m in NAME.finditer(line)} & fns.keys()
        f.refs.discard(f.name)
    # An internal function referencing an exported one (or itself recursively) is not modelled.
    if any(f.internal and any(not fns[r].internal for r in f.refs) for f in fns.values()):
        return None
    return (head, tail), fns


def _references(calls_elsewhere: dict[str, list[_Fn]], part_of: dict[str, int]
                ) -> tuple[dict[str, set[tuple[str, str]]], set[str]]:
    """(the constant ranges each kernel of ``calls_elsewhere`` is called on by its callers in other parts,
    the kernels those callers reference any other way). One pass over each caller's lines: a line
    referencing a kernel once, as the first constant-range call of a ``call void`` line, is a range call."""
    ranges: dict[str, set[tuple[str, str]]] = {}
    other: set[str] = set()
    callers: dict[str, _Fn] = {f.name: f for fs in calls_elsewhere.values() for f in fs}
    for f in callers.values():
        here = part_of[f.name]
        for line in f.lines[1:]:
            if '@"' not in line:
                continue
            counts: dict[str, int] = {}
            for m in _QUOTED.finditer(line):
                name = m.group(1)
                if name in calls_elsewhere and part_of[name] != here:
                    counts[name] = counts.get(name, 0) + 1
            if not counts:
                continue
            m = RANGE_CALL.search(line)
            call = m is not None and line.strip().startswith("call void")
            for name, count in counts.items():
                if count == 1 and call and m.group(1) == name:
                    ranges.setdefault(name, set()).add((m.group(3), m.group(4)))
                else:
                    other.add(name)
    return ranges, other


def is_range_kernel(fn: _Fn) -> bool:
    """``define internal void @"k"(ptr ..., i64 ..., i64 ...)``: what a thunk can call."""
    head = fn.lines[0]
    params = _params(head)
    return params is not None and head.startswith("define internal void ") and \
        [p.split(" ")[0] for p in params] == ["ptr", "i64", "i64"]


def _params(define_line: str) -> list[str] | None:
    m = NAME.search(define_line)
    if m is None or not define_line.startswith("(", m.end()):
        return None
    depth, i = 0, m.end()
    for j in range(i, len(define_line)):
        c = define_line[j]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                inner = define_line[i + 1:j]
                return [p.strip() for p in inner.split(",")] if inner.strip() else []
    return None


def _thunk_name(kernel: str, lo: str, hi: str) -> str:
    return f"{kernel}.r{lo}_{hi}"


def range_thunk(name: str, kernel: str, lo: str, hi: str, attributes: str = "nounwind") -> list[str]:
    """``void name(ptr table)``: one call of ``kernel`` on the constant range [lo, hi) (LLVM still specialises
    the internal kernel on it); split.py's thunks to kernels in other parts, kernel_share.py's exports."""
    return [f'define void @"{name}"(ptr noalias %"table") {attributes}', "{",
            "entry:", f'  call void @"{kernel}"(ptr %"table", i64 {lo}, i64 {hi})', "  ret void", "}"]


def _thunk_call_sub(line: str, thunks: dict, part_of: dict[str, int], here: int) -> str:
    """``line`` with its call of a kernel in another part that has thunks replaced by the thunk's call."""
    if '@"' not in line:
        return line
    m = RANGE_CALL.search(line)
    if m is None or m.group(1) not in thunks or part_of[m.group(1)] == here:
        return line
    return line[:m.start()] + f'call void @"{_thunk_name(m.group(1), m.group(3), m.group(4))}"(ptr {m.group(2)})' + \
        line[m.end():]


def _drop_linkage(define_line: str) -> str:
    rest = define_line[len("define "):]
    for linkage in _LINKAGE:
        if rest.startswith(linkage):
            return "define " + rest[len(linkage):]
    return define_line


def _declaration(define_line: str) -> str:
    """``define internal void @"k"(ptr noalias %"t", ...) attrs`` → ``declare void @"k"(ptr noalias %"t", ...)``."""
    head = _drop_linkage(define_line)[len("define "):]
    m = NAME.search(head)
    depth = 0
    for j in range(m.end(), len(head)):
        if head[j] == "(":
            depth += 1
        elif head[j] == ")":
            depth -= 1
            if depth == 0:
                return "declare " + head[:j + 1]
    raise AssertionError(f"unbalanced parameter list in {define_line!r}")
