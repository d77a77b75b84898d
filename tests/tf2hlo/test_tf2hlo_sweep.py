"""The full sweep (``pytest -m tfsweep``): every batch of the op tests with the WHOLE module executed by
XLA:CPU (the fast tests run one representative case per dtype on XLA; see tf2hlo_harness.run_batch)."""
from __future__ import annotations

import pytest

from tests.tf2hlo import test_tf2hlo_array_ops as test_array_ops
from tests.tf2hlo import test_tf2hlo_conv_pool_bn as test_conv_pool_bn
from tests.tf2hlo import test_tf2hlo_elementwise as test_elementwise
from tests.tf2hlo import test_tf2hlo_nn as test_nn
from tests.tf2hlo import test_tf2hlo_reduction as test_reduction
from tests.tf2hlo import test_tf2hlo_shape_ops as test_shape_ops
from tests.tf2hlo.tf2hlo_harness import HAVE_JAX, run_batch


def _short(module) -> str:
    """The test module's file name (its test ids do not depend on how the package is imported)."""
    return module.__name__.rpartition(".")[2]


MODULES = (test_elementwise, test_reduction, test_shape_ops, test_nn, test_conv_pool_bn, test_array_ops)
ALL = [(_short(m), name) for m in MODULES for name in m.BATCHES]


@pytest.mark.tfsweep
@pytest.mark.skipif(not HAVE_JAX, reason="needs jax for XLA:CPU")
@pytest.mark.parametrize("module,name", ALL, ids=[f"{m}:{n}" for m, n in ALL])
def test_whole_module_on_xla(module, name, request):
    if "tfsweep" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the XLA sweep runs with -m tfsweep")
    batches = next(m for m in MODULES if _short(m) == module).BATCHES
    run_batch(batches[name](), xla="all")
