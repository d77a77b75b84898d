"""Device names as TF's placer assigns them on a single local host.

Stage: import. ``canonical_device`` turns a requested device ("", "/cpu:0", "/device:GPU:1",
"/job:localhost/replica:0/task:0/device:XLA_CPU:0", ...) into the full assigned name TF's placer
gives on a CPU-only local host: unspecified fields take ``/job:localhost/replica:0/task:0``, an empty
request goes to ``CPU:0``, and explicit device types and ids are kept.
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
