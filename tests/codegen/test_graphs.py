"""Real XLA output compiled == evaluator: every ``graphs/tf/*/optimized_hlo.txt`` (TF 2.21's optimised
modules, with loop/output fusions, bitcasts with layouts, gathers, sorts, while loops) and the
unoptimised ``hlo.txt`` next to it. Constants XLA printed as ``{...}`` get seeded random values (the
same ones for both sides); where the recorded inputs fit the entry signature they are used."""
from pathlib import Path

import numpy as np
import pytest

from tests.codegen.cg_helpers import check, fill_elided, inputs_for, parsed

GRAPHS = Path(__file__).parents[2] / "graphs" / "tf"
MODULES = sorted(p for p in GRAPHS.glob("*/*hlo.txt") if p.name in ("optimized_hlo.txt", "hlo.txt"))


def _recorded_inputs(path: Path, module):
    npz = path.parent / "inputs.npz"
    if not npz.exists():
        return None
    data = np.load(npz)
    arrays = [data[k] for k in data.files]
    params = module.entry.parameters
    if len(arrays) != len(params):
        return None
    for a, p in zip(arrays, params):
        if a.shape != p.shape.dimensions or a.dtype != p.shape.dtype:
            return None
    return arrays


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_module(path):
    from tfxla_cluster.errors import InvalidArgumentError
    try:
        module = fill_elided(parsed(path.read_text(encoding="utf-8")).clone())
    except InvalidArgumentError as e:
        if "dynamic dimensions" in str(e):
            pytest.skip("bounded dynamic shapes are not modelled by the HLO parser")
        raise
    args = _recorded_inputs(path, module) or inputs_for(module)
    exe, _ = check(module, *args, rtol=2e-5, atol=2e-5, scale_atol=True)
    if path.name == "optimized_hlo.txt":
        fusions = sum(1 for i in module.entry.instructions if i.opcode.text == "fusion")
        assert len(exe.kernels) >= fusions


@pytest.mark.parametrize("name", ["MISC", "LAYOUTS", "GATHER_SCATTER_BATCHING"])
def test_hlo_corpus_modules(name):
    """The HLO layer's corpus modules that only use ops with native code (nested tuple results,
    opt-barrier, get-dimension-size, partition/replica ids, tokens, batching gather/scatter...)."""
    from tests.hlo.hlo_corpus import MODULES as CORPUS
    module = parsed(CORPUS[name])
    check(module, *inputs_for(module), rtol=1e-5, atol=1e-5)
