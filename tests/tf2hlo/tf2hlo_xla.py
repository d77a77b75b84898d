"""Real XLA through jaxlib for the lowering tests: its HLO parser and XLA:CPU execution.

Import only after ``pytest.importorskip("jax")``. One implementation serves every test folder:
``tests/hlo/xla_oracle.py``.
"""
from __future__ import annotations

from tests.hlo.xla_oracle import xla_parse, xla_run  # noqa: F401  (re-exported for the tf2hlo tests)
