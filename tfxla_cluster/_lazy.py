"""Package attributes that import their module on first use (PEP 562): the one implementation the package
``__init__`` files share.

Stage: helper. ``import tfxla_cluster`` (and a persistent-cache hit, which loads a few codegen modules) must
not import TensorFlow, the lowering, the HLO passes or IR emission before something uses them; a package
lists its public names and the module of each, and ``lazy_attributes`` gives it the module-level
``__getattr__`` and ``__dir__``. A resolved name is stored in the package's namespace, so the lookup runs once.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_attributes(package: str, table: dict[str, str], namespace: dict[str, Any]
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public ``name`` lives in module ``table[name]``;
    ``namespace`` is the package's ``globals()``."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
