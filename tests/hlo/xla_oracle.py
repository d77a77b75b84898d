"""Real XLA through jaxlib, for cross-checks: its HLO parser/printer and XLA:CPU execution.

Import only after ``pytest.importorskip("jax")``. HLO text is parsed by ``hlo_module_from_text``;
execution converts the module to StableHLO and compiles it for the CPU client (layouts are not carried
over by that conversion, so only default-layout modules can be executed).
"""
from __future__ import annotations

import functools

import numpy as np


@functools.cache
def _jax():
    import jax
    from jax._src import xla_bridge
    from jax._src.lib import xla_client as xc

    jax.config.update("jax_enable_x64", True)  # keep 64-bit arguments 64-bit
    return jax, xc, xla_bridge.get_backend("cpu")


def xla_parse(text: str):
    """XLA's parser; raises on text XLA rejects."""
    _, xc, _ = _jax()
    return xc.hlo.hlo_module_from_text(text)


def xla_reprint(text: str) -> str:
    """XLA's parser + printer, with constants printed in full."""
    _, xc, _ = _jax()
    options = xc.hlo.HloPrintOptions()
    options.print_large_constants = True
    return xc.hlo.hlo_module_from_text(text).to_string(options)


def xla_run(text: str, *args) -> list[np.ndarray]:
    """Compile ``text`` with XLA:CPU and run it; a tuple result comes back flattened."""
    jax, xc, backend = _jax()
    module = xla_parse(text)
    mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    device = backend.local_devices()[0]
    options = xc.CompileOptions()
    # Cheaper LLVM pipelines halve compile time; the checks here are about semantics, not speed.
    options.executable_build_options.debug_options.xla_backend_optimization_level = 0
    options.executable_build_options.debug_options.xla_llvm_disable_expensive_passes = True
    exe = backend.compile_and_load(mlir, xc.DeviceList((device,)), options)
    buffers = [jax.device_put(np.asarray(a), device) for a in args]
    return [np.asarray(o[0]) for o in exe.execute_sharded(buffers).disassemble_into_single_device_arrays()]
