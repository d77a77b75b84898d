"""``tfxla-cluster run-hlo``: XLA's ``run_hlo_module`` — run an HLO text module on our native backend.

Stage: a driver over hlo/ (parse, verify, evaluate), passes/ (our XLA:CPU pipeline) and codegen/
(compile, run). Guarantees:

- the text is anything XLA prints (unoptimized, or optimized with fusions, layouts, metadata,
  backend_config, stack frame tables) for the opcodes we support; an already optimized module goes
  through our pipeline again (its fusions are kept; ours may add more);
- arguments are ``arg0`` … ``argN-1`` of an npz in ENTRY parameter order, or random from a seed;
- results are flattened (a tuple in order, a non-tuple as one) to ``out0`` … ``outK-1``;
- with a reference, a result element is wrong when it is beyond *both* bounds (XLA's ErrorSpec:
  ``|a - r| > abs`` and ``|a - r| > rel * |r|``), NaNs must match NaNs; integers and booleans compare
  by the same rule;
- every problem with the inputs (text, npz) is ``RunHloError`` with ``file:line:column: what``.
"""
from __future__ import annotations

import re
import statistics
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfxla_cluster.errors import InternalError, InvalidArgumentError, NotFoundError, UnimplementedError


class RunHloError(InvalidArgumentError):
    """Bad input for run-hlo; the message is ``file:line:column: what``."""


@dataclass
class Comparison:
    """The worst element of a reference comparison."""

    ok: bool
    output: int = -1
    index: tuple[int, ...] = ()
    actual: object = None
    expected: object = None
    abs_error: float = 0.0
    rel_error: float = 0.0
    bad: int = 0
    total: int = 0

    def summary(self, reference: str, abs_bound: float, rel_bound: float) -> str:
        if self.ok:
            return (f"{reference}: all {self.total} elements within --abs-error-bound {abs_bound:g} or "
                    f"--rel-error-bound {rel_bound:g} (largest abs error {self.abs_error:.3g})")
        where = f"out{self.output}[{','.join(map(str, self.index))}]"
        return (f"{reference}: {self.bad} of {self.total} elements differ; largest at {where}: native "
                f"{self.actual} vs {reference} {self.expected} (abs error {self.abs_error:.3g}, rel error "
                f"{self.rel_error:.3g}; bounds abs {abs_bound:g}, rel {rel_bound:g})")


@dataclass
class RunHloResult:
    outputs: list[np.ndarray]
    compile_seconds: float
    times: list[float] = field(default_factory=list)
    comparison: Comparison | None = None

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.times) if self.times else 0.0


# ---------------------------------------------------------------------------------------------- parsing
def load_module(path: str | Path):
    """(module, locate) for an HLO text file; errors are ``RunHloError`` with file:line:column."""
    from tfxla_cluster.hlo.parser import HloParseError, parse_module_located
    from tfxla_cluster.hlo.verifier import verify_module

    p = Path(path)
    if not p.is_file():
        raise NotFoundError(f"{p}: No such file")
    text = p.read_text(errors="replace")
    try:
        module, locate = parse_module_located(text)
    except HloParseError as e:
        raise RunHloError(f"{p}:{e.line}:{e.column}: {e.what}") from None
    except InvalidArgumentError as e:
        raise RunHloError(f"{p}: {e.message}") from None
    try:
        verify_module(module)
    except InternalError as e:
        m = re.search(r"instruction %(\S+)", e.message) or re.search(r"computation %(\S+)", e.message)
        pos = _locate_name(module, locate, m[1]) if m else None
        raise RunHloError(f"{p}:{pos[0]}:{pos[1]}: {e.message}" if pos else f"{p}: {e.message}") from None
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.literal_elided:
                line, col = locate(instr)
                raise RunHloError(
                    f"{p}:{line}:{col}: constant %{instr.name} was printed without its value ({{...}}): XLA elides "
                    "large constants unless printed with HloPrintOptions.print_large_constants=True (jax's "
                    "unoptimized .lower(x).as_text(dialect='hlo') keeps them)")
    return module, locate


def _locate_name(module, locate, name: str):
    for comp in module.computations:
        if comp.name == name:
            return locate(comp)
        for instr in comp.instructions:
            if instr.name == name:
                return locate(instr)
    return None


# ---------------------------------------------------------------------------------------------- inputs
def entry_parameters(module) -> list:
    return sorted(module.entry.parameters, key=lambda p: p.parameter_number)


def random_inputs(module, seed: int) -> list[np.ndarray]:
    """Random arguments like XLA's ``--random_init_input_literals``: floats ~ N(0, 1), signed integers
    in [-8, 8), unsigned in [0, 16), booleans fair coins — small integers keep most indices in range."""
    rng = np.random.default_rng(seed)
    out = []
    for p in entry_parameters(module):
        shape = p.shape
        if not shape.is_array:
            raise UnimplementedError(f"parameter {p.parameter_number} (%{p.name}) has shape {shape}; random "
                                     "inputs are arrays only")
        et, dims = shape.element_type, shape.dimensions
        if et.is_complex:
            v = rng.standard_normal(dims) + 1j * rng.standard_normal(dims)
        elif et.is_float:
            v = rng.standard_normal(dims)
        elif et.value == "pred":
            v = rng.integers(0, 2, dims).astype(bool)
        elif et.value.startswith("u"):
            v = rng.integers(0, 16, dims)
        else:
            v = rng.integers(-8, 8, dims)
        out.append(np.asarray(v).astype(shape.dtype))
    return out


def read_inputs(npz_path: str | Path, module, locate, hlo_path: str | Path) -> list[np.ndarray]:
    """The npz's ``arg0..argN-1``, checked against the ENTRY parameters (count, dtype, dimensions);
    a mismatch points at the parameter (or the ENTRY computation) in the HLO text."""
    p = Path(npz_path)
    if not p.is_file():
        raise NotFoundError(f"{p}: No such file")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # what np.load raises on a foreign file
        raise RunHloError(f"{p}: not an npz file: {e}") from None
    params = entry_parameters(module)

    def where(x) -> str:
        pos = locate(x)
        return f"{hlo_path}:{pos[0]}:{pos[1]}" if pos else str(hlo_path)

    names = [f"arg{k}" for k in range(len(params))]
    extra = sorted(set(arrays) - set(names), key=_natural)
    missing = [n for n in names if n not in arrays]
    if missing or extra:
        got = ", ".join(sorted(arrays, key=_natural)) or "no arrays"
        raise RunHloError(f"{where(module.entry)}: ENTRY %{module.entry.name} takes {len(params)} "
                          f"parameter{'s' if len(params) != 1 else ''} (arg0..arg{len(params) - 1}); {p} has {got}")
    out = []
    for k, param in enumerate(params):
        a = arrays[f"arg{k}"]
        shape = param.shape
        want = f"{shape.element_type.value}{list(shape.dimensions)}".replace(" ", "")
        got = f"{a.dtype}{list(a.shape)}".replace(" ", "")
        if a.dtype != shape.dtype:
            raise RunHloError(f"{where(param)}: parameter {k} (%{param.name}) is {want}; {p}'s arg{k} is "
                              f"{got} (dtype {a.dtype}, expected {np.dtype(shape.dtype)})")
        if tuple(a.shape) != tuple(shape.dimensions):
            raise RunHloError(f"{where(param)}: parameter {k} (%{param.name}) is {want}; {p}'s arg{k} is "
                              f"{got} (dimensions differ)")
        out.append(a)
    return out


def _natural(name: str):
    m = re.fullmatch(r"([a-z]+)(\d+)", name)
    return (m[1], int(m[2])) if m else (name, -1)


# ---------------------------------------------------------------------------------------------- running
def flatten(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in flatten(v)]
    return [np.asarray(value)]


def compare(actual: list[np.ndarray], expected: list[np.ndarray], abs_bound: float, rel_bound: float) -> Comparison:
    """Elementwise comparison under XLA's ErrorSpec rule. The reported element is the worst failing one
    (largest abs error; a NaN mismatch counts as infinite), or the largest error when nothing fails."""
    if len(actual) != len(expected):
        return Comparison(False, min(len(actual), len(expected)), (), f"{len(actual)} results",
                          f"{len(expected)} results", float("inf"), float("inf"), 1, 1)
    result = Comparison(ok=True)
    worst_key = None
    for k, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape:
            return Comparison(False, k, (), f"shape {a.shape}", f"shape {e.shape}", float("inf"), float("inf"), 1, 1)
        result.total += a.size
        if a.size == 0:
            continue
        wide = np.complex128 if a.dtype.kind == "c" or e.dtype.kind == "c" else np.float64
        af, ef = a.astype(wide), e.astype(wide)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            nan_a, nan_e = np.isnan(af), np.isnan(ef)
            same = (af == ef) | (nan_a & nan_e)          # equal infinities are equal
            err = np.where(same, 0.0, np.abs(af - ef))
            err = np.where((nan_a != nan_e) | np.isnan(err), np.inf, err)   # NaN vs number, inf vs -inf
            rel = np.where(err == 0, 0.0, err / np.abs(ef))
        bad = (err > abs_bound) & (rel > rel_bound)
        n_bad = int(bad.sum())
        result.bad += n_bad
        idx = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0) if n_bad else err)), a.shape)
        key = (n_bad > 0, float(err[idx]))
        if worst_key is None or key > worst_key:
            worst_key = key
            result.output, result.index = k, tuple(int(i) for i in idx)
            result.actual, result.expected = str(a[idx]), str(e[idx])
            result.abs_error, result.rel_error = float(err[idx]), float(rel[idx])
    result.ok = result.bad == 0
    return result


def run_module(module, args: list[np.ndarray], *, iterations: int = 1, reference: str | None = None,
               abs_bound: float = 1e-3, rel_bound: float = 1e-3) -> RunHloResult:
    """Optimise + compile ``module`` (a copy), run it ``iterations`` times, compare with the reference."""
    from tfxla_cluster.codegen import compile_module
    from tfxla_cluster.passes.pipeline import optimize

    original = module.clone() if reference else None
    t0 = time.perf_counter()
    optimized, _ = optimize(module.clone())
    exe = compile_module(optimized)
    compile_seconds = time.perf_counter() - t0
    times = []
    outputs = None
    for _ in range(max(1, iterations)):
        t = time.perf_counter()
        outputs = exe(*args)
        times.append(time.perf_counter() - t)
    result = RunHloResult(flatten(outputs), compile_seconds, times)
    if reference == "evaluator":
        from tfxla_cluster.hlo.evaluator import evaluate

        expected = flatten(evaluate(original, *args))
        result.comparison = compare(result.outputs, expected, abs_bound, rel_bound)
    elif reference is not None:
        raise InvalidArgumentError(f"unknown reference '{reference}' (only 'evaluator')")
    return result


def format_literal(value: np.ndarray, shape) -> str:
    """``f32[2,3] { {1, 2, 3}, {4, 5, 6} }``: XLA's literal syntax."""
    from tfxla_cluster.hlo.literal import literal_to_text

    return f"{shape.to_string(False)} {literal_to_text(value, shape)}"


def run(args) -> int:
    """The ``run-hlo`` command (argparse namespace in, exit code out)."""
    from tfxla_cluster.hlo.literal import literal_shape

    if args.iterations < 1:
        raise InvalidArgumentError(f"--iterations must be at least 1, got {args.iterations}")
    if args.output:  # before compiling: a path that cannot be written is bad input, found at once
        out = Path(args.output)
        if out.is_dir() or not out.parent.is_dir():
            raise InvalidArgumentError(f"{out}: cannot write the outputs there "
                                       f"({'a directory' if out.is_dir() else 'no such directory'})")
    module, locate = load_module(args.module)
    if args.inputs:
        inputs = read_inputs(args.inputs, module, locate, args.module)
        source = args.inputs
    else:
        inputs = random_inputs(module, args.random_seed)
        source = f"random, seed {args.random_seed}"
    params = entry_parameters(module)
    print(f"module {module.name}: {len(params)} argument{'s' if len(params) != 1 else ''} ({source})")
    if args.print_literals:
        for k, (p, a) in enumerate(zip(params, inputs)):
            print(f"arg{k}: {format_literal(a, p.shape)}")
    result = run_module(module, inputs, iterations=args.iterations, reference=args.reference,
                        abs_bound=args.abs_error_bound, rel_bound=args.rel_error_bound)
    print(f"compiled in {result.compile_seconds * 1e3:.1f} ms; {len(result.outputs)} "
          f"result{'s' if len(result.outputs) != 1 else ''}: "
          + ", ".join(f"out{k} {literal_shape(o).to_string(False)}" for k, o in enumerate(result.outputs)))
    if args.print_literals:
        for k, o in enumerate(result.outputs):
            print(f"out{k}: {format_literal(o, literal_shape(o))}")
    if args.iterations > 1:
        print(f"median of {args.iterations} runs: {result.median_seconds * 1e3:.3f} ms "
              f"(min {min(result.times) * 1e3:.3f} ms)")
    if args.output:
        try:
            np.savez(args.output, **{f"out{k}": o for k, o in enumerate(result.outputs)})
        except OSError as e:
            raise InvalidArgumentError(f"{args.output}: cannot write the outputs: {e.strerror or e}") from None
        print(f"wrote {args.output}")
    if result.comparison is not None:
        line = result.comparison.summary(args.reference, args.abs_error_bound, args.rel_error_bound)
        if not result.comparison.ok:
            import sys

            print(f"tfxla-cluster: run-hlo: {line}", file=sys.stderr)
            return 1
        print(line)
    return 0
