"""hlo/attrs' value types (plain slotted classes, issue 17) behave as the frozen dataclasses they replaced:
equal and hashed by their fields, dataclass reprs, class patterns, ``replace``, pickling (the persistent cache)."""
from __future__ import annotations

import copy
import pickle

import pytest

from tfxla_cluster.hlo import attrs as A


def test_equal_and_hashed_by_fields_and_never_equal_to_another_type():
    w = A.WindowDimension(3, stride=2)
    assert w == A.WindowDimension(3, 2) and hash(w) == hash(A.WindowDimension(3, 2))
    assert w != A.WindowDimension(3, 2, window_reversal=True) and w != (3, 2, 0, 0, 1, 1, False)
    assert A.SliceRange(0, 4) != A.PaddingDimension(0, 4, 1)   # same values, other class
    assert len({A.Window((w,)), A.Window((A.WindowDimension(3, 2),))}) == 1
    assert A.PaddingConfig.of([(1, 2)]) == A.PaddingConfig((A.PaddingDimension(1, 2, 0),))


def test_repr_is_the_dataclass_repr():
    assert repr(A.SliceRange(0, 4)) == "SliceRange(start=0, limit=4, stride=1)"
    assert repr(A.Window(())) == "Window(dimensions=())"
    assert repr(A.OpMetadata(op_type="Add")) == \
        "OpMetadata(op_type='Add', op_name='', source_file='', source_line=0, extra=())"


def test_replace_match_pickle_copy():
    d = A.DotDimensionNumbers((1,), (0,))
    assert d.replace(lhs_batch_dimensions=(0,)) == A.DotDimensionNumbers((1,), (0,), (0,))
    with pytest.raises(TypeError):
        d.replace(no_such_field=1)
    match A.Window((A.WindowDimension(2),)):
        case A.Window(dims):
            assert dims == (A.WindowDimension(2),)
    conv = A.ConvolutionDimensionNumbers.nhwc()
    assert pickle.loads(pickle.dumps(conv)) == conv and copy.deepcopy(conv) == conv
    assert conv.to_text() == "b01f_01io->b01f"


def test_gather_and_scatter_attrs_print_batching_dims_only_when_present():
    g = A.GatherDimensionNumbers((1,), (0,), (0,), 1)
    assert g.to_attrs() == ["offset_dims={1}", "collapsed_slice_dims={0}", "start_index_map={0}", "index_vector_dim=1"]
    s = A.ScatterDimensionNumbers((1,), (0,), (0,), 1, (), (2,))
    assert s.to_attrs() == ["update_window_dims={1}", "inserted_window_dims={0}", "scatter_dims_to_operand_dims={0}",
                            "scatter_indices_batching_dims={2}", "index_vector_dim=1"]
