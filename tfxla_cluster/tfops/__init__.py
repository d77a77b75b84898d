"""What TF knows about ops: op tables, the XLA kernel registry, compile-time-constant analysis, the
reasons a node is not clustered (``ReasonCode``), the operation filters, and a cluster's boundary
(``ClusterBoundary``: what crosses it, computed once).

Layer: below ``jit/`` and ``tf2hlo/`` (both use it), above ``graph/`` and ``tf_compat``.
"""
