"""The lowering registry: TF op name → function that emits its HLO (tf2xla's ``REGISTER_XLA_OP``).

Stage: lowering. A family module registers its ops with the decorator::

    @lowers("AddV2", "Add")
    def _add(ctx: LoweringContext, node: Node) -> list[Value]:
        x, y = ctx.broadcast_inputs()
        return [ctx.b.add(x, y)]

A lowering returns one value per TF output of the node (an ``HloInstruction``, a host ``np.ndarray``
for compile-time-known outputs such as ``Const`` or ``Shape``, or a ``Resource``), in output order.
Registering an op twice is an error, so two families can never silently disagree. Family modules are
imported lazily (and thread-safely) by :func:`lookup`, so importing this module is cheap and cycle-free.
"""
from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any, Callable

from tfxla_cluster.errors import InternalError

if TYPE_CHECKING:
    from tfxla_cluster.graph import Node
    from tfxla_cluster.tf2hlo.context import LoweringContext

LoweringFn = Callable[["LoweringContext", "Node"], list[Any]]

# One module per op family; importing a module registers its lowerings.
FAMILY_MODULES = (
    "tfxla_cluster.tf2hlo.lower",
    "tfxla_cluster.tf2hlo.elementwise",
    "tfxla_cluster.tf2hlo.reduction",
    "tfxla_cluster.tf2hlo.shape_ops",
    "tfxla_cluster.tf2hlo.slicing",
    "tfxla_cluster.tf2hlo.gather_scatter",
    "tfxla_cluster.tf2hlo.nn",
    "tfxla_cluster.tf2hlo.conv",
    "tfxla_cluster.tf2hlo.pooling",
    "tfxla_cluster.tf2hlo.batch_norm",
    "tfxla_cluster.tf2hlo.variables",
    "tfxla_cluster.tf2hlo.control_flow",
    "tfxla_cluster.tf2hlo.random",
    "tfxla_cluster.tf2hlo.random_stateful",
    "tfxla_cluster.tf2hlo.xla_ops",
    "tfxla_cluster.tf2hlo.array_ops",
    "tfxla_cluster.tf2hlo.image",
    "tfxla_cluster.tf2hlo.tensor_list",
    "tfxla_cluster.tf2hlo.tensor_array",
    "tfxla_cluster.tf2hlo.collectives",
    "tfxla_cluster.tf2hlo.symbolic_gradient",
    "tfxla_cluster.tf2hlo.linalg",
    "tfxla_cluster.tf2hlo.complex_ops",
    "tfxla_cluster.tf2hlo.xla_structured",
    "tfxla_cluster.tf2hlo.image_color",
    "tfxla_cluster.tf2hlo.nn_more",
    "tfxla_cluster.tf2hlo.quantize",
    "tfxla_cluster.tf2hlo.math_more",
    "tfxla_cluster.tf2hlo.linalg_more",
    "tfxla_cluster.tf2hlo.fft",
    "tfxla_cluster.tf2hlo.linalg_decomp",
    "tfxla_cluster.tf2hlo.special",
    "tfxla_cluster.tf2hlo.dynamic_size",
)

# The ops of TF's XLA_CPU_JIT registry we do not lower, each with why (the one list: the op coverage test
# fails when the registry has an op that is neither lowered nor here, and when an op here gets a lowering;
# ``tfxla-cluster ops`` prints it). A node of one of these ops is an ``UnimplementedError`` naming the op.
NOT_LOWERED: dict[str, str] = {
}

_LOWERINGS: dict[str, LoweringFn] = {}
_loaded = False
_load_lock = threading.RLock()


def lowers(*op_names: str) -> Callable[[LoweringFn], LoweringFn]:
    """Register the decorated function as the lowering of every op in ``op_names``."""
    def register(fn: LoweringFn) -> LoweringFn:
        for op in op_names:
            if op in _LOWERINGS and _LOWERINGS[op] is not fn:
                raise InternalError(f"op {op} already has a lowering ({_LOWERINGS[op].__module__})")
            _LOWERINGS[op] = fn
        return fn
    return register


def _load_families() -> None:
    """Import every family once; concurrent callers wait until the table is complete."""
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if not _loaded:
            for module in FAMILY_MODULES:
                importlib.import_module(module)
            _loaded = True


def lookup(op: str) -> LoweringFn | None:
    """The lowering of ``op``, or None."""
    _load_families()
    return _LOWERINGS.get(op)


def lowered_ops() -> frozenset[str]:
    """Every op name with a lowering."""
    _load_families()
    return frozenset(_LOWERINGS)
