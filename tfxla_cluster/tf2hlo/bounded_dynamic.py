"""Bounded dynamic values: a result padded to a static bound plus its run-time size.

Stage: lowering (the value) and launch (the cut). XLA gives some results (NonMaxSuppressionV3's selected
indices, Unique's values, Where's coordinates) a dynamic dimension; we keep the static bound and carry the
run-time size beside it, and the launch slices the padded array to that size — what TF's XLA returns at the
cluster boundary. In the HLO the value is XLA's: a ``set-dimension-size`` result with a bounded shape
(``f32[<=4]``), which shape inference carries through what is computed from it, so the lowered module
(the ``hlo`` stage) reads and runs in XLA as TF's does; the first HLO pass (passes/dynamic_padder.py)
makes it static again. This module holds only the value type, that marking and the cut, so lowerings that
make or refuse such values (gather, image ops, dynamic-size ops) and the launcher need not import one
another.
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


def bounded(b, value, dimension: int, size) -> BoundedDynamic:
    """``value`` (padded to its bound along ``dimension``) with run-time size ``size`` (s32[]): XLA's
    ``set-dimension-size``, unless the value's shape already has that dimension dynamic."""
    from tfxla_cluster.hlo.opcode import HloOpcode

    if not value.shape.is_dynamic_dimension(dimension):
        value = b.instruction(HloOpcode.SET_DIMENSION_SIZE, (value, size), None, dimensions=(dimension,))
    return BoundedDynamic(value, dimension, size)


def with_dynamic_shapes(b, outs: list) -> list:
    """A lowering's outputs with every BoundedDynamic's value marked dynamic in the HLO (``bounded``)."""
    if not any(isinstance(v, BoundedDynamic) for v in outs):
        return outs
    return [bounded(b, v.value, v.dimension, v.size) if isinstance(v, BoundedDynamic) else v for v in outs]


def trim(array: np.ndarray, dimension: int, size) -> np.ndarray:
    """The run-time view of a bounded dynamic result: its first ``size`` entries along ``dimension``."""
    index = [slice(None)] * np.ndim(array)
    index[dimension] = slice(0, int(np.asarray(size)))
    return np.asarray(array)[tuple(index)]
