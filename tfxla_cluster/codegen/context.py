"""The per-module / per-kernel emission contexts (the options they emit with: ``codegen/options.py``).

``ModuleContext`` owns the ``llvmlite.ir.Module`` under construction, declares intrinsics and runtime
functions once, and hands out kernel names. ``KernelContext`` is one function being emitted: its
builder, entry-block allocas, and the scoped cache of generated element values (a value generated
inside a loop body or a branch is only reused while that scope is open, so every reuse is dominated
by its definition).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.options import CodegenOptions



class ModuleContext:
    """The LLVM module being built for one HLO module."""

    def __init__(self, name: str, options: CodegenOptions) -> None:
        self.module = ir.Module(name=re.sub(r"[^A-Za-z0-9_.]", "_", name))
        self.options = options
        self._functions: dict[str, ir.Function] = {}
        self._names: dict[str, int] = {}
        self._taken: set[str] = {"tfxla_entry"}
        self.kernel_count = 0
        # Functions whose loops evaluate an inline f32 transcendental: compute-bound, so they get the
        # target's full vector width (see ``wide_vector_bits``).
        self.wide_functions: set[str] = set()
        # Emitting a small call's computation, which XLA:CPU emits with its legacy IrEmitter as one kernel
        # (codegen/small_call.py): set by ``program._call``.
        self.legacy_emitter = False

    def mark_wide(self, fn: ir.Function) -> None:
        """``fn`` evaluates an inline transcendental approximation (exp/log/tanh)."""
        self.wide_functions.add(fn.name)

    def wide_vector_bits(self) -> int:
        """Vector width for the ``wide_functions``: 512 on an AVX-512 target, else the preferred width.
        XLA's 256-bit default keeps memory-bound loops off AVX-512's lower clocks; an exp/tanh loop is
        bound by its polynomial: with 512-bit vectors on AVX-512 the bench's ``elementwise_4M`` fusion ran
        1.2-2x faster in ``run-hlo`` (loaded machine). Each lane computes the same ops: results are unchanged."""
        bits = self.options.prefer_vector_width
        if bits >= 256 and self.options.cpu_target.info.isa == "AVX-512":
            return 512
        return bits

    def function(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Get or declare an external function (libm, runtime) or intrinsic by exact name."""
        fn = self._functions.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
            self._functions[name] = fn
        return fn

    def intrinsic(self, base: str, ty: ir.Type, nargs: int = 1, ret: ir.Type | None = None) -> ir.Function:
        """``llvm.<base>.<suffix>`` overloaded on ``ty`` (e.g. ``llvm.fabs.f32``, ``llvm.ctpop.i32``)."""
        return self.function(f"llvm.{base}.{_suffix(ty)}", ret or ty, [ty] * nargs)

    def unique_name(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint)[:48] or "k"
        n = self._names.get(base, 0)
        name = base if n == 0 else f"{base}_{n}"
        while name in self._taken:  # e.g. "split_1" twice vs. an instruction named "split_1.1"
            n += 1
            name = f"{base}_{n}"
        self._names[base] = n + 1
        self._taken.add(name)
        return name


def _suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.HalfType):
        return "f16"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TypeError(f"no intrinsic suffix for {ty}")


@dataclass(eq=False)
class KernelContext:
    """One LLVM function under construction."""

    mctx: ModuleContext
    function: ir.Function
    builder: ir.IRBuilder
    kernel_id: int = 0
    table: ir.Value | None = None          # the buffer table argument (bounds-check reports use it)
    scopes: list[dict] = field(default_factory=lambda: [{}])
    keepalive: list = field(default_factory=list)
    accesses: list = field(default_factory=list)   # (load/store instruction, slot) for alias metadata

    @property
    def options(self) -> CodegenOptions:
        return self.mctx.options

    @contextmanager
    def scope(self):
        """Values generated inside are forgotten on exit (they may not dominate later code)."""
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()

    def cached(self, key):
        for s in reversed(self.scopes):
            if key in s:
                return s[key][0]
        return None

    def remember(self, key, value, pin=None) -> None:
        """Cache ``value`` under ``key`` in the innermost scope. A key made of ``id()``s names ``pin``, the
        objects it was made from: the entry keeps them alive, so no other object can take one of those ids
        while the entry lives (a freed index value's id reused by another value would be a stale hit)."""
        self.scopes[-1][key] = (value, pin)

    def release(self) -> None:
        """Forget what building the finished function kept (generators, cached values): generator closures
        refer to each other and to their emitter, cycles that reference counting alone never frees, so a
        compile would leave its kernels' IR to the cyclic collector."""
        for obj in self.keepalive:
            release = getattr(obj, "release", None)
            if release is not None:
                release()
        self.keepalive.clear()
        self.scopes = [{}]
        self.accesses.clear()

    def alloca(self, ty: ir.Type, name: str = "", count: int | None = None) -> ir.Value:
        """A stack slot in the entry block (so mem2reg/SROA can promote it)."""
        return entry_builder(self.function).alloca(ty, size=None if count is None else t.i64(count), name=name)


def new_function_body(fn: ir.Function) -> ir.IRBuilder:
    """Give ``fn`` a setup block (allocas, buffer addresses) that branches to the body block, and
    return a builder at the body. llvmlite builders keep their position as an index, so code that is
    added to the setup block later must never share a block with the main builder."""
    setup = fn.append_basic_block("setup")
    body = fn.append_basic_block("body")
    ir.IRBuilder(setup).branch(body)
    return ir.IRBuilder(body)


def entry_builder(fn: ir.Function) -> ir.IRBuilder:
    """A builder just before the setup block's terminator."""
    setup = fn.entry_basic_block
    b = ir.IRBuilder(setup)
    b.position_before(setup.instructions[-1])
    return b
