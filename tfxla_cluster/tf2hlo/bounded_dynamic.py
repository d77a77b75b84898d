"""Bounded dynamic values: a result padded to a static bound plus its run-time size.

Stage: lowering (the value) and launch (the cut). XLA gives some results (NonMaxSuppressionV3's selected
indices) a dynamic dimension; we keep the static bound and carry the run-time size beside it, and the launch
slices the padded array to that size — what TF's XLA returns at the cluster boundary. This module holds only
the value type and the cut, so lowerings that make or refuse such values (gather, image ops, dynamic-size
ops) and the launcher need not import one another.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BoundedDynamic:
    """A tensor with one bounded dynamic dimension (XLA's ``set-dimension-size``): ``value`` is padded to
    the bound along ``dimension``; ``size`` (s32[]) is the run-time length. Gathers, elementwise ops,
    reductions and shape queries consume one inside the cluster (dynamic_padder.py); a cluster result
    leaves cut to its size."""

    value: object       # HloInstruction
    dimension: int
    size: object        # HloInstruction, s32[]


def trim(array: np.ndarray, dimension: int, size) -> np.ndarray:
    """The run-time view of a bounded dynamic result: its first ``size`` entries along ``dimension``."""
    index = [slice(None)] * np.ndim(array)
    index[dimension] = slice(0, int(np.asarray(size)))
    return np.asarray(array)[tuple(index)]
