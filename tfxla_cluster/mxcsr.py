"""The calling thread's x86 MXCSR from Python: run compile-time evaluation with denormals flushed, as TF does.

Stage: process facts, used by the HLO passes (constant folding) and the generated code's tests. TF compiles an XLA cluster on the thread of the kernel that asked for
it, and TF's thread-pool workers run with flush-to-zero and denormals-are-zero set
(``port::ScopedFlushDenormal``): TF's graph-level constant folding (its own CPU kernels) and XLA's
``HloEvaluator`` both compute under FTZ/DAZ, so a folded ``sqrt(-denormal)`` is -0, ``1 / denormal`` is inf and
a result in the denormal range is ±0. Our evaluator is numpy on the Python thread: :func:`flushed_denormals`
sets the same two bits around it, so numpy's float arithmetic, comparisons and libm calls see exactly what
TF's did. Guarantee: the thread's previous MXCSR is restored on exit (exceptions included); on a CPU without
MXCSR (not x86) it does nothing.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Callable, Iterator

MXCSR_FTZ_DAZ = 0x8040  # flush-to-zero (bit 15) | denormals-are-zero (bit 6)

_IR = """
declare void @llvm.x86.sse.stmxcsr(ptr)
declare void @llvm.x86.sse.ldmxcsr(ptr)

define i32 @tfxla_get_mxcsr() {
  %p = alloca i32
  call void @llvm.x86.sse.stmxcsr(ptr %p)
  %v = load i32, ptr %p
  ret i32 %v
}

define void @tfxla_set_mxcsr(i32 %v) {
  %p = alloca i32
  store i32 %v, ptr %p
  call void @llvm.x86.sse.ldmxcsr(ptr %p)
  ret void
}
"""

_lock = threading.Lock()
_functions: list | None = None  # [get, set] once compiled; [] on a CPU without MXCSR
_engine = None                   # keeps the stub's code alive


@functools.cache
def x86_host() -> bool:
    """Whether the host (the target of all our code) is x86: MXCSR, SSE fences and streaming stores exist."""
    import llvmlite.binding as llvm

    return llvm.get_default_triple().startswith(("x86_64", "i686", "i386"))


def _get_set():
    global _functions, _engine
    with _lock:
        if _functions is None:
            import llvmlite.binding as llvm

            if not x86_host():
                _functions = []
            else:
                # A stub of its own rather than codegen's engine: the HLO passes (constant folding)
                # need it and sit below codegen.
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                mod = llvm.parse_assembly(_IR)
                mod.verify()
                machine = llvm.Target.from_default_triple().create_target_machine()
                _engine = llvm.create_mcjit_compiler(mod, machine)
                _engine.finalize_object()
                _functions = [
                    ctypes.CFUNCTYPE(ctypes.c_uint32)(_engine.get_function_address("tfxla_get_mxcsr")),
                    ctypes.CFUNCTYPE(None, ctypes.c_uint32)(_engine.get_function_address("tfxla_set_mxcsr"))]
        return _functions


def get_mxcsr() -> int | None:
    """This thread's MXCSR (None without one)."""
    fns = _get_set()
    return int(fns[0]()) if fns else None


@contextlib.contextmanager
def _mxcsr_while(change: Callable[[int], int]) -> Iterator[None]:
    """Run the body with this thread's MXCSR set to ``change(old)``, then restore ``old``."""
    fns = _get_set()
    if not fns:
        yield
        return
    get, set_ = fns
    old = int(get())
    set_(change(old))
    try:
        yield
    finally:
        set_(old)


def flushed_denormals() -> contextlib.AbstractContextManager[None]:
    """Run the body with FTZ and DAZ set on this thread, then restore its MXCSR."""
    return _mxcsr_while(lambda old: old | MXCSR_FTZ_DAZ)


def kept_denormals() -> contextlib.AbstractContextManager[None]:
    """Run the body with FTZ and DAZ cleared on this thread, then restore its MXCSR: for Python code that
    must keep denormals bit for bit where TF's C++ copies them (a float in a TensorProto's ``float_val``
    becomes a Python float through a conversion DAZ would flush, and our launches compile on TF's kernel
    threads, which run with DAZ set)."""
    return _mxcsr_while(lambda old: old & ~MXCSR_FTZ_DAZ)
