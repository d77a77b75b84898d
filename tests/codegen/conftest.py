"""Every codegen test emits each kernel afresh and checks it against the kernel reuse would have replayed
(``ProgramEmitter.verify_reuse``): a structural key that misses something the code depends on fails here."""
from __future__ import annotations

import pytest

from tfxla_cluster.codegen.program import ProgramEmitter


@pytest.fixture(autouse=True)
def _verify_kernel_reuse():
    saved, ProgramEmitter.verify_reuse = ProgramEmitter.verify_reuse, True
    yield
    ProgramEmitter.verify_reuse = saved


@pytest.fixture
def fast_conv_kernels(monkeypatch):
    """Small elemental convolutions run the fast kernels, not XLA's order (``conv_exact.exact_order``):
    for tests of those kernels on shapes XLA would loop over."""
    from tfxla_cluster.codegen import conv_exact
    monkeypatch.setattr(conv_exact, "EXACT_ORDER_WORK", 0)
