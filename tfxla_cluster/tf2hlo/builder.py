"""``TfBuilder``: the ``HloBuilder`` the lowering uses, naming instructions after the TF node.

Stage: lowering helper. Inside ``with b.node_scope(node)`` every instruction gets
``metadata={op_type=<op> op_name=<node name>}`` and, unless a name is given, the last component of the
node name as its name (``moments/mean`` → ``mean``, ``mean.1``, ...), which is how TF 2.21's tf2xla
dumps read. Called computations (reducers, branches, bodies) are built with :meth:`sub_builder`, which
inherits the current scope so their instructions carry the same metadata.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from tfxla_cluster.hlo.builder import HloBuilder
from tfxla_cluster.hlo.ir import HloInstruction
from tfxla_cluster.hlo.opcode import HloOpcode
from tfxla_cluster.hlo.shape import Shape


def base_name(node_name: str) -> str:
    """The instruction-name stem for a TF node: its last ``/`` component."""
    return node_name.rsplit("/", 1)[-1] or node_name


class TfBuilder(HloBuilder):
    """An ``HloBuilder`` whose default instruction names and metadata come from the current TF node."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._prefix: str | None = None
        self._scope: tuple[str, str] | None = None

    @contextmanager
    def node_scope(self, op_type: str, op_name: str, prefix: str | None = None) -> Iterator[None]:
        saved = self._prefix, self._scope
        self._prefix = prefix if prefix is not None else base_name(op_name)
        self._scope = (op_type, op_name)
        try:
            with self.metadata(op_type=op_type, op_name=op_name):
                yield
        finally:
            self._prefix, self._scope = saved

    def sub_builder(self, name: str) -> "TfBuilder":
        """A builder for a called computation, in the same node scope."""
        sub = TfBuilder(name)
        sub._prefix = self._prefix
        sub._scope = self._scope
        if self._scope is not None:
            sub._metadata = self._metadata
        return sub

    def instruction(self, opcode: HloOpcode, operands: Sequence[HloInstruction] = (), shape: Shape | None = None,
                    name: str | None = None, **fields) -> HloInstruction:
        return super().instruction(opcode, operands, shape, name or self._prefix, **fields)
