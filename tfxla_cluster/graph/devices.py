"""Device names as TF's placer assigns them on a single local host.

Stage: import. ``canonical_device`` turns a requested device ("", "/cpu:0", "/device:GPU:1",
"/job:localhost/replica:0/task:0/device:XLA_CPU:0", ...) into the full assigned name TF's placer
gives on a CPU-only local host: unspecified fields take ``/job:localhost/replica:0/task:0``, an empty
request goes to ``CPU:0``, and explicit device types and ids are kept. ``require_cpu_kernels`` is the
placer's other half here: a node no CPU kernel takes fails the function call.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from tfxla_cluster.errors import InvalidArgumentError

DEFAULT_CPU_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"


@dataclass(frozen=True, slots=True)
class DeviceName:
    """A parsed device name; ``None`` fields were not specified."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    type: str | None = None
    id: int | None = None

    def full(self) -> str:
        return (f"/job:{self.job or 'localhost'}/replica:{self.replica or 0}/task:{self.task or 0}"
                f"/device:{self.type or 'CPU'}:{self.id or 0}")


def parse_device(name: str) -> DeviceName:
    """Parse TF's device-name syntax (``DeviceNameUtils::ParseFullName``, legacy forms included)."""
    fields: dict = {}
    for part in filter(None, name.split("/")):
        key, _, rest = part.partition(":")
        key_l = key.lower()
        try:
            if key_l == "job":
                fields["job"] = rest
            elif key_l == "replica":
                fields["replica"] = int(rest)
            elif key_l == "task":
                fields["task"] = int(rest)
            elif key_l == "device":
                dtype, _, did = rest.partition(":")
                fields["type"] = dtype.upper() if dtype.lower() in ("cpu", "gpu") else dtype
                fields["id"] = int(did) if did not in ("", "*") else None
            elif key_l in ("cpu", "gpu"):  # legacy "/cpu:0"
                fields["type"] = key_l.upper()
                fields["id"] = int(rest) if rest not in ("", "*") else None
            else:
                raise ValueError(part)
        except ValueError:
            raise InvalidArgumentError(f"Malformed device specification '{name}'") from None
    return DeviceName(**fields)


@functools.lru_cache(maxsize=256)   # a graph names a handful of devices, once per node (a malformed one raises)
def canonical_device(requested: str) -> str:
    """The device TF's placer assigns for ``requested`` on a local CPU host."""
    if not requested:
        return DEFAULT_CPU_DEVICE
    return parse_device(requested).full()


def device_type(name: str) -> str:
    """``"CPU"``, ``"GPU"``, ``"XLA_CPU"``, ... of a (full or partial) device name; "" if none."""
    if not name:
        return ""
    return parse_device(name).type or ""


# ------------------------------------------------------------------------------------------ placement
def require_cpu_kernels(graph_def) -> None:
    """TF's placer on a function's runtime graph (after its PRE_PLACEMENT lowering and inlining, before
    grappler): every node needs a kernel on the host's one device, the CPU (``FindKernelDef``, DEFAULT
    kernels included), or the call fails with TF's InvalidArgumentError — an unused node and one grappler
    would fold included: an f16/bf16 ``Rint`` or a complex ``FloorDiv`` (only XLA's JIT devices take them) fails
    an auto-clustered function as a plain one. Calls of library functions need no kernel of their own."""
    from tfxla_cluster.tf_compat import placeable_on_cpu

    functions = {f.signature.name for f in graph_def.library.function}
    for nd in graph_def.node:
        if nd.op not in functions and nd.op != "SymbolicGradient" and not placeable_on_cpu(nd):
            raise InvalidArgumentError(_no_kernel_message(nd))


def _no_kernel_message(nd) -> str:
    """TF's placer's message (``errors::NotFound``'s text as the function call raises it)."""
    from tfxla_cluster.tf_compat import kernel_defs_for_op

    attrs = ", ".join(f"{k}={_summarize(nd.attr[k])}" for k in sorted(nd.attr))
    kernels = "".join(
        f"  device='{k.device_type}'" + (f"; label='{k.label}'" if k.label else "")
        + "".join(f"; {c.name} in {_summarize(c.allowed_values)}" for c in k.constraint) + "\n"
        for k in kernel_defs_for_op(nd.op)) or "  <no registered kernels>\n"
    return (f"No OpKernel was registered to support Op '{nd.op}' used by {{{{node {nd.name}}}}} with these "
            f"attrs: [{attrs}]\nRegistered devices: [CPU]\nRegistered kernels:\n{kernels}")


def _summarize(value) -> str:
    """TF's ``SummarizeAttrValue`` for the kinds a kernel constraint or a placement error shows."""
    from tensorflow.core.framework import types_pb2

    def one(kind: str, v) -> str:
        if kind == "type":
            return types_pb2.DataType.Name(v)
        if kind == "b":
            return "true" if v else "false"
        if kind == "s":
            return '"' + v.decode("utf-8", "backslashreplace") + '"'
        if kind == "shape":
            return "<unknown>" if v.unknown_rank else "[" + ",".join(
                "?" if d.size < 0 else str(d.size) for d in v.dim) + "]"
        if kind == "func":
            return v.name
        return str(v)

    kind = value.WhichOneof("value")
    if kind == "list":
        for field in ("s", "i", "f", "b", "type", "shape", "func"):
            items = getattr(value.list, field)
            if items:
                return "[" + ", ".join(one(field, v) for v in items) + "]"
        return "[]"
    return one(kind, getattr(value, kind)) if kind else "<Unknown AttrValue type>"
