"""Which ops XLA accepts: TF's own XLA kernel registry, queried in-process.

Stage: clustering helper. TF registers a kernel per op on the ``XLA_CPU_JIT`` (and, in GPU builds,
``XLA_GPU_JIT``) compilation devices, with dtype constraints, once XLA is initialised. This module
reads them op by op for the first :data:`PER_OP_LIMIT` ops asked about
(:func:`tfxla_cluster.tf_compat.registered_xla_jit_kernels_for_op`), then whole
(:func:`tfxla_cluster.tf_compat.registered_xla_jit_kernels`; both initialise XLA without compiling
anything), and answers TF's ``FindKernelDef``
question — "does this NodeDef, with these attr values, match a registered XLA kernel?" — with TF's
answer. Nothing here is a hand-written op list.

The compilation devices (``DEVICE_REGISTRATIONS``) mirror ``XlaOpRegistry::DeviceRegistration`` for
the devices TF registers: CPU and GPU auto-cluster under the global-jit policies; the XLA_* devices
must always compile and relax the operation filter.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Mapping

from tensorflow.core.framework import kernel_def_pb2, node_def_pb2, op_def_pb2


@dataclass(frozen=True, slots=True)
class DeviceRegistration:
    """``XlaOpRegistry::DeviceRegistration``: the JIT device and how auto-clustering treats it."""

    compilation_device: str
    # "always" | "if_enabled_globally" | "if_explicitly_requested"; CPU's depends on a flag.
    autoclustering_policy: str
    cluster_resource_variable_ops_unsafely: bool = False
    cluster_stack_ops: bool = False
    cluster_tensor_array_ops: bool = False
    cluster_stateful_rng_ops: bool = False
    cluster_control_trigger: bool = False
    elide_assert_and_checknumerics: bool = False
    cluster_variant_ops: bool = False
    cluster_slow_ops: bool = False
    cluster_inaccurate_ops: bool = False


_XLA_DEVICE_FILTER = dict(cluster_resource_variable_ops_unsafely=True, cluster_stack_ops=False,
                          cluster_tensor_array_ops=True, cluster_stateful_rng_ops=True,
                          cluster_control_trigger=True, elide_assert_and_checknumerics=True,
                          cluster_variant_ops=True, cluster_slow_ops=True, cluster_inaccurate_ops=True)


def device_registration(device_type: str, cpu_global_jit: bool) -> DeviceRegistration | None:
    """TF's registration for ``device_type`` (xla_cpu_device.cc, xla_gpu_device.cc, xla_device.cc)."""
    if device_type == "CPU":
        policy = "if_enabled_globally" if cpu_global_jit else "if_explicitly_requested"
        return DeviceRegistration("XLA_CPU_JIT", policy)
    if device_type == "GPU":
        return DeviceRegistration("XLA_GPU_JIT", "if_enabled_globally")
    if device_type == "XLA_CPU":
        return DeviceRegistration("XLA_CPU_JIT", "always", **_XLA_DEVICE_FILTER)
    if device_type == "XLA_GPU":
        return DeviceRegistration("XLA_GPU_JIT", "always", **_XLA_DEVICE_FILTER)
    return None


# Where the kernel list comes from: None asks TF; the runtime's persistent cache (which this layer may not
# import) installs a source that answers from disk and asks TF, via the function it is given, on a miss.
_kernel_list_source: Callable[[Callable[[], list]], list] | None = None


def set_kernel_list_source(source: Callable[[Callable[[], list]], list] | None) -> None:
    """Install ``source(ask_tf) -> KernelDefs`` for the registry's question for TF's whole list (None: ask TF)."""
    global _kernel_list_source
    _kernel_list_source = source


#: Distinct ops whose kernels the registry asks TF for one by one before it reads TF's whole list instead:
#: one op costs ~0.3 ms (TF scans its registry), the list of every kernel (16k, 1k of them XLA's) ~25 ms, and
#: the persistent cache's copy of the list ~15 ms (its key lists every registered op). The zoo's small
#: functions ask about 11-27 ops (a CNN's inference, an RNN's loop bodies); past ~90 the list is cheaper.
PER_OP_LIMIT = 64


def _by_device(kdefs) -> dict[str, dict[str, list[kernel_def_pb2.KernelDef]]]:
    by_device: dict[str, dict[str, list[kernel_def_pb2.KernelDef]]] = {}
    for kdef in kdefs:
        by_device.setdefault(kdef.device_type, {}).setdefault(kdef.op, []).append(kdef)
    return by_device


@functools.lru_cache(maxsize=None)
def _registry() -> dict[str, dict[str, list[kernel_def_pb2.KernelDef]]]:
    """Every XLA JIT kernel, by device and op."""
    from tfxla_cluster.tf_compat import registered_xla_jit_kernels

    source = _kernel_list_source
    return _by_device(source(registered_xla_jit_kernels) if source is not None else registered_xla_jit_kernels())


_per_op: dict[str, dict[str, list[kernel_def_pb2.KernelDef]]] = {}   # op -> device -> its kernels


def _full_list_loaded() -> bool:
    return _registry.cache_info().currsize > 0


class _CpuJitKernels(Mapping):
    """XLA_CPU_JIT's op → KernelDefs, asking TF one op at a time until :data:`PER_OP_LIMIT` distinct ops
    (or a walk over every op), then answering from the whole list. The same answers as the whole list:
    TF's per-op query filters the same registry, in the same order."""

    DEVICE = "XLA_CPU_JIT"

    def __getitem__(self, op: str) -> list[kernel_def_pb2.KernelDef]:
        if not _full_list_loaded():
            known = _per_op.get(op)
            if known is None and len(_per_op) < PER_OP_LIMIT:
                from tfxla_cluster.tf_compat import registered_xla_jit_kernels_for_op

                known = _per_op[op] = {}
                for kdef in registered_xla_jit_kernels_for_op(op):
                    known.setdefault(kdef.device_type, []).append(kdef)
            if known is not None:
                if self.DEVICE not in known:
                    raise KeyError(op)
                return known[self.DEVICE]
        return _registry()[self.DEVICE][op]

    def __iter__(self):
        return iter(_registry()[self.DEVICE])

    def __len__(self) -> int:
        return len(_registry()[self.DEVICE])


_CPU_JIT_KERNELS = _CpuJitKernels()


def prefetch(ops) -> None:
    """Ask TF now for XLA_CPU_JIT's kernels of each op in ``ops`` not asked about yet (up to
    :data:`PER_OP_LIMIT` ops in all): the answers clustering reads later, asked earlier — while TF's grappler
    runs on another core (``runtime.pipeline``), where they cost the first call no time of its own. Each op
    costs ~0.35 ms (the first of a batch ~2 ms: TF's registry walk runs from cold caches)."""
    for op in ops:
        if _full_list_loaded() or len(_per_op) >= PER_OP_LIMIT:
            return
        if op not in _per_op:
            _CPU_JIT_KERNELS.get(op)   # records the answer (an op without XLA kernels too)


def jit_kernels(jit_device: str) -> Mapping[str, list[kernel_def_pb2.KernelDef]]:
    """op → KernelDefs registered on ``jit_device``. A GPU-less TF build has no XLA_GPU_JIT
    kernels; we then answer with XLA_CPU_JIT's (the two lists differ only in a few dtypes)."""
    if jit_device == _CpuJitKernels.DEVICE and not _full_list_loaded():
        return _CPU_JIT_KERNELS
    reg = _registry()
    return reg.get(jit_device) or reg.get("XLA_CPU_JIT", {})


def all_xla_ops() -> frozenset[str]:
    """``XlaOpRegistry::GetAllRegisteredOps()``: every op with an XLA kernel on some JIT device."""
    return frozenset(op for ops in _registry().values() for op in ops)


def _attr_types(node_def: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef | None, name: str) -> list[int] | None:
    if name in node_def.attr:
        value = node_def.attr[name]
    else:
        value = None
        for attr in (op_def.attr if op_def is not None else ()):
            if attr.name == name and attr.HasField("default_value"):
                value = attr.default_value
        if value is None:
            return None
    if value.HasField("list"):
        return list(value.list.type)
    return [value.type]


def find_kernel_def(jit_device: str, node_def: node_def_pb2.NodeDef,
                    op_def: op_def_pb2.OpDef | None) -> tuple[bool, str]:
    """TF's ``FindKernelDef``: (found, reason-if-not), the reason worded as TF's NotFound status."""
    kdefs = jit_kernels(jit_device).get(node_def.op)
    if not kdefs:
        return False, (f"No registered '{node_def.op}' OpKernel for {jit_device} devices compatible with node "
                       f"{{{{node {node_def.name}}}}}")
    label = node_def.attr["_kernel"].s.decode() if "_kernel" in node_def.attr else ""
    mismatch = ""
    for kdef in kdefs:
        if kdef.label != label:
            continue
        ok = True
        for constraint in kdef.constraint:
            types = _attr_types(node_def, op_def, constraint.name)
            allowed = set(constraint.allowed_values.list.type)
            if types is None or any(t not in allowed for t in types):
                ok = False
                mismatch = constraint.name
                break
        if ok:
            return True, ""
    from tensorflow.core.framework import types_pb2

    types = _attr_types(node_def, op_def, mismatch) or []
    shown = ", ".join(types_pb2.DataType.Name(t) for t in types)
    return False, (f"No registered '{node_def.op}' OpKernel for {jit_device} devices compatible with node "
                   f"{{{{node {node_def.name}}}}} ({mismatch}={shown or '?'} is not supported)")
