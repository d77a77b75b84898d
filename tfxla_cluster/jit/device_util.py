"""Devices of clusters: TF's ``DeviceInfoCache``, ``DeviceSet`` and ``PickDeviceForXla``.

Stage: clustering. Two clusters may merge only if one device can run the merged cluster: TF's rules
(device_util.cc, ``allow_mixing_unknown_and_cpu=false``) allow at most one GPU, at most one CPU (or
names that specify one another), at most one "unknown" device (XLA_CPU, XLA_GPU, TPU, ...), never an
unknown device together with a GPU or a CPU. The chosen device is the GPU, else the unknown device,
else the CPU. Device ids are small ints handed out in first-seen order, as in TF, so set iteration
order matches TF's bitset order.
"""
from __future__ import annotations

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.graph.devices import DeviceName, parse_device


class DeviceInfoCache:
    """Interns device names as ids and caches their parsed form and type."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._parsed: list[DeviceName | None] = []

    def id_for(self, name: str) -> int:
        did = self._ids.get(name)
        if did is None:
            did = len(self.names)
            self._ids[name] = did
            self.names.append(name)
            try:
                self._parsed.append(parse_device(name))
            except InvalidArgumentError:
                self._parsed.append(None)
        return did

    def parsed(self, did: int) -> DeviceName | None:
        return self._parsed[did]

    def device_type(self, did: int) -> str:
        p = self._parsed[did]
        return (p.type or "") if p else ""

    def is_cpu(self, did: int) -> bool:
        return self.device_type(did) == "CPU"

    def is_gpu(self, did: int) -> bool:
        return self.device_type(did) == "GPU"


def _is_specification(a: DeviceName, b: DeviceName) -> bool:
    """``DeviceNameUtils::IsSpecification(a, b)``: every field ``a`` sets, ``b`` sets equally."""
    for field in ("job", "replica", "task", "type", "id"):
        va = getattr(a, field)
        if va is not None and getattr(b, field) != va:
            return False
    return True


def pick_device_for_xla(cache: DeviceInfoCache, devices: frozenset[int] | set[int]) -> tuple[int | None, str]:
    """The device a cluster over ``devices`` would run on, or (None, why not)."""
    gpu = cpu = unknown = None
    for did in sorted(devices):  # TF's DeviceSet iterates its bitset in id order
        if cache.is_gpu(did) or cache.is_cpu(did):
            current = gpu if cache.is_gpu(did) else cpu
            if current is not None and current != did:
                a, b = cache.parsed(did), cache.parsed(current)
                if a is None or b is None:
                    return None, "unparsable device names"
                if _is_specification(a, b):
                    pass
                elif _is_specification(b, a):
                    current = did
                else:
                    kind = "GPU" if cache.is_gpu(did) else "CPU"
                    return None, (f"Multiple {kind} devices {cache.names[current]} and {cache.names[did]}")
            elif current is None:
                current = did
            if cache.is_gpu(did):
                gpu = current
            else:
                cpu = current
        else:
            if unknown is not None and unknown != did:
                return None, f"Multiple unknown devices {cache.names[unknown]} and {cache.names[did]}"
            unknown = did
    if unknown is not None and gpu is not None:
        return None, f"Found both unknown and GPU devices: {cache.names[unknown]}, {cache.names[gpu]}"
    if unknown is not None and cpu is not None:
        return None, f"Found both unknown and CPU devices: {cache.names[unknown]}, {cache.names[cpu]}"
    for choice in (gpu, unknown, cpu):
        if choice is not None:
            return choice, ""
    return None, "Empty device set!"
