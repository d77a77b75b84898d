"""Pass infrastructure: Pipeline order, verification, disabling, error naming, FixedPoint bounds and
cycle detection; and the FileCheck helper the other tests rely on."""
import warnings

import pytest

from tests.passes.passes_helpers import FileCheckError, filecheck
from tfxla_cluster.errors import FlagError, InternalError, InvalidArgumentError
from tfxla_cluster.flags import Flags
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.passes import FixedPoint, HloPass, PassContext, Pipeline

SIMPLE = """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  n = f32[4] negate(p)
  ROOT a = f32[4] add(n, p)
}
"""


class Recorder(HloPass):
    def __init__(self, name, log, changed=False):
        self.name, self.log, self.changed = name, log, changed

    def run_on_module(self, module):
        self.log.append(self.name)
        return self.changed


class Breaker(HloPass):
    """Leaves an ill-typed instruction behind (the verifier must catch it)."""

    name = "breaker"

    def run_on_module(self, module):
        root = module.entry.root
        root.shape = root.shape.with_element_type(root.shape.element_type.__class__("s32"))
        return True


class Raiser(HloPass):
    name = "raiser"

    def run_on_module(self, module):
        raise InvalidArgumentError("boom")


class Toggler(HloPass):
    """Flips negate <-> abs forever: a pass pair that never converges."""

    name = "toggler"

    def run_on_module(self, module):
        n = module.entry.get_instruction("n")
        n.opcode = O.ABS if n.opcode is O.NEGATE else O.NEGATE
        return True


def test_pipeline_runs_passes_in_order():
    log = []
    p = Pipeline("p", [Recorder("a", log), Recorder("b", log), Recorder("c", log)])
    assert p.run(parse_module(SIMPLE)) is False
    assert log == ["a", "b", "c"]


def test_disabled_passes_are_skipped():
    log = []
    flags = Flags.parse(xla_flags="--xla_disable_hlo_passes=b,inner")
    inner = Pipeline("inner", [Recorder("d", log)])
    p = Pipeline("p", [Recorder("a", log), Recorder("b", log), inner, Recorder("c", log)])
    p.run(parse_module(SIMPLE), PassContext.from_flags(flags))
    assert log == ["a", "c"]


def test_enable_only_and_disable_all():
    log = []
    p = Pipeline("p", [Recorder("a", log), Recorder("b", log)])
    p.run(parse_module(SIMPLE), PassContext.from_flags(Flags.parse(xla_flags="--xla_enable_hlo_passes_only=b")))
    assert log == ["b"]
    log.clear()
    p.run(parse_module(SIMPLE), PassContext.from_flags(Flags.parse(xla_flags="--xla_disable_all_hlo_passes=true")))
    assert log == []


def test_verifier_failure_names_the_pass_and_those_before():
    log = []
    p = Pipeline("p", [Recorder("algsimp", log, True), Recorder("cse", log), Breaker(), Recorder("never", log)])
    with pytest.raises(InternalError) as err:
        p.run(parse_module(SIMPLE))
    msg = str(err.value)
    assert msg.startswith("While running pass 'p/breaker' after [p/algsimp, p/cse]: ")
    assert "computation %e" in msg
    assert "never" not in log


def _breaking_pipeline(log):
    return Pipeline("p", [Recorder("algsimp", log, True), Pipeline("inner", [Breaker()]), Recorder("after", log)])


def test_verifier_mode_pipeline_verifies_once_at_the_end():
    """--tfxla_hlo_verifier=pipeline (optimize's default): the passes all run, then one verification
    names the passes that changed the module."""
    log = []
    ctx = PassContext.from_flags(Flags.parse())
    assert (ctx.verify, ctx.verify_at_end) == (False, True)
    with pytest.raises(InternalError) as err:
        _breaking_pipeline(log).run(parse_module(SIMPLE), ctx)
    assert log == ["algsimp", "after"]
    msg = str(err.value)
    assert msg.startswith("After running pipeline 'p' (changed by [p/algsimp, p/inner/breaker]): computation %e")
    # the same problem as the verifier reports after the pass that made it
    with pytest.raises(InternalError) as per_pass:
        _breaking_pipeline([]).run(parse_module(SIMPLE),
                                   PassContext.from_flags(Flags.parse(tfxla_cluster_flags="--tfxla_hlo_verifier=pass")))
    assert str(per_pass.value).startswith("While running pass 'p/inner/breaker' after [p/algsimp]: ")
    assert msg.split("): ", 1)[1] == str(per_pass.value).split("]: ", 1)[1]


def test_verifier_mode_off_and_bad_value():
    log = []
    module = parse_module(SIMPLE)
    _breaking_pipeline(log).run(module, PassContext.from_flags(Flags.parse(tfxla_cluster_flags="--tfxla_hlo_verifier=off")))
    assert log == ["algsimp", "after"]
    with pytest.raises(FlagError, match="tfxla_hlo_verifier=sometimes: expected one of pipeline, pass, off"):
        PassContext.from_flags(Flags.parse(tfxla_cluster_flags="--tfxla_hlo_verifier=sometimes"))


def test_error_keeps_type_and_nested_path():
    log = []
    p = Pipeline("cpu", [Recorder("dce", log), Pipeline("simplification", [Recorder("algsimp", log), Raiser()])])
    with pytest.raises(InvalidArgumentError) as err:
        p.run(parse_module(SIMPLE))
    assert str(err.value) == ("While running pass 'cpu/simplification/raiser' after "
                              "[cpu/dce, cpu/simplification/algsimp]: boom")


def test_fixed_point_stops_when_nothing_changes():
    log = []

    class Once(HloPass):
        name = "once"
        runs = 0

        def run_on_module(self, module):
            self.runs += 1
            log.append(self.runs)
            return self.runs == 1

    fp = FixedPoint("fp", [Once()])
    assert fp.run(parse_module(SIMPLE)) is True
    assert fp.iterations == 2 and log == [1, 2] and fp.cycle is None


def test_fixed_point_detects_cycling():
    fp = FixedPoint("fp", [Toggler()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fp.run(parse_module(SIMPLE))
    # Iterations 2, 4, 6 print the same module; the text is compared from the skeleton's first repeat on.
    assert fp.cycle == (4, 6)
    assert fp.iterations == 6
    assert any("cycling" in str(w.message) for w in caught)


def test_fixed_point_is_bounded():
    class Grow(HloPass):
        """Always changes and never repeats (renames the root)."""
        name = "grow"

        def run_on_module(self, module):
            module.entry.root.name += "x"
            return True

    fp = FixedPoint("fp", [Grow()], max_iters=25)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fp.run(parse_module(SIMPLE))
    assert fp.iterations == 25
    assert any("did not converge in 25 iterations" in str(w.message) for w in caught)


def test_pass_history_is_recorded():
    ctx = PassContext()
    log = []
    Pipeline("p", [Recorder("a", log, True), Recorder("b", log)]).run(parse_module(SIMPLE), ctx)
    assert [(r.path, r.changed) for r in ctx.history] == [("p/a", True), ("p/b", False)]


# ---------------------------------------------------------------- FileCheck helper
def test_filecheck_order_next_same_not():
    out = "a = add(x)\nb = mul(a)\nc = sub(b)\n"
    filecheck(out, "CHECK: add\nCHECK-NEXT: mul\nCHECK-SAME: (a)\nCHECK-NOT: div\nCHECK: sub")
    filecheck(out, "CHECK: {{[a-z]}} = mul")
    with pytest.raises(FileCheckError):
        filecheck(out, "CHECK: mul\nCHECK: add")
    with pytest.raises(FileCheckError):
        filecheck(out, "CHECK: add\nCHECK-NOT: mul\nCHECK: sub")
    with pytest.raises(FileCheckError):
        filecheck(out, "CHECK: add\nCHECK-NEXT: sub")


def test_fixed_point_does_not_rerun_a_pass_that_saw_the_module_unchanged():
    """A pass that changed nothing runs again only after another pass changed the module: with 'a' changing
    the module in its first two runs, 'b' (after it) runs in iterations 1-2 and is skipped in iteration 3
    (recorded as unchanged); 'c' (no change ever) likewise."""
    runs = []

    class Counted(HloPass):
        def __init__(self, name, changes):
            self.name, self.changes = name, changes

        def run_on_module(self, module):
            runs.append(self.name)
            return runs.count(self.name) <= self.changes

    ctx = PassContext()
    fp = FixedPoint("fp", [Counted("a", 2), Counted("b", 0), Counted("c", 0)])
    assert fp.run(parse_module(SIMPLE), ctx) is True
    assert fp.iterations == 3
    assert runs == ["a", "b", "c", "a", "b", "c", "a"]
    assert [(r.path, r.changed) for r in ctx.history][-3:] == [("fp/a", False), ("fp/b", False), ("fp/c", False)]
