"""Which nodes have a CPU kernel: ``tf_compat.has_cpu_kernel`` (read from TF's kernel registry, silent; what
graph folding asks) agrees with TF's own ``FindKernelDef`` (``placeable_on_cpu``; what TF's placer asks, and
``graph.devices.require_cpu_kernels`` with it) — DEFAULT kernels, type lists and labels included."""
from __future__ import annotations

import pytest
from tensorflow.core.framework import node_def_pb2, types_pb2

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.graph.devices import require_cpu_kernels
from tfxla_cluster.tf_compat import has_cpu_kernel, placeable_on_cpu

T = types_pb2


def _node(op: str, **attrs) -> node_def_pb2.NodeDef:
    nd = node_def_pb2.NodeDef(name="n", op=op)
    for k, v in attrs.items():
        if isinstance(v, list):
            nd.attr[k].list.type.extend(v)
        elif isinstance(v, str):
            nd.attr[k].s = v.encode()
        else:
            nd.attr[k].type = v
    return nd


CASES = [  # (node, has a CPU kernel)
    (_node("Rint", T=T.DT_FLOAT), True), (_node("Rint", T=T.DT_HALF), False), (_node("Rint", T=T.DT_BFLOAT16), False),
    (_node("FloorDiv", T=T.DT_COMPLEX64), False), (_node("FloorDiv", T=T.DT_INT32), True),
    (_node("NoOp"), True),                                              # DEFAULT kernels only
    (_node("IdentityN", T=[T.DT_FLOAT, T.DT_BFLOAT16]), True),
    (_node("NextIteration", T=T.DT_BFLOAT16), True),
    (_node("AddV2", T=T.DT_COMPLEX128), True), (_node("Erf", T=T.DT_COMPLEX64), False),
    (_node("Conv2DBackpropInput", T=T.DT_FLOAT, _kernel="custom"), True),    # a labelled CPU kernel
    (_node("Conv2DBackpropInput", T=T.DT_FLOAT, _kernel="no_such_label"), False),
]


@pytest.mark.parametrize("nd,want", CASES, ids=lambda c: getattr(c, "op", ""))
def test_has_cpu_kernel_is_tfs_find_kernel_def(nd, want):
    assert placeable_on_cpu(nd) is want
    assert has_cpu_kernel(nd) is want


def test_a_graph_with_a_node_no_cpu_kernel_takes_is_refused_with_tfs_message():
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    gd.node.add().CopyFrom(_node("NoOp"))
    bad = gd.node.add()
    bad.CopyFrom(_node("Rint", T=T.DT_BFLOAT16))
    bad.name = "r"
    with pytest.raises(InvalidArgumentError) as e:
        require_cpu_kernels(gd)
    lines = str(e.value).splitlines()
    assert lines[:3] == ["No OpKernel was registered to support Op 'Rint' used by {{node r}} with these attrs: "
                         "[T=DT_BFLOAT16]", "Registered devices: [CPU]", "Registered kernels:"]
    assert "  device='CPU'; T in [DT_FLOAT]" in lines
