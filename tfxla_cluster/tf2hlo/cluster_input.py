"""One input of a lowered cluster (:class:`ClusterInput`; lower.py makes them).

Stage: lowering's result. Apart from lower.py so that the persistent cache, which stores the inputs with
a cluster's code, loads an entry without importing lowering (tf2hlo's op families, the HLO IR).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfxla_cluster.hlo.shape import PrimitiveType


@dataclass
class ClusterInput:
    """One input of a lowered cluster. ``kind`` is "parameter", "constant" or "resource"."""

    index: int
    tensor: tuple[str, int]             # the producing tensor (an _Arg's own output for functions)
    kind: str
    element_type: PrimitiveType
    dims: tuple[int, ...]
    parameter: int | None = None        # parameter number (parameters and resources)
    # The specialised value: of a constant; of a resource a must-be-constant input reads (TF's
    # kConstantResource: the variable's value when compiled, which keys the compilation).
    value: np.ndarray | None = None
    consumers: list[tuple[str, int]] = field(default_factory=list)  # (node, input slot) in the cluster
