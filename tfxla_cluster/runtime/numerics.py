"""The numerics checker: every compiled cluster launch, again on TF's kernels, compared.

Stage: runtime (diagnostics). :class:`NumericsChecker` is a launch observer
(:func:`tfxla_cluster.runtime.launcher.add_observer`). After each launch that ran compiled code it runs
the same cluster nodes on TF's own kernels with the same inputs (resource inputs become temporary
variables holding the values the cluster read, so the real variables are never touched) and records,
per cluster output (and per updated variable), the max absolute and max relative error against TF,
judged by dtype-aware tolerances (:func:`tolerance`).

When an output diverges beyond tolerance, :func:`bisect` finds the first HLO instruction whose compiled
value differs from our reference evaluator's:

1. parse the cluster's *unoptimised* HLO; evaluate the entry computation once with the evaluator,
   keeping every instruction's value (the reference);
2. candidates are the array-shaped, non-parameter, non-constant instructions the diverging output
   depends on, in post order (operands before users);
3. ``diverges(i)``: cut the module at candidate ``i`` (it becomes the root; dead code goes), run it
   through the same pipeline as the cluster (our XLA:CPU passes, then codegen), run the native code on
   the same parameters and compare with the reference value of that instruction;
4. binary search for the first diverging candidate (``O(log n)`` compiles; exact when divergence is
   monotone along the post order), then *verify locally*: while an operand of the found instruction
   also diverges, step to that operand. The answer therefore always diverges while all its operands
   agree — it is where the values start to differ, even when the search's assumption does not hold.

The result names the instruction, its opcode and text, and the TF op it came from (the HLO metadata's
``op_type``/``op_name`` that the lowering writes).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# (atol, rtol) by numpy dtype kind/size. Compiled code may reorder and fuse float operations (and our
# exp/log/tanh are polynomial approximations), so floats get a few ulps of slack; integers and
# booleans must match exactly.
_FLOAT_TOLERANCES = {2: (1e-2, 1e-2), 4: (1e-5, 1e-4), 8: (1e-9, 1e-7)}


def tolerance(dtype: Any) -> tuple[float, float]:
    """``(atol, rtol)`` for comparing values of ``dtype`` (bfloat16 and float16 are both 2 bytes)."""
    dt = np.dtype(dtype)
    if dt.kind == "c":
        return _FLOAT_TOLERANCES.get(dt.itemsize // 2, (1e-5, 1e-4))
    if dt.kind == "f" or dt.name == "bfloat16":
        return _FLOAT_TOLERANCES.get(dt.itemsize, (1e-5, 1e-4))
    return (0.0, 0.0)


@dataclass
class Comparison:
    """How far ``got`` is from ``want``: max abs/rel error and whether it is within tolerance."""

    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    ok: bool
    detail: str = ""   # why not ok, beyond the numbers (shape/dtype/NaN mismatch)


def compare(got: Any, want: Any) -> Comparison:
    """Compare two arrays the way ``np.allclose`` does (``|g-w| <= atol + rtol*|w|``), NaNs equal to
    NaNs, infinities equal to the same infinity; integers and booleans exactly."""
    g, w = np.asarray(got), np.asarray(want)
    atol, rtol = tolerance(w.dtype)
    if g.shape != w.shape:
        return Comparison(float("inf"), float("inf"), atol, rtol, False,
                          f"shape {list(g.shape)} vs TF's {list(w.shape)}")
    if g.size == 0:
        return Comparison(0.0, 0.0, atol, rtol, True)
    if w.dtype.kind in "biu":
        # Exact equality decides; the float64 differences are only the report's numbers.
        gi, wi = g.astype(np.float64), w.astype(np.float64)
        diff = np.abs(gi - wi)
        rel = diff / np.maximum(np.abs(wi), 1e-300)
        return Comparison(float(diff.max()), float(rel.max()), 0.0, 0.0, bool(np.array_equal(g, w)))
    kind = np.complex128 if w.dtype.kind == "c" else np.float64
    gf, wf = g.astype(kind), w.astype(kind)
    nan_g, nan_w = np.isnan(gf), np.isnan(wf)
    same = (gf == wf) | (nan_g & nan_w)   # equal infinities, and NaN where TF has NaN
    with np.errstate(all="ignore"):
        diff = np.where(same, 0.0, np.abs(gf - wf))
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = np.where(same, 0.0, diff / np.abs(wf))
        rel = np.where(np.isnan(rel), np.inf, rel)
        bad = ~same & ~(diff <= atol + rtol * np.abs(wf))
    detail = ""
    if (nan_g != nan_w).any():
        detail = f"{int((nan_g & ~nan_w).sum())} NaN where TF has a number, {int((nan_w & ~nan_g).sum())} the other way"
    return Comparison(float(diff.max()), float(rel.max()), atol, rtol, not bool(bad.any()), detail)


@dataclass
class OutputCheck:
    """One output (or updated variable) of one checked launch, compared with TF's kernels."""

    index: int
    tensor: str            # "node:slot" (for a variable: the resource input's tensor)
    kind: str              # "output" or "variable"
    dtype: str
    shape: tuple
    comparison: Comparison


@dataclass
class Divergence:
    """The first HLO instruction whose compiled value differs from the evaluator's."""

    instruction: str
    opcode: str
    shape: str
    op_type: str
    op_name: str
    text: str                 # the instruction in HLO text
    comparison: Comparison
    operands_agree: bool      # the local check: every (non-trivial) operand matched
    compiles: int             # truncated modules compiled while searching
    candidates: int           # instructions the search ran over

    def describe(self) -> str:
        where = f" from TF op {self.op_name} ({self.op_type})" if self.op_name or self.op_type else ""
        return (f"first diverging HLO instruction: %{self.instruction} ({self.opcode}){where}: "
                f"max abs error {self.comparison.max_abs:.3g}, max rel {self.comparison.max_rel:.3g}")


@dataclass
class ClusterNumerics:
    """Everything checked for one cluster (over all its launches)."""

    cluster: str
    function: str = ""
    launches: int = 0
    outputs: dict[tuple[str, int], OutputCheck] = field(default_factory=dict)   # worst seen per output
    divergence: Divergence | None = None
    bisect_error: str = ""
    error: str = ""           # TF's kernels could not run the cluster: nothing to compare

    @property
    def ok(self) -> bool:
        return not self.error and all(o.comparison.ok for o in self.outputs.values())

    def lines(self) -> list[str]:
        head = f"{self.cluster}" + (f" [{self.function}]" if self.function else "")
        if self.error:
            return [f"{head}: not checked: {self.error}"]
        status = "OK" if self.ok else "DIVERGES"
        out = [f"{head}: {status} over {self.launches} launch(es)"]
        for o in self.outputs.values():
            c = o.comparison
            mark = "ok " if c.ok else "BAD"
            out.append(f"  {mark} {o.kind} {o.index} {o.tensor} {o.dtype}{list(o.shape)}: max abs {c.max_abs:.3g}, "
                       f"max rel {c.max_rel:.3g} (tolerance atol {c.atol:g}, rtol {c.rtol:g})"
                       + (f"; {c.detail}" if c.detail else ""))
        if self.divergence is not None:
            out.append("  " + self.divergence.describe())
            out.append(f"    {self.divergence.text.strip()}")
            out.append(f"    (bisection: {self.divergence.compiles} compiles over {self.divergence.candidates} "
                       f"candidate instructions; operands agree: {self.divergence.operands_agree})")
        elif self.bisect_error:
            out.append(f"  bisection failed: {self.bisect_error}")
        return out


# ----------------------------------------------------------------------------------------- TF side
def run_on_tf(launcher: Any, arrays: list[np.ndarray]) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """The cluster's value outputs computed by TF's kernels from ``arrays``, and the final value of each
    resource input. Resource inputs are fresh temporary variables holding the given values, so the
    program's variables are untouched."""
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    tensors: list[Any] = []
    temps: dict[int, Any] = {}
    for i, (a, dt) in enumerate(zip(arrays, launcher.sig.input_dtypes)):
        if dt == types_pb2.DT_RESOURCE:
            temps[i] = tf.Variable(a, trainable=False)
            tensors.append(temps[i].handle)
        else:
            tensors.append(tf.constant(a))
    outputs = launcher.run_on_tf(tensors)
    return [np.asarray(o) for o in outputs], {i: v.numpy() for i, v in temps.items()}


def parameter_arrays(compiled: Any, arrays: list[np.ndarray], sig: Any) -> list[np.ndarray]:
    """The HLO entry parameters (in parameter order) of ``compiled`` for launch inputs ``arrays``."""
    position = {t: i for i, t in enumerate(sig.inputs)}
    params = sorted((i for i in compiled.inputs if i.parameter is not None), key=lambda i: i.parameter)
    return [np.asarray(arrays[position[i.tensor]], dtype=i.element_type.dtype) for i in params]


# ----------------------------------------------------------------------------------------- bisection
def _reference_values(module: Any, params: list[np.ndarray]) -> dict[str, Any]:
    """Every entry instruction's value under the evaluator, by instruction name."""
    from tfxla_cluster.hlo.evaluator import HANDLERS, Evaluator

    ev = Evaluator()
    ev._params = list(params)
    values: dict[int, Any] = {}
    by_name: dict[str, Any] = {}
    with np.errstate(all="ignore"):
        for instr in module.entry.post_order():
            values[id(instr)] = HANDLERS[instr.opcode](ev, instr, [values[id(o)] for o in instr.operands])
            by_name[instr.name] = values[id(instr)]
    return by_name


def compile_native(module: Any) -> Callable[..., Any]:
    """What the launcher does to a lowered module: our XLA:CPU pipeline, then native code."""
    from tfxla_cluster.codegen import compile_module
    from tfxla_cluster.passes.pipeline import optimize

    optimized, _ = optimize(module)
    return compile_module(optimized)


def _truncated(hlo_text: str, root: str) -> Any:
    from tfxla_cluster.hlo import parse_module

    module = parse_module(hlo_text)
    entry = module.entry
    entry.set_root(entry.get_instruction(root))
    entry.remove_dead_instructions()
    module.remove_unused_computations()
    return module


_TRIVIAL = {"parameter", "constant", "iota", "tuple", "get-tuple-element", "bitcast"}


def bisect(hlo_text: str, params: list[np.ndarray], *, output_index: int | None = None,
           compile_fn: Callable[[Any], Callable[..., Any]] = compile_native) -> Divergence | None:
    """The first instruction of ``hlo_text``'s entry whose compiled value differs from the evaluator's
    (see the module docstring), or None when the diverging output is not found to differ here.
    ``output_index`` picks the root tuple element to trace (default: the first that diverges)."""
    from tfxla_cluster.hlo import parse_module

    module = parse_module(hlo_text)
    entry = module.entry
    reference = _reference_values(module, params)
    compiles = 0
    cache: dict[str, Comparison | None] = {}

    def check(instr: Any) -> Comparison | None:
        nonlocal compiles
        if instr.name not in cache:
            executable = compile_fn(_truncated(hlo_text, instr.name))
            compiles += 1
            got = executable(*params)
            got = got[0] if isinstance(got, (tuple, list)) else got
            cache[instr.name] = compare(got, reference[instr.name])
        return cache[instr.name]

    def diverges(instr: Any) -> bool:
        return not check(instr).ok

    root = entry.root
    if root.shape.is_tuple:
        outs = list(root.operands)
        if output_index is not None:
            outs = [outs[output_index]]
        targets = [o for o in outs if not o.shape.is_tuple and o.opcode.text not in _TRIVIAL]
    else:
        targets = [root]
    target = next((t for t in targets if diverges(t)), None)
    if target is None:
        return None
    # Ancestors of the diverging output, in post order.
    needed: set[int] = set()
    stack = [target]
    while stack:
        x = stack.pop()
        if id(x) in needed:
            continue
        needed.add(id(x))
        stack.extend(x.operands)
    candidates = [i for i in entry.post_order() if id(i) in needed and not i.shape.is_tuple
                  and i.opcode.text not in _TRIVIAL]
    lo, hi = 0, len(candidates) - 1          # candidates[hi] (the target) diverges
    while lo < hi:
        mid = (lo + hi) // 2
        if diverges(candidates[mid]):
            hi = mid
        else:
            lo = mid + 1
    found = candidates[hi]
    # Local verification: walk to an operand that also diverges until all operands agree.
    agree = True
    for _ in range(len(candidates)):
        bad = next((o for o in found.operands if not o.shape.is_tuple and o.opcode.text not in _TRIVIAL
                    and id(o) in needed and diverges(o)), None)
        if bad is None:
            break
        found = bad
    else:
        agree = False
    md = found.metadata
    return Divergence(found.name, found.opcode.text, str(found.shape), md.op_type if md else "",
                      md.op_name if md else "", found.to_string(), check(found), agree, compiles, len(candidates))


# ----------------------------------------------------------------------------------------- observer
class NumericsChecker:
    """A launch observer comparing every compiled launch with TF's kernels (see the module docstring).

    Use as a context manager (``with NumericsChecker() as nc: ...``) or ``install()``/``uninstall()``.
    ``max_checks`` bounds the checked launches per cluster (None: all); ``bisect_divergence`` turns the
    bisection on (once per cluster, at its first divergence).
    """

    def __init__(self, *, max_checks: int | None = None, bisect_divergence: bool = True,
                 function_of: Callable[[Any], str] | None = None) -> None:
        self.max_checks = max_checks
        self.bisect_divergence = bisect_divergence
        self.function_of = function_of
        self.results: dict[int, ClusterNumerics] = {}     # id(launcher) → result
        self._lock = threading.Lock()
        self._keep: list[Any] = []                        # launchers stay alive while we report them

    # -- installation
    def install(self) -> "NumericsChecker":
        from tfxla_cluster.runtime.launcher import add_observer

        add_observer(self)
        return self

    def uninstall(self) -> None:
        from tfxla_cluster.runtime.launcher import remove_observer

        remove_observer(self)

    def __enter__(self) -> "NumericsChecker":
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    # -- the observer
    def __call__(self, launcher: Any, compiled: Any, arrays: list, outputs: list, seconds: float) -> None:
        if compiled is None:
            return   # it ran on TF's kernels: nothing to compare
        with self._lock:
            res = self.results.get(id(launcher))
            if res is None:
                res = self.results[id(launcher)] = ClusterNumerics(launcher.sig.name)
                self._keep.append(launcher)
                if self.function_of is not None:
                    res.function = self.function_of(launcher)
            if self.max_checks is not None and res.launches >= self.max_checks:
                return
            res.launches += 1
        try:
            self.check_launch(launcher, compiled, arrays, outputs, res)
        except Exception as e:  # a checker problem must never break the user's program
            res.error = res.error or f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    def check_launch(self, launcher: Any, compiled: Any, arrays: list, outputs: list,
                     res: ClusterNumerics) -> None:
        """Compare one launch's outputs (and variable updates) with TF's; bisect the first divergence."""
        from tensorflow.core.framework import types_pb2

        try:
            want, want_vars = run_on_tf(launcher, arrays)
        except Exception as e:  # a checker problem must never break the user's program: reported
            res.error = f"TF's kernels could not run the cluster: {type(e).__name__}: {str(e).splitlines()[0]}"
            return
        value_outputs = launcher.value_outputs
        got_vars: dict[int, np.ndarray] = {}
        if want_vars:
            _, got_vars = compiled.run(arrays)
        checks: list[OutputCheck] = []
        for k, (g, w) in enumerate(zip(outputs, want)):
            src, slot = value_outputs[k]
            checks.append(OutputCheck(k, f"{src}:{slot}", "output", str(np.asarray(w).dtype), np.shape(w), compare(g, w)))
        for position, w in want_vars.items():
            if position in got_vars and launcher.sig.input_dtypes[position] == types_pb2.DT_RESOURCE:
                src, slot = launcher.sig.inputs[position]
                checks.append(OutputCheck(position, f"{src}:{slot}", "variable", str(w.dtype), w.shape,
                                          compare(got_vars[position], w)))
        first_bad = None
        with self._lock:
            for c in checks:
                key = (c.kind, c.index)
                prev = res.outputs.get(key)
                if prev is None or (prev.comparison.ok and not c.comparison.ok) or \
                        (prev.comparison.ok == c.comparison.ok and c.comparison.max_abs > prev.comparison.max_abs):
                    res.outputs[key] = c
                if not c.comparison.ok and first_bad is None:
                    first_bad = c
            do_bisect = (first_bad is not None and self.bisect_divergence and res.divergence is None
                         and not res.bisect_error and compiled.hlo_text)
            if do_bisect:
                res.bisect_error = "running"   # one bisection per cluster, even with concurrent launches
        if do_bisect:
            try:
                params = parameter_arrays(compiled, arrays, launcher.sig)
                res.divergence = bisect(compiled.hlo_text, params)
                res.bisect_error = "" if res.divergence else \
                    "the evaluator and the compiled module agree: the difference is outside the HLO (TF's kernels differ)"
            except Exception as e:  # the bisection is a diagnosis aid: its failure is reported
                res.bisect_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    # -- results
    def report(self) -> str:
        """Plain-text results, one block per cluster."""
        if not self.results:
            return "numerics check: no compiled cluster ran"
        lines = ["numerics check (compiled clusters vs TF's kernels, same inputs):"]
        for res in self.results.values():
            lines += ["  " + line for line in res.lines()]
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results.values())


def check_numerics(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, NumericsChecker]:
    """Call ``fn(*args, **kwargs)`` (e.g. a :func:`tfxla_cluster.function`) with the checker on; returns
    (its result, the checker). ``checker.report()`` is the text; ``checker.results`` the data."""
    with NumericsChecker() as checker:
        out = fn(*args, **kwargs)
    return out, checker
