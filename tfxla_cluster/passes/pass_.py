"""Pass infrastructure (XLA's HloPassInterface, HloPassPipeline and HloPassFix).

- ``HloPass``: a short ``name`` and ``run(module) -> bool changed``. Subclasses implement
  ``run_on_module``; ``run`` leaves every computation's instruction list in definition order afterwards
  (passes may append new instructions anywhere), so a pass used on its own yields a verifiable module.
- ``Pipeline(name, passes)``: runs its passes in order. After each pass that changed the module it runs
  the verifier (or, with ``PassContext.verify_at_end``, once after its last pass: what
  ``--tfxla_hlo_verifier=pipeline``, the default, asks of ``optimize``, as the verifier was a fifth of a
  large module's pass time; ``pass`` verifies after every pass, ``off`` not at all); it skips
  passes named in ``--xla_disable_hlo_passes`` (or not in ``--xla_enable_hlo_passes_only``, or all of
  them with ``--xla_disable_all_hlo_passes``); with a ``Dumper`` it writes the module after every pass
  whose name matches ``--xla_dump_hlo_pass_re``. Any failure is re-raised with the same error type and
  the message "While running pass 'fusion' after [algsimp, cse]: ..." — the failing pass and the passes
  that ran before it, innermost pipeline names joined with '/'. A problem the verifier finds at the end
  is re-raised as "After running pipeline 'cpu' (changed by [cpu/cse, ...]): ...".
- ``FixedPoint(name, passes, max_iters=25)``: runs the passes as a pipeline until an iteration changes
  nothing, at most ``max_iters`` times (XLA's HloPassFix limit). If the module after an iteration is
  text-identical to the module after an earlier iteration (from the second on), the passes are cycling:
  it stops, warns, and records ``cycle`` (the two iteration numbers) instead of spinning to the limit.
  The text is printed only for an iteration whose instruction names and opcodes repeat an earlier
  one's (a necessary condition), so a cycle is recognised at its second repetition: ``(4, 6)`` for a
  pass that toggles the module from iteration 2 on. Converging runs print nothing.
  A pass that changed nothing is not run again until another pass changes the module (passes are functions
  of the module): it is recorded and dumped as unchanged. The last iteration then runs only the passes up
  to the one that changed the module last.

Pipelines are passes themselves, so they nest, and disabling a pipeline's name disables all of it.
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from typing import TYPE_CHECKING, Iterable, Sequence

from tfxla_cluster import compile_profile
from tfxla_cluster.errors import FlagError, InternalError, TfXlaError
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.verifier import verify_module

if TYPE_CHECKING:  # pragma: no cover
    from tfxla_cluster.passes.dump import Dumper


class HloPass:
    """Base class: ``name`` plus ``run_on_module(module) -> bool``."""

    name: str = "pass"

    def run(self, module: HloModule, ctx: "PassContext | None" = None) -> bool:
        changed = bool(self.run_on_module(module))
        if changed:
            restore_definition_order(module)
        return changed

    def run_on_module(self, module: HloModule) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def restore_definition_order(module: HloModule) -> None:
    """Put every computation's instruction list back in definition (post) order."""
    for comp in module.computations:
        comp.sort_topologically()


@dataclasses.dataclass
class PassRecord:
    """One pass run, for logs and dumps."""

    path: str
    changed: bool
    seconds: float


@dataclasses.dataclass
class PassContext:
    """What nested pipelines share: which passes may run, the dumper, and the run history."""

    disabled: frozenset[str] = frozenset()
    enabled_only: frozenset[str] | None = None
    disable_all: bool = False
    dumper: "Dumper | None" = None
    verify: bool = True            # after every pass that changed the module
    verify_at_end: bool = False    # once, after the outermost pipeline (when ``verify`` is off)
    history: list[PassRecord] = dataclasses.field(default_factory=list)

    @staticmethod
    def from_flags(flags, dumper: "Dumper | None" = None, verify: bool = True) -> "PassContext":
        def names(text: str) -> frozenset[str]:
            return frozenset(n for n in text.split(",") if n)

        mode = flags.tfxla_hlo_verifier
        if mode not in VERIFIER_MODES:
            raise FlagError(f"--tfxla_hlo_verifier={mode}: expected one of {', '.join(VERIFIER_MODES)}")
        each, at_end = VERIFIER_MODES[mode]
        only = names(flags.xla_enable_hlo_passes_only)
        return PassContext(disabled=names(flags.xla_disable_hlo_passes), enabled_only=only or None,
                           disable_all=bool(flags.xla_disable_all_hlo_passes), dumper=dumper,
                           verify=verify and each, verify_at_end=verify and at_end)

    def is_enabled(self, p: HloPass) -> bool:
        if p.name in self.disabled:
            return False
        if isinstance(p, Pipeline):  # a pipeline is a container: its members decide
            return True
        if self.disable_all:
            return False
        return self.enabled_only is None or p.name in self.enabled_only


# --tfxla_hlo_verifier's values: (verify after every pass that changed the module, verify once at the end).
VERIFIER_MODES = {"pipeline": (False, True), "pass": (True, False), "off": (False, False)}


def _unique(names: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for n in names:
        seen.setdefault(n, None)
    return list(seen)


class Pipeline(HloPass):
    """Runs ``passes`` in order (HloPassPipeline); see the module docstring for errors and dumps."""

    def __init__(self, name: str, passes: Sequence[HloPass], *, verify: bool = True) -> None:
        self.name = name
        self.passes = list(passes)
        self.verify = verify

    def run(self, module: HloModule, ctx: PassContext | None = None, _prefix: str = "") -> bool:
        ctx = ctx if ctx is not None else PassContext(verify=self.verify)
        return self._verified_at_end(module, ctx, _prefix, self._run_once(module, ctx, _prefix))

    def _verified_at_end(self, module: HloModule, ctx: PassContext, prefix: str, changed: bool) -> bool:
        """``changed``, after verifying the module if this is the outermost pipeline and ``ctx`` asks."""
        if changed and not prefix and ctx.verify_at_end and not ctx.verify:
            try:
                verify_module(module)
            except Exception as e:
                by = _unique(r.path for r in ctx.history if r.changed)
                raise _wrap(e, f"After running pipeline '{self.name}' (changed by [{', '.join(by)}]): ") from e
        return changed

    def _run_once(self, module: HloModule, ctx: PassContext, prefix: str, clean: set[int] | None = None) -> bool:
        """Run the passes once. ``clean`` (a fixed point's): the positions of the passes whose last run changed
        nothing on the module as it still is; they are not run again (a pass is a function of the module: it
        would change nothing again), only recorded and dumped as unchanged. Kept current here."""
        changed = False
        path_prefix = f"{prefix}{self.name}/"
        for k, p in enumerate(self.passes):
            if not ctx.is_enabled(p):
                continue
            path = path_prefix + p.name
            if clean is not None and k in clean:
                ctx.history.append(PassRecord(path, False, 0.0))
                if ctx.dumper is not None:
                    ctx.dumper.after_pass(module, self.name, p.name, False)
                continue
            t0 = time.perf_counter()
            try:
                if isinstance(p, Pipeline):
                    step = p.run(module, ctx, path_prefix)
                else:
                    step = p.run(module, ctx)
                    if ctx.verify and step:
                        verify_module(module)
            except Exception as e:  # name the pass; keep the error type
                if getattr(e, "_pass_context", False):
                    raise
                before = _unique(r.path for r in ctx.history)
                raise _wrap(e, f"While running pass '{path}' after [{', '.join(before)}]: ") from e
            if not isinstance(p, Pipeline):
                seconds = time.perf_counter() - t0
                ctx.history.append(PassRecord(path, step, seconds))
                compile_profile.record(f"{compile_profile.HLO_PASS} {path}", seconds)
                if ctx.dumper is not None:
                    ctx.dumper.after_pass(module, self.name, p.name, step)
            changed |= step
            if clean is not None:
                if step:
                    clean.clear()
                elif not isinstance(p, Pipeline):   # (a nested pipeline always runs: its passes are recorded)
                    clean.add(k)
        return changed

    def pass_names(self) -> list[str]:
        """The leaf pass names, depth first (what ``--xla_disable_hlo_passes`` can name)."""
        out = []
        for p in self.passes:
            out.append(p.name)
            if isinstance(p, Pipeline):
                out.extend(p.pass_names())
        return out


class FixedPoint(Pipeline):
    """Runs its passes until nothing changes, at most ``max_iters`` times (XLA's HloPassFix)."""

    def __init__(self, name: str, passes: Sequence[HloPass], max_iters: int = 25, *, verify: bool = True) -> None:
        super().__init__(name, passes, verify=verify)
        self.max_iters = max_iters
        self.iterations = 0
        self.cycle: tuple[int, int] | None = None  # (earlier iteration, iteration that repeated it)

    def run(self, module: HloModule, ctx: PassContext | None = None, _prefix: str = "") -> bool:
        ctx = ctx if ctx is not None else PassContext(verify=self.verify)
        seen: dict[str, int] = {}
        # Names and opcodes per computation: equal texts have equal skeletons, and a simplification
        # iteration that changed something almost always changed its skeleton (printing the module for
        # every iteration was ~7% of a large module's pass time).
        skeletons: set[tuple] = set()
        changed_any = False
        self.iterations, self.cycle = 0, None
        # The passes that have seen the module as it is and changed nothing: the passes after the last one
        # that changed it are not run again in the next iteration (densenet's last iteration runs algsimp only).
        clean: set[int] = set()
        for it in range(1, self.max_iters + 1):
            self.iterations = it
            changed = self._run_once(module, ctx, _prefix, clean)
            if not changed:
                break
            changed_any = True
            if it == 1:
                continue  # most fixed points converge in two iterations: start fingerprinting at the second
            skeleton = _skeleton(module)
            if skeleton not in skeletons:
                skeletons.add(skeleton)
                continue
            text = module.to_string(metadata=False)
            if text in seen:
                self.cycle = (seen[text], it)
                warnings.warn(f"fixed point '{self.name}' is cycling: the module after iteration {it} is the "
                              f"same as after iteration {seen[text]}; stopping", RuntimeWarning, stacklevel=2)
                break
            seen[text] = it
        else:
            warnings.warn(f"fixed point '{self.name}' did not converge in {self.max_iters} iterations",
                          RuntimeWarning, stacklevel=2)
        return self._verified_at_end(module, ctx, _prefix, changed_any)


class IfChanged(Pipeline):
    """Runs its first pass, and the others only if that pass changed the module. For a pass that XLA
    sandwiches between two identical simplification fixed points (``scatter_expander``): after a pass
    that changed nothing, the second fixed point would change nothing either, and costs compile time."""

    def _run_once(self, module: HloModule, ctx: PassContext, prefix: str, clean: set[int] | None = None) -> bool:
        first, rest = Pipeline(self.name, self.passes[:1]), Pipeline(self.name, self.passes[1:])
        if not first._run_once(module, ctx, prefix):
            return False
        rest._run_once(module, ctx, prefix)
        return True


def _skeleton(module: HloModule) -> tuple:
    """The module's computation and instruction names and opcodes, in order (what its text starts from)."""
    return tuple((comp.name, tuple([(i.name, i.opcode) for i in comp.instructions]))
                 for comp in module.computations)


def _wrap(e: BaseException, prefix: str) -> BaseException:
    """``e``'s type (TfXlaError subclasses) with ``prefix`` + its message; others become InternalError."""
    message = prefix + (e.message if isinstance(e, TfXlaError) else f"{type(e).__name__}: {e}")
    cls = type(e) if isinstance(e, TfXlaError) else InternalError
    try:
        new = cls(message)
    except TypeError:  # an error class with a different constructor
        new = InternalError(message)
    new._pass_context = True  # type: ignore[attr-defined]
    return new
