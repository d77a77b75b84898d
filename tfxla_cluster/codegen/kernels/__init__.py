"""Stage: codegen — the kernels of thunks, one module per family. Importing this package fills the one
opcode → kernel table, ``kernel_builder.THUNKS`` (the program emitter does; opcodes not in it get the
elemental loop kernel of ``loop.py``).

    loop.py     the elemental loop kernel (fusions, elemental instructions), dot / convolution (GEMM when
                big enough), the copy kernel; reduction strategies in ``codegen/reductions.py``
    sort.py     sort and custom-call "TopK": a stable merge sort of an index permutation per row
    scatter.py  scatter and select-and-scatter, applied in source order
    rng.py      rng-bit-generator (Philox, ThreeFry), bit-exact with the evaluator; rng-get-and-update-state
    concat.py   an unfused concatenate as copies of contiguous runs (the elemental loop for other layouts)

``NO_NATIVE_KERNEL`` lists the opcodes native code does not implement: compiling one is an
UnimplementedError naming the instruction (the launcher then runs the cluster on the evaluator). It is
empty: seedless ``rng`` is expanded before codegen (passes/rng_expander.py) and complex values have
elemental code (codegen/complex_ops.py).
"""
from tfxla_cluster.codegen.kernel_builder import thunk
from tfxla_cluster.codegen.kernels import concat, loop, rng, scatter, sort  # noqa: F401  (each registers its opcodes)
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.opcode import HloOpcode as O

NO_NATIVE_KERNEL: tuple[O, ...] = ()


@thunk(*NO_NATIVE_KERNEL)
def _unsupported(prog, instr, operands, out) -> None:
    raise UnimplementedError(f"native code for {instr.opcode.text} (%{instr.name}) is not implemented")
