"""Real XLA through jaxlib for the lowering tests: its HLO parser and XLA:CPU execution.

Import only after ``pytest.importorskip("jax")``. Modules are parsed with ``hlo_module_from_text`` and,
converted to StableHLO, compiled for the CPU client at the cheapest optimisation level (the checks are
about semantics, not speed).
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


def xla_run(text: str, *args) -> list[np.ndarray]:
    """Compile ``text`` with XLA:CPU and run it; the root tuple comes back as a list."""
    jax, xc, backend = _jax()
    module = xla_parse(text)
    mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    device = backend.local_devices()[0]
    options = xc.CompileOptions()
    options.executable_build_options.debug_options.xla_backend_optimization_level = 0
    options.executable_build_options.debug_options.xla_llvm_disable_expensive_passes = True
    exe = backend.compile_and_load(mlir, xc.DeviceList((device,)), options)
    buffers = [jax.device_put(np.asarray(a), device) for a in args]
    return [np.asarray(o[0]) for o in exe.execute_sharded(buffers).disassemble_into_single_device_arrays()]
