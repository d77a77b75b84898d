"""Compilation cache: in-memory per cluster and signature, with TF's megamorphic rule, compile-cause
logging, and a persistent on-disk layer (TF's DeviceCompiler + XlaCompilationCache roles).

Stage: runtime (the launcher's compile step keys and stores its executables here; codegen knows
nothing of it).

    cache = CompilationCache.from_flags()
    result = cache.get_or_compile("cluster_0", Signature.of(args), build_module)
    if result.executable is None:     # megamorphic: run the cluster with TF instead
        ...
    outputs = result.run(*args)       # counts the execution

Keys. In memory: (cluster fingerprint, signature) where the signature is the argument shapes and
dtypes plus the values of compile-time-constant arguments. On disk: a digest of the LLVM IR the module
lowers to (a deterministic function of the optimised HLO, constants included, and the codegen options;
emitting it is needed anyway to rebuild the buffer plan), the ``CodegenOptions``, the JIT engine key
(target, CPU name and features, opt level, pass pipeline, LLVM and llvmlite versions) and the
tfxla_cluster version. A hit skips LLVM (optimisation and machine code), most of a cold compile.

A second kind of entry is keyed *before lowering* (:meth:`CompilationCache.cluster_key`): the cluster's
member NodeDefs (deterministic serialisation, topological order), its inputs' producers and the library
functions the members call, its input and output lists, the arguments' dtypes and shapes and the values of
its compile-time-constant inputs, the flags and environment switches, the codegen options and JIT engine
key, and digests of this package's source and of TF's and numpy's versions. It holds what lowering told
the launcher (inputs, parameter and output mapping), the executable's buffer plan and the object code
(:class:`ClusterCode`), so a hit in a second process skips lowering, the HLO passes, IR emission and LLVM.
Its payload is a pickle: the cache directory is trusted as the object code loaded from it is.

Small entries serve the steps before: a function graph after TF's runtime rewrites (keyed by the graph
before them, :func:`graph_key`, and by what the traced function's conversion to that graph reads — its
FunctionDef, library, graph versions and variables' handle data —, :func:`function_graph_key`, so a hit
skips the conversion too); the auto-clustering of a graph (keyed by the graph the pass sees, the
flags, TF's version and build, the session's JIT setting and the fuel left when the graph could spend it,
:func:`clustering_key`), replayed on the process's cluster numbering and fuel as the pass would move them
(:func:`clustered`); and TF's XLA JIT kernel list that clustering reads (keyed by TF's version and build and
the names of the ops registered in the process, :func:`kernels_key`), which spares every later process the
initialisation of XLA's kernel registry.

Where. ``--tf_xla_persistent_cache_directory`` when set (TF's flag, shared with TF's own entries);
else, unlike TF, a cache on by default in the user's cache directory (:func:`default_directory`:
``$TFXLA_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/tfxla_cluster/compile`` or
``~/.cache/tfxla_cluster/compile``); ``TFXLA_COMPILE_CACHE=off`` turns that default off (the tests do).

Rules:
- each (cluster, signature) compiles once, even when many threads ask at the same time;
- every compile is logged at INFO with its cause: the first signature of the cluster, or what changed
  (which argument, which dim or dtype) against the most recent signature;
- TF's megamorphic rule: a cluster compiled more than 10 times with fewer than 50 executions per
  compile stops compiling new signatures — a warning is logged once and the caller must fall back;
- persistent entries are written atomically (temp file + rename), never in read-only mode, and never
  rewritten when present; a corrupt entry (bad header, object code not matching its digest, header not
  matching the key or the IR) is ignored with a warning naming it corrupt, counted in the compile
  profile, and recompiled (and rewritten). An entry stores the object code and the digest of the IR it
  came from.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import pickle
import re
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from tfxla_cluster import compile_profile, cpu_topology
from tfxla_cluster._gc import gc_paused
from tfxla_cluster.codegen.options import ENTRY_NAME, CodegenOptions
from tfxla_cluster.runtime.ahead_job import deferred_while_ahead
from tfxla_cluster.tfops import xla_kernels

# The code generator (LLVM's bindings, the engine, the executable) is imported where code is compiled or
# loaded, not here: a first call keys and looks up its graph and clustering before grappler runs, and the
# ~45 ms of those imports then go to the thread that imports the compiler while grappler runs
# (``pipeline._import_compiler``).
if TYPE_CHECKING:
    from tfxla_cluster.codegen.engine import CodeLibrary, JitEngine
    from tfxla_cluster.codegen.executable import Executable, ExecutableLayout

# The logger keeps the name it had when the cache lived in codegen/: users' logging configuration
# and the compile-cause messages they filter on stay the same.
log = logging.getLogger("tfxla_cluster.codegen")

MAX_COMPILES_BEFORE_MEGAMORPHIC = 10     # TF's kMaxNumberOfCompiles... ("more than 10 compiles")
MIN_EXECUTIONS_PER_COMPILE = 50          # ...with fewer than 50 executions per compile
# TF's kDefaultCompilationThreshold (device_compilation_profiler.cc): with lazy compilation, a signature other
# than the one of a cluster's first execution compiles at its second request; the first runs on TF's kernels.
LAZY_COMPILATION_THRESHOLD = 2
FORMAT_VERSION = 2   # 2: IR digests without the ModuleID line; entries keyed before lowering
_MAGIC = "tfxla-cluster-executable"
CLUSTER_KIND = "cluster"   # header "kind" of an entry keyed before lowering (ClusterCode payload)
GRAPH_KIND = "graph"       # header "kind" of a function graph after TF's runtime rewrites (GraphDef payload)
KERNELS_KIND = "xla-kernels"  # header "kind" of TF's XLA JIT kernel list (KernelList payload)
CLUSTERING_KIND = "clustering"  # header "kind" of an auto-clustering result (JSON payload)


# ---------------------------------------------------------------------- signatures
@dataclass(frozen=True)
class ArgSpec:
    dtype: str
    shape: tuple[int, ...]
    value_digest: str | None = None   # compile-time-constant arguments are specialised on their value

    def __str__(self) -> str:
        text = f"{self.dtype}[{','.join(map(str, self.shape))}]"
        return text + (f"={self.value_digest[:8]}" if self.value_digest else "")


@dataclass(frozen=True)
class Signature:
    """Argument shapes and dtypes (and values of compile-time constants) of one cluster call."""

    args: tuple[ArgSpec, ...]

    @staticmethod
    def of(args, constant_args=()) -> "Signature":
        specs = []
        for k, a in enumerate(args):
            arr = np.asarray(a)
            digest = None
            if k in constant_args:
                digest = hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
            specs.append(ArgSpec(arr.dtype.name, tuple(arr.shape), digest))
        return Signature(tuple(specs))

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.args)) + ")"

    def change_from(self, previous: "Signature") -> str:
        """What differs from ``previous``, in words (the compile cause)."""
        if len(self.args) != len(previous.args):
            return f"number of arguments changed {len(previous.args)} -> {len(self.args)}"
        changes = []
        for k, (a, p) in enumerate(zip(self.args, previous.args)):
            if a.dtype != p.dtype:
                changes.append(f"argument {k} dtype changed {p.dtype} -> {a.dtype}")
            if len(a.shape) != len(p.shape):
                changes.append(f"argument {k} rank changed {len(p.shape)} -> {len(a.shape)}")
            else:
                for d, (x, y) in enumerate(zip(a.shape, p.shape)):
                    if x != y:
                        changes.append(f"argument {k} dim {d} changed {y} -> {x}")
            if a.value_digest != p.value_digest:
                changes.append(f"value of compile-time constant argument {k} changed")
        return "; ".join(changes) or "same signature"


# ---------------------------------------------------------------------- persistent layer
@dataclass
class PersistentCache:
    """Executables on disk under ``directory`` (TF's --tf_xla_persistent_cache_* flags)."""

    directory: Path
    prefix: str = "xla_compile_cache"
    read_only: bool = False

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)

    def path_for(self, key: str) -> Path:
        return self.directory / f"{self.prefix}__{key}.tfxla"

    def load(self, key: str, ir_digest: str, engine: JitEngine, name: str,
             exports: tuple[str, ...] = (ENTRY_NAME,)) -> CodeLibrary | None:
        """The code stored under ``key``, exporting ``exports`` (None when absent, or corrupt: then with a
        warning)."""
        path = self.path_for(key)
        try:
            header, obj = read_entry(path)
        except FileNotFoundError:
            return None
        except (ValueError, OSError) as e:
            return self._corrupt(path, _why(e))
        if header.get("key") != key:
            return self._corrupt(path, "its key does not match its file name")
        if header.get("ir_sha256") != ir_digest:
            return self._corrupt(path, "it was compiled from other IR than its key says")
        shared = _shared_symbols(header)
        if shared is None:
            return self._corrupt(path, "its shared-kernel lists are not lists of names")
        from tfxla_cluster.codegen.engine import MissingSharedKernels
        try:
            lib = engine.load_object(obj, exports, name=name, imports=shared[0], provides=shared[1])
        except MissingSharedKernels as e:   # a valid entry this process cannot link yet: compile instead
            log.info("Not loading %s from the persistent cache: %s", name, e)
            return None
        except Exception as e:  # LLVM refusing the object file: the entry is unusable, recompile
            return self._corrupt(path, f"LLVM could not load its object code: {e}")
        log.info("Loaded executable for %s from the persistent cache (%s)", name, path.name)
        return lib

    @staticmethod
    def _corrupt(path: Path, why: str) -> None:
        log.warning("Ignoring persistent cache entry %s (corrupt: %s); recompiling", path, why)
        compile_profile.note("persistent-cache corrupt")
        return None

    def store(self, key: str, ir_digest: str, library: CodeLibrary, name: str) -> None:
        """Write the entry for ``key`` unless read-only or already there (another process may have written
        it: same key, same code)."""
        if self.read_only:
            return
        path = self.path_for(key)
        if path.is_file() and not _is_corrupt(path):
            return
        self._write(path, library.object_code, {"key": key, "module": name, "ir_sha256": ir_digest,
                                                "imports": list(library.imports), "provides": list(library.provides)})

    def load_cluster(self, key: str) -> "ClusterCode | None":
        """The :class:`ClusterCode` stored under cluster key ``key`` (None when absent, or corrupt: then with
        a warning, counted in the compile profile)."""
        path = self.path_for(key)
        payload = self._payload_of_kind(path, key, CLUSTER_KIND)
        if payload is None:
            return None
        try:
            code = pickle.loads(payload)
        except Exception as e:  # noqa: BLE001 - any unpickling failure: the entry is unusable
            return self._corrupt(path, f"its payload does not unpickle: {type(e).__name__}: {e}")
        if not isinstance(code, ClusterCode):
            return self._corrupt(path, f"its payload is a {type(code).__name__}, not a cluster entry")
        return code

    def _payload_of_kind(self, path: Path, key: str, kind: str) -> bytes | None:
        """The payload of the entry at ``path`` if its header names ``key`` and ``kind``; None when absent,
        or corrupt (then with a warning, counted in the compile profile)."""
        try:
            header, payload = read_entry(path)
        except FileNotFoundError:
            return None
        except (ValueError, OSError) as e:
            return self._corrupt(path, _why(e))
        if header.get("key") != key or header.get("kind") != kind:
            return self._corrupt(path, "its key or kind does not match its file name")
        return payload

    def store_cluster(self, key: str, code: "ClusterCode", name: str) -> None:
        """Write the cluster entry ``key`` unless read-only or already there."""
        if self.read_only:
            return
        path = self.path_for(key)
        if path.is_file() and not _is_corrupt(path):
            return
        self._write(path, pickle.dumps(code, protocol=pickle.HIGHEST_PROTOCOL),
                    {"key": key, "module": name, "kind": CLUSTER_KIND})

    def load_graph(self, key: str, names: "FunctionNames | None" = None):
        """The GraphDef stored under graph key ``key`` (None when absent, or corrupt: then with a warning),
        its canonical function names given back this process's (``names``)."""
        from tensorflow.core.framework import graph_pb2

        path = self.path_for(key)
        payload = self._payload_of_kind(path, key, GRAPH_KIND)
        if payload is None:
            return None
        gd = graph_pb2.GraphDef()
        try:
            gd.ParseFromString(names.local(payload) if names is not None else payload)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
            return self._corrupt(path, f"its GraphDef does not parse: {e}")
        return gd

    def store_graph(self, key: str, graph_def, name: str, names: "FunctionNames | None" = None) -> None:
        """Write the graph entry ``key`` unless read-only or already there (with the canonical function names
        of ``names``)."""
        if self.read_only:
            return
        path = self.path_for(key)
        if path.is_file() and not _is_corrupt(path):
            return
        payload = graph_def.SerializeToString(deterministic=True)
        self._write(path, names.canonical(payload) if names is not None else payload,
                    {"key": key, "module": name, "kind": GRAPH_KIND})

    def load_clustering(self, key: str, node_names) -> "ClusteringEntry | None":
        """The :class:`ClusteringEntry` stored under clustering key ``key`` (None when absent, or corrupt:
        then with a warning, counted in the compile profile). ``node_names`` (a set) are the graph's: an
        entry naming another node is corrupt."""
        path = self.path_for(key)
        payload = self._payload_of_kind(path, key, CLUSTERING_KIND)
        if payload is None:
            return None
        try:
            entry = ClusteringEntry.from_json(payload)
        except (ValueError, TypeError, KeyError) as e:
            return self._corrupt(path, f"its clustering does not parse: {e}")
        unknown = next((m for members in entry.clusters for m in members if m not in node_names), None)
        if unknown is not None:
            return self._corrupt(path, f"its clustering names node {unknown!r}, which the graph does not have")
        return entry

    def store_clustering(self, key: str, entry: "ClusteringEntry", name: str, *, replace: bool = False) -> None:
        """Write the clustering entry ``key`` unless read-only or already there (``replace``: an entry
        there was found corrupt)."""
        if self.read_only:
            return
        path = self.path_for(key)
        if not replace and path.is_file() and not _is_corrupt(path):
            return
        self._write(path, entry.to_json(), {"key": key, "module": name, "kind": CLUSTERING_KIND})

    def load_kernels(self, key: str) -> list | None:
        """The KernelDefs stored under kernel-list key ``key`` (None when absent, or corrupt: then with a
        warning)."""
        from tensorflow.core.framework import kernel_def_pb2

        path = self.path_for(key)
        payload = self._payload_of_kind(path, key, KERNELS_KIND)
        if payload is None:
            return None
        try:
            return list(kernel_def_pb2.KernelList.FromString(payload).kernel)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
            return self._corrupt(path, f"its KernelList does not parse: {e}")

    def store_kernels(self, key: str, kernel_defs: list) -> None:
        """Write the kernel-list entry ``key`` unless read-only or already there."""
        from tensorflow.core.framework import kernel_def_pb2

        if self.read_only:
            return
        path = self.path_for(key)
        if path.is_file() and not _is_corrupt(path):
            return
        payload = kernel_def_pb2.KernelList(kernel=kernel_defs).SerializeToString(deterministic=True)
        self._write(path, payload, {"key": key, "module": "xla_jit_kernels", "kind": KERNELS_KIND})

    def _write(self, path: Path, payload: bytes, fields: dict) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        header = {"magic": _MAGIC, "format": FORMAT_VERSION, **fields,
                  "object_sha256": hashlib.sha256(payload).hexdigest(), "object_bytes": len(payload)}
        data = json.dumps(header, sort_keys=True).encode() + b"\n" + payload
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".tfxla")
        try:
            # No fsync: an entry cut short by a crash fails its digest check and is recompiled.
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # atomic: readers see the old file or the new one
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def entries(self) -> list[Path]:
        return sorted(self.directory.glob(f"{self.prefix}__*.tfxla")) if self.directory.exists() else []


def read_entry(path: Path) -> tuple[dict, bytes]:
    """(header, object code) of a cache file; ``ValueError`` when it is not a valid entry."""
    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # reading a FIFO would block (a directory: below)
        raise ValueError("not a regular file")
    data = Path(path).read_bytes()
    head, sep, obj = data.partition(b"\n")
    if not sep:
        raise ValueError("no header")
    try:
        header = json.loads(head)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, bytes that are not UTF-8, nesting too deep
        raise ValueError(f"unreadable header: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"header is JSON but not an object ({type(header).__name__})")
    if header.get("magic") != _MAGIC or header.get("format") != FORMAT_VERSION:
        raise ValueError("not a tfxla_cluster executable of this format")
    if len(obj) != header.get("object_bytes") or hashlib.sha256(obj).hexdigest() != header.get("object_sha256"):
        raise ValueError("object code is truncated or corrupt")
    return header, obj


def _is_corrupt(path: Path) -> bool:
    try:
        read_entry(path)
        return False
    except (ValueError, OSError):
        return True


def default_directory(environ=None) -> Path | None:
    """The persistent cache's directory when ``--tf_xla_persistent_cache_directory`` is not set: the
    ``TFXLA_COMPILE_CACHE`` environment switch (a directory, or 0/off/false/no for none), else
    ``$XDG_CACHE_HOME/tfxla_cluster/compile``, else ``~/.cache/tfxla_cluster/compile``."""
    from tfxla_cluster.flags import env_switch

    value = (env_switch("TFXLA_COMPILE_CACHE", environ) or "").strip()
    if value.lower() in ("0", "off", "false", "no", "none"):
        return None
    if value:
        return Path(value).expanduser()
    base = env_switch("XDG_CACHE_HOME", environ) or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfxla_cluster" / "compile"


def tf_entries(directory, prefix: str = "xla_compile_cache") -> list[Path]:
    """TF's own entries in the same directory: real XLA (a ``tf.function(jit_compile=True)`` run with
    the same ``--tf_xla_persistent_cache_directory``) writes one file per compiled cluster, named by TF's
    ``XlaSerializedCacheKeyToFileName``: ``<prefix>__<signature fp>__<cluster fp>__<device>[__pjrt].pb``
    (no ``<prefix>__`` when the prefix is empty)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    head = re.escape(prefix) + "__" if prefix else ""
    pattern = re.compile(rf"{head}\d+__\d+__[A-Z0-9_]+(?:__pjrt)?\.pb")
    return sorted(p for p in directory.iterdir() if pattern.fullmatch(p.name) and p.is_file())


def list_entries(directory, prefix: str = "xla_compile_cache") -> list[dict]:
    """One dict per entry: file, module, bytes, and ``ok``/``error`` from reading it (``cache list``);
    ``owner`` is "tfxla_cluster", or "tf" for TF's own entries (listed, not checked: their format,
    a serialized XLA executable, is TF's)."""
    out = []
    for path in PersistentCache(Path(directory), prefix).entries():
        try:
            header, obj = read_entry(path)
            out.append({"file": path.name, "module": str(header.get("module", "?")), "bytes": len(obj),
                        "ok": True, "owner": "tfxla_cluster"})
        except (ValueError, OSError) as e:
            out.append({"file": path.name, "module": "?", "bytes": _size(path), "ok": False,
                        "error": _why(e), "owner": "tfxla_cluster"})
    for path in tf_entries(directory, prefix):
        device = path.stem.split("__")[-2 if path.stem.endswith("__pjrt") else -1]
        out.append({"file": path.name, "module": f"(TF's own XLA executable, {device})",
                    "bytes": _size(path), "ok": True, "owner": "tf"})
    return out


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _why(e: Exception) -> str:
    """A corrupt entry's reason in one line (OSErrors without the repeated path)."""
    if isinstance(e, IsADirectoryError):
        return "is a directory"
    if isinstance(e, OSError):
        return e.strerror or type(e).__name__
    return str(e)


def clear_entries(directory, prefix: str = "xla_compile_cache") -> int:
    """Delete every entry (``cache clear``), ours and TF's own; returns how many were removed. An entry that
    cannot be a cache file (a directory) is left alone and reported by :func:`unremovable_entries`."""
    n = 0
    for path in [*PersistentCache(Path(directory), prefix).entries(), *tf_entries(directory, prefix)]:
        if path.is_dir() and not path.is_symlink():
            continue
        path.unlink()
        n += 1
    return n


def unremovable_entries(directory, prefix: str = "xla_compile_cache") -> list[Path]:
    """Entries ``cache clear`` leaves: directories named like cache files (corrupt entries)."""
    return [p for p in PersistentCache(Path(directory), prefix).entries() if p.is_dir() and not p.is_symlink()]


def persistent_cache(flags) -> PersistentCache | None:
    """The persistent layer ``flags`` ask for: ``--tf_xla_persistent_cache_directory``, else the default
    directory (:func:`default_directory`); None when off or when the device types leave out the CPU."""
    directory = flags.tf_xla_persistent_cache_directory or default_directory()
    device_types = [d.strip().upper() for d in str(flags.tf_xla_persistent_cache_device_types).split(",")
                    if d.strip()]
    if directory and (not device_types or "CPU" in device_types):
        return PersistentCache(Path(directory), flags.tf_xla_persistent_cache_prefix,
                               bool(flags.tf_xla_persistent_cache_read_only))
    return None


# ---------------------------------------------------------------------- the cache
@dataclass
class ClusterStats:
    compiles: int = 0
    executions: int = 0
    megamorphic: bool = False
    last_signature: Signature | None = None
    signatures: list[Signature] = field(default_factory=list)
    requests: dict[Signature, int] = field(default_factory=dict)   # requests per signature (TF's request_count)
    lazy_fallbacks: int = 0                        # requests that ran on TF's kernels for the threshold


@dataclass
class CacheResult:
    """What ``get_or_compile`` hands back. ``executable`` is None when the cluster must fall back."""

    executable: Executable | None
    compiled: bool
    cause: str
    _cache: "CompilationCache | None" = None
    _cluster: str = ""

    @property
    def fell_back(self) -> bool:
        return self.executable is None

    def run(self, *args):
        self._cache.record_execution(self._cluster)
        return self.executable(*args)


class CompilationCache:
    """Executables per (cluster, signature); thread-safe; each key compiles exactly once."""

    def __init__(self, options: CodegenOptions | None = None, persistent: PersistentCache | None = None,
                 engine: JitEngine | None = None, version: str | None = None) -> None:
        from tfxla_cluster.codegen import native_runtime
        from tfxla_cluster.codegen.engine import get_engine

        # (registered by the first cache: every compile and load of a launch goes through one, and the pool
        # module is compiled at the first of them)
        native_runtime.set_pool_store_factory(_native_pool_store)
        self.options = options or CodegenOptions.from_flags()
        self.engine = engine or get_engine(self.options.opt_level, self.options.cpu_target)
        self.persistent = persistent
        if version is None:
            from tfxla_cluster import __version__ as version
        self.version = version
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, Signature], Executable] = {}
        self._key_locks: dict[tuple[str, Signature], threading.Lock] = {}
        self.clusters: dict[str, ClusterStats] = {}
        self.compiles = 0

    @staticmethod
    def from_flags(flags=None, **option_overrides) -> "CompilationCache":
        if flags is None:
            from tfxla_cluster.flags import Flags
            flags = Flags.from_env()
        options = CodegenOptions.from_flags(flags, **option_overrides)
        return CompilationCache(options, persistent_cache(flags))

    def persistent_key(self, ir_text: str) -> str:
        """The entry name of the code for ``ir_text`` (its ``ModuleID`` comment line aside: clusters that
        lower to the same IR share one entry)."""
        from tfxla_cluster.codegen.engine import without_module_id

        h = hashlib.sha256()
        for part in (without_module_id(ir_text), self.options.key(), self.engine.key, self.version,
                     str(FORMAT_VERSION)):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def record_execution(self, cluster: str) -> None:
        with self._lock:
            self.clusters.setdefault(cluster, ClusterStats()).executions += 1

    def get_or_compile(self, cluster: str, signature: Signature, build: Callable[[], object], *,
                       strict: bool = False) -> CacheResult:
        """The executable of ``cluster`` for ``signature``; ``build()`` makes the (optimised) HloModule,
        called only on a miss. Misses go through the persistent layer."""
        return self.get_or_create(cluster, signature, lambda: self.compile(build()), strict=strict)

    def get_or_create(self, cluster: str, signature: Signature, create: Callable[[], object], *,
                      strict: bool = False, lazy: bool = False) -> CacheResult:
        """The cache's rules around any compile step: ``create()`` returns the entry stored for
        (``cluster``, ``signature``) — an :class:`Executable`, or a runtime's own record holding one
        (it should have ``compile_seconds``; an ``origin`` attribute names where it came from).

        ``strict`` (must-compile clusters, TF's ``kStrict``) never falls back as megamorphic. An
        exception from ``create`` propagates and leaves no entry (the caller decides on fallback).

        ``lazy`` (TF's ``kLazy``: auto-clustering with ``--tf_xla_enable_lazy_compilation``, the default): the
        cluster's first request always compiles; after that, a new signature compiles only at its
        ``LAZY_COMPILATION_THRESHOLD``-th request, and earlier ones get no executable (cause "lazy": the
        caller runs TF's kernels this time), as TF's DeviceCompilationProfiler decides.
        """
        key = (cluster, signature)
        with self._lock:
            exe = self._entries.get(key)
            if exe is not None:
                return CacheResult(exe, False, "cache hit", self, cluster)
            stats = self.clusters.setdefault(cluster, ClusterStats())
            if stats.megamorphic and not strict:
                return CacheResult(None, False, "megamorphic", self, cluster)
            if not strict and stats.compiles > MAX_COMPILES_BEFORE_MEGAMORPHIC and \
                    stats.executions < MIN_EXECUTIONS_PER_COMPILE * stats.compiles:
                stats.megamorphic = True
                log.warning("Cluster %s is megamorphic: %d compiles and only %d executions (TF's rule: more "
                            "than %d compiles with fewer than %d executions each); it falls back to TF from "
                            "now on", cluster, stats.compiles, stats.executions,
                            MAX_COMPILES_BEFORE_MEGAMORPHIC, MIN_EXECUTIONS_PER_COMPILE)
                return CacheResult(None, False, "megamorphic", self, cluster)
            first_request = not stats.requests and not stats.compiles
            stats.requests[signature] = stats.requests.get(signature, 0) + 1
            if lazy and not strict and not first_request and \
                    stats.requests[signature] < LAZY_COMPILATION_THRESHOLD:
                stats.lazy_fallbacks += 1
                log.info("Not compiling cluster %s for %s yet: lazy compilation compiles a new signature at its "
                         "request %d (this is request %d); TF's kernels run it", cluster, signature,
                         LAZY_COMPILATION_THRESHOLD, stats.requests[signature])
                return CacheResult(None, False, "lazy", self, cluster)
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one compile per key; late arrivals wait and then hit
            with self._lock:
                exe = self._entries.get(key)
                if exe is not None:
                    return CacheResult(exe, False, "cache hit", self, cluster)
                stats = self.clusters[cluster]
                cause = ("first signature " + str(signature)) if stats.last_signature is None else \
                    f"new signature {signature}: {signature.change_from(stats.last_signature)}"
            with gc_paused():  # a full collection would walk TF's objects for nothing (see _gc)
                exe = create()
            origin = getattr(exe, "origin", "compiled")
            with self._lock:
                self._entries[key] = exe
                stats.compiles += 1
                stats.last_signature = signature
                stats.signatures.append(signature)
                self.compiles += origin == "compiled"
            log.info("Compiled cluster %s (%s, %.1f ms): %s", cluster, origin,
                     getattr(exe, "compile_seconds", 0.0) * 1e3, cause)
            return CacheResult(exe, True, cause, self, cluster)

    def rekey(self, cluster: str, old: Signature, new: Signature) -> None:
        """Move an entry to a new signature: a runtime learns which arguments are compile-time
        constants (and so part of the signature) only when the first compile has lowered the cluster."""
        with self._lock:
            entry = self._entries.pop((cluster, old), None)
            if entry is None:
                return
            self._entries[(cluster, new)] = entry
            stats = self.clusters[cluster]
            stats.signatures = [new if s == old else s for s in stats.signatures]
            if stats.last_signature == old:
                stats.last_signature = new

    def entries(self, cluster: str) -> dict[Signature, object]:
        """The entries of one cluster, by signature, in compile order."""
        with self._lock:
            return {sig: e for (c, sig), e in self._entries.items() if c == cluster}

    def cluster_key(self, boundary, arrays, *, flags=None, must_compile: bool = False) -> str | None:
        """The persistent key of ``boundary`` (a cluster) called on ``arrays``, keyed before lowering (see
        the module docstring); None without a persistent layer."""
        if self.persistent is None:
            return None
        return cluster_key(boundary, arrays, engine_key=self.engine.key, options_key=self.options.key(),
                           version=self.version, flags=flags, must_compile=must_compile)

    def load_cluster(self, key: str | None, name: str, ir_source: Callable[[], str]
                     ) -> tuple[ClusterCode, Executable] | None:
        """The stored signature under cluster key ``key`` and its executable (named ``name``, origin
        "persistent cache"; ``ir_source`` emits its LLVM IR again if ever asked for), or None."""
        if key is None or self.persistent is None:
            return None
        code = self.persistent.load_cluster(key)
        if code is None:
            return None
        from tfxla_cluster.codegen import native_runtime
        from tfxla_cluster.codegen.engine import MissingSharedKernels
        from tfxla_cluster.codegen.executable import Executable

        native_runtime.ensure_registered()   # the runtime symbols the code calls, before it is linked
        try:
            library = self.engine.load_object(code.object_code, [ENTRY_NAME], name=name,
                                              imports=code.imports, provides=code.provides)
            layout = dataclasses.replace(code.layout, name=name)
            exe = Executable(layout, self.options, library, ir_source, code_store=_PersistentStore(self),
                             engine=self.engine)
        except MissingSharedKernels as e:   # a valid entry this process cannot link yet: compile instead
            log.info("Not loading cluster %s from the persistent cache: %s", name, e)
            return None
        except Exception as e:  # noqa: BLE001 - object code LLVM refuses, a layout of another shape: recompile
            PersistentCache._corrupt(self.persistent.path_for(key), f"its code does not load: {e}")
            return None
        exe.origin = "persistent cache"
        compile_profile.note("persistent-cache hit")
        log.info("Loaded cluster %s from the persistent cache (%s)", name, self.persistent.path_for(key).name)
        return code, exe

    @deferred_while_ahead   # a cluster compiled ahead is stored when its launch takes it
    def store_cluster(self, key: str | None, executable: Executable, *, inputs: list, param_specs: list,
                      output_order: list, updates: dict) -> None:
        """Keep ``executable`` and its launcher mapping under cluster key ``key`` (a no-op without one)."""
        if key is None or self.persistent is None:
            return
        code = ClusterCode(inputs, param_specs, output_order, updates, executable.layout,
                           executable.library.object_code, executable.library.imports, executable.library.provides)
        try:
            self.persistent.store_cluster(key, code, executable.name)
        except (OSError, pickle.PicklingError) as e:
            log.warning("Could not write persistent cache entry for cluster %s: %s", executable.name, e)

    def compile(self, module, **dump) -> Executable:
        """Native code for ``module``: from the persistent layer when it has a valid entry, else compiled
        (and stored there). The executable's ``origin`` says which. ``dump``: ``compile_module``'s
        ``dumper`` and ``dump_from_env``."""
        exe, origin = self._compile(module, **dump)
        exe.origin = origin
        return exe

    def _compile(self, module, **dump) -> tuple[Executable, str]:
        from tfxla_cluster.codegen.executable import compile_module

        store = _PersistentStore(self) if self.persistent is not None else None
        exe = compile_module(module, self.options, self.engine, code_store=store, **dump)
        return exe, exe.origin


class _PersistentStore:
    """The persistent layer as the code store ``compile_module`` asks (keys from the IR text)."""

    def __init__(self, cache: CompilationCache) -> None:
        self.cache = cache
        self.persistent = cache.persistent

    def load(self, ir_text: str, engine: JitEngine, name: str,
             exports: tuple[str, ...] = (ENTRY_NAME,)) -> CodeLibrary | None:
        lib = self.persistent.load(self.cache.persistent_key(ir_text), _digest(ir_text), engine, name, exports)
        compile_profile.note("persistent-cache " + ("miss" if lib is None else "hit"))
        return lib

    @deferred_while_ahead
    def store(self, ir_text: str, library: CodeLibrary) -> None:
        try:
            self.persistent.store(self.cache.persistent_key(ir_text), _digest(ir_text), library, library.name)
        except OSError as e:
            log.warning("Could not write persistent cache entry for %s: %s", library.name, e)


def _shared_symbols(header: dict) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(imports, provides) of an IR-keyed entry's header (empty for entries without shared kernels); None
    when they are not lists of names."""
    out = []
    for field_name in ("imports", "provides"):
        names = header.get(field_name, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return None
        out.append(tuple(names))
    return out[0], out[1]


def _digest(ir_text: str) -> str:
    """The digest an entry keeps of its IR: without the ``ModuleID`` line, as the key (clusters of other
    names share an entry; format 1 hashed the line too, so a second process numbering its clusters
    otherwise took a valid entry for a corrupt one)."""
    from tfxla_cluster.codegen.engine import without_module_id

    return hashlib.sha256(without_module_id(ir_text).encode()).hexdigest()


# ---------------------------------------------------------------------- entries keyed before lowering
@dataclass
class ClusterCode:
    """One compiled signature of a cluster as the persistent cache keeps it: what lowering told the
    launcher and the executable's layout, with the object code (the launcher's ``CompiledCluster`` minus
    its HLO, which is lowered again only when asked for)."""

    inputs: list                  # tf2hlo.cluster_input.ClusterInput per lowered input (constants with their values)
    param_specs: list             # (launch input position, numpy dtype) per HLO parameter
    output_order: list            # top-level result index of each value output
    updates: dict                 # resource input position -> result index
    layout: ExecutableLayout
    object_code: bytes
    imports: tuple[str, ...] = ()   # shared kernels the code calls (``codegen/kernel_share.py``), loaded first
    provides: tuple[str, ...] = ()  # shared kernels it defines for later modules


#: Environment switches that cannot change generated code (where caches live, progress bars, logging).
_KEY_NEUTRAL_SWITCHES = frozenset({"TFXLA_COMPILE_CACHE", "TFXLA_COMPILE_THREADS", "TFXLA_COMPILE_SERIAL",
                                   "TFXLA_SHARE_KERNELS",   # (entries list the shared kernels they import) "XDG_CACHE_HOME", "TFXLA_NATIVE_CACHE",
                                   "TFXLA_CLUSTER_PROGRESS", "TFXLA_CLUSTER_DEBUG", "TF_DUMP_GRAPH_PREFIX",
                                   "TF_CPP_VMODULE", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_MIN_VLOG_LEVEL"})


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """A digest of this package's source (every .py and .c file under it) and of the versions of TF and
    numpy, whose kernels fold constants while lowering: an edit to the code (an editable install keeps
    its version number) makes every entry keyed before lowering stale.

    Reading and hashing the source costs a warm process ~10-40 ms; the digest is kept in the default cache
    directory under the files' paths, sizes and modification times (nanoseconds: what Python's own
    bytecode cache trusts, with the size), so a process whose source is unchanged only stats it."""
    import tensorflow as tf

    import tfxla_cluster

    root = Path(tfxla_cluster.__file__).resolve().parent
    # Relative paths as strings and os.stat: Path objects cost a warm process more than the stats.
    top = str(root)
    sources: list[str] = []
    for directory, subdirs, files in os.walk(top):   # os.walk, not rglob: it skips __pycache__ (10 ms less)
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        rel = os.path.relpath(directory, top)
        sources += [f if rel == "." else os.path.join(rel, f) for f in files if f.endswith((".py", ".c"))]
    sources.sort()
    versions = f"tf{tf.__version__}|numpy{np.__version__}"
    stats = [os.stat(os.path.join(top, p)) for p in sources]
    stamp = hashlib.sha256(repr((top, versions, [(p, st.st_mtime_ns, st.st_size)
                                                 for p, st in zip(sources, stats)])).encode()).hexdigest()
    memo = _source_digest_memo()
    if memo is not None:
        try:
            kept = json.loads(memo.read_text(encoding="utf-8"))
            if isinstance(kept, dict) and kept.get("stamp") == stamp and isinstance(kept.get("digest"), str):
                return kept["digest"]
        except (OSError, ValueError):
            pass
    h = hashlib.sha256()
    for path in sources:
        h.update(path.encode() + b"\0")
        h.update((root / path).read_bytes())
        h.update(b"\0")
    h.update(versions.encode())
    digest = h.hexdigest()
    if memo is not None:
        _write_atomically(memo, json.dumps({"stamp": stamp, "digest": digest}).encode())
    return digest


def _source_digest_memo() -> Path | None:
    """Where :func:`source_digest` keeps its last result: the default cache directory (None when it is off)."""
    directory = default_directory()
    return directory / "source_digest.json" if directory is not None else None


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (temp file + rename; readers see the old file or the new one); an
    unwritable directory is left as it is."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _environment_key(flags) -> str:
    """The flags the cluster compiles under (the function's and the process's) and every environment
    switch that can change lowering or code."""
    from tfxla_cluster.flags import ENV_SWITCHES, Flags, env_switch

    # Flags.from_env() is every flag variable parsed: two texts that parse the same compile the same.
    parts = [repr(sorted(Flags.resolve(flags).as_dict().items())), repr(sorted(Flags.from_env().as_dict().items()))]
    parts += [f"{n}={env_switch(n)}" for n in sorted(ENV_SWITCHES) if n not in _KEY_NEUTRAL_SWITCHES]
    parts.append(cpu_topology.key())   # f64 dots follow Eigen's blocking for this CPU's caches and threads
    return "\n".join(parts)


def _called_functions(graph, nodes) -> list:
    """The library FunctionDefs the ``nodes`` call (function-valued attrs), transitively, by name."""
    found: dict[str, object] = {}
    frontier = [nd for nd in (n.node_def for n in nodes)]

    def names(attr_map):
        for value in attr_map.values():
            if value.HasField("func"):
                yield value.func.name
            elif value.HasField("list"):
                yield from (f.name for f in value.list.func)

    while frontier:
        nd = frontier.pop()
        for name in [nd.op, *names(nd.attr)]:
            if name in found:
                continue
            fdef = graph.function(name)
            if fdef is not None:
                found[name] = fdef
                frontier.extend(fdef.node_def)
    return [found[k] for k in sorted(found)]


def cluster_key(boundary, arrays, *, engine_key: str, options_key: str, version: str, flags=None,
                must_compile: bool = False) -> str:
    """The persistent key of a cluster's signature before lowering (see the module docstring): a
    deterministic function of everything lowering, the HLO passes and code generation read."""
    h = hashlib.sha256()

    def put(data: bytes | str) -> None:
        data = data.encode() if isinstance(data, str) else data
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)

    for part in (CLUSTER_KIND, str(FORMAT_VERSION), version, source_digest(), engine_key, options_key,
                 _environment_key(flags), f"must_compile={bool(must_compile)}"):
        put(part)
    graph = boundary.graph
    members = boundary.topological_members
    for node in members:
        put(node.node_def.SerializeToString(deterministic=True))
    for src in dict.fromkeys(t[0] for t in boundary.inputs):   # the inputs' producers (dtypes, handle data)
        put(graph.node(src).node_def.SerializeToString(deterministic=True))
    for fdef in _called_functions(graph, members):
        put(fdef.SerializeToString(deterministic=True))
    put(repr((boundary.inputs, boundary.outputs, boundary.launch_outputs)))
    constants = boundary.constants
    for t, a in zip(boundary.inputs, arrays):
        a = np.asarray(a)
        put(f"{a.dtype.str}{a.shape}")
        if t in constants:
            put(np.ascontiguousarray(a).tobytes())
    return "c" + h.hexdigest()[:32]


# ---------------------------------------------------------------------- graphs after TF's rewrites
# TF names a traced function's graph ``__inference_<name>_<uid>`` (``__forward_``/``__backward_`` for a
# training step's halves), the uid a process-wide counter: the same function traced after other functions,
# or in another order, is numbered otherwise in each process.
_NUMBERED_FUNCTION = re.compile(r"(__(?:inference|forward|backward)_\w*_)(\d+)")


@dataclass(frozen=True)
class FunctionNames:
    """A bijection between the process-numbered names of a graph's library functions and canonical names:
    the k-th name (sorted by base name, then number) gets its uid replaced by k, zero-padded to the uid's
    width with at least one leading zero (which no uid has: a canonical name is never a process's name).
    Names keep their length, so the renaming is a replacement of bytes in a serialised proto that keeps
    every length prefix valid; a name followed by more digits is another name. Names whose uid has too few
    digits for their rank are left as they are (their graphs then miss in other processes, never collide)."""

    to_canonical: dict[bytes, bytes]

    @staticmethod
    def of(graph_def) -> "FunctionNames":
        return FunctionNames.of_names(f.signature.name for f in graph_def.library.function)

    @staticmethod
    def of_names(function_names) -> "FunctionNames":
        """The bijection of a library holding the functions ``function_names`` (duplicates count once)."""
        numbered = [(m.group(1), int(m.group(2)), m.group(0)) for m in
                    (_NUMBERED_FUNCTION.fullmatch(n) for n in dict.fromkeys(function_names)) if m]
        mapping = {}
        for k, (base, uid, name) in enumerate(sorted(numbered)):
            width = len(name) - len(base)
            if len(str(k)) < width:
                mapping[name.encode()] = (base + str(k).zfill(width)).encode()
        return FunctionNames(mapping)

    def canonical(self, data: bytes) -> bytes:
        return _rename(data, self.to_canonical)

    def local(self, data: bytes) -> bytes:
        return _rename(data, {v: k for k, v in self.to_canonical.items()})


def _rename(data: bytes, mapping: dict[bytes, bytes]) -> bytes:
    """``data`` with every occurrence of a key of ``mapping`` not followed by a digit replaced by its value."""
    if not mapping:
        return data
    pattern = re.compile(b"(?:" + b"|".join(map(re.escape, sorted(mapping, key=len, reverse=True))) + b")(?![0-9])")
    return pattern.sub(lambda m: mapping[m.group(0)], data)


def graph_key(graph_def, keep, flags=None, names: FunctionNames | None = None, variant: str = "") -> str:
    """The persistent key of a function graph's runtime rewrites (While lowering, then TF's grappler;
    ``graph.loader.runtime_rewrites``): the GraphDef (deterministic serialisation, its library functions'
    process-numbered names made canonical by ``names``, default ``FunctionNames.of(graph_def)``), the nodes
    kept (sorted: a FunctionDef's control outputs are a map, iterated in another order by each process),
    this package's source and TF's version, the flags and environment switches (oneDNN changes the
    remapper's rewrites), the host CPU (so do its features) and ``variant`` (what else the rewrite did)."""
    names = FunctionNames.of(graph_def) if names is None else names
    h = _rewrite_key_hash(GRAPH_KIND, keep, flags, names, variant)
    h.update(names.canonical(graph_def.SerializeToString(deterministic=True)))
    return "g" + h.hexdigest()[:32]


def _rewrite_key_hash(kind: str, keep, flags, names: FunctionNames, variant: str):
    """The hash of what a runtime rewrite's key holds besides the graph (see :func:`graph_key`)."""
    import llvmlite.binding as llvm

    h = hashlib.sha256()
    for part in (kind, str(FORMAT_VERSION), source_digest(), _environment_key(flags), variant,
                 names.canonical(repr(sorted(keep)).encode()).decode(),
                 llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()):
        h.update(part.encode() + b"\0")
    return h


def function_graph_key(function_def, library, extra: bytes, keep, flags=None, variant: str = ""
                       ) -> tuple[str, FunctionNames]:
    """(the persistent key of a traced function's graph after the runtime rewrites, keyed by what its
    conversion to a GraphDef reads — so a hit skips that conversion —, the names' bijection). The parts:
    the ``function_def``, its ``library``, ``extra`` (the rest the conversion reads: graph versions, the
    variables' handle data), with process-numbered function names made canonical, and the rest of
    :func:`graph_key`'s parts. The entry holds the same GraphDef as the :func:`graph_key` entry of the
    converted graph."""
    names = FunctionNames.of_names([function_def.signature.name, *(f.signature.name for f in library.function)])
    h = _rewrite_key_hash(GRAPH_KIND + "/function", keep, flags, names, variant)
    for part in (function_def.SerializeToString(deterministic=True), library.SerializeToString(deterministic=True),
                 extra):
        part = names.canonical(part)
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return "f" + h.hexdigest()[:32], names


def rewritten_function_graph(function_key: tuple[str, FunctionNames] | None, flags, convert: Callable[[], object],
                             rewrite: Callable[[object], object], keep, name: str = "graph", variant: str = ""):
    """(the graph after the runtime rewrites, whether it came from the persistent cache): ``rewrite(convert())``,
    or with the persistent cache on the graph stored under ``function_key`` (:func:`function_graph_key`; a hit
    skips ``convert``), else under the converted graph's :func:`graph_key` (a hit skips ``rewrite``); a fresh
    result is stored under both. The ``convert`` step is profiled as "import"."""
    store = persistent_cache(flags) if flags is not None and function_key is not None else None
    if store is None:
        with compile_profile.stage("import"):
            before = convert()
        return rewrite(before), False
    key, names = function_key
    with compile_profile.stage("grappler"):
        cached = store.load_graph(key, names)
    if cached is not None:
        compile_profile.note("persistent-cache graph hit")
        return cached, True
    with compile_profile.stage("import"):
        before = convert()
    fresh: list = []

    def run():
        fresh.append(rewrite(before))
        return fresh[0]
    out = rewritten_graph(before, keep, flags, run, name, variant)
    with compile_profile.stage("grappler"):
        try:
            store.store_graph(key, out, name, names)
        except OSError as e:
            log.warning("Could not write persistent cache entry for graph %s: %s", name, e)
    return out, not fresh


def rewritten_graph(graph_def, keep, flags, rewrite: Callable[[], object], name: str = "graph", variant: str = ""):
    """``rewrite()`` (the runtime rewrites of ``graph_def``, and what ``variant`` names), or the result stored
    for the same key by an earlier process when the persistent cache is on, with this process's function
    names; a fresh result is stored with canonical ones."""
    store = persistent_cache(flags) if flags is not None else None
    if store is None:
        return rewrite()
    with compile_profile.stage("grappler"):
        names = FunctionNames.of(graph_def)
        key = graph_key(graph_def, keep, flags, names, variant)
        cached = store.load_graph(key, names)
    if cached is not None:
        compile_profile.note("persistent-cache graph hit")
        return cached
    out = rewrite()
    with compile_profile.stage("grappler"):
        try:
            store.store_graph(key, out, name, names)
        except OSError as e:
            log.warning("Could not write persistent cache entry for graph %s: %s", name, e)
    return out


# ---------------------------------------------------------------------- auto-clustering results
@dataclass
class ClusteringEntry:
    """What auto-clustering made of one graph, as the persistent cache keeps it: the clusters' members in
    creation order, and how the pass moved TF's per-process state (the cluster sequence numbers and the
    clustering fuel), so a hit in another process numbers its clusters as the pass would there."""

    fingerprint: int                # the sequence counter the names were numbered on (0 unless deterministic names)
    prefix: str                     # the names without their sequence number ("cluster_")
    consumed: int | None            # fuel the pass spent (None: it never took any, e.g. a graph already clustered)
    clusters: list[list[str]]       # members of the k-th cluster created: named prefix + (first number + k)

    def to_json(self) -> bytes:
        return json.dumps({"fingerprint": self.fingerprint, "prefix": self.prefix, "consumed": self.consumed,
                           "clusters": self.clusters}, sort_keys=True).encode()

    @staticmethod
    def from_json(payload: bytes) -> "ClusteringEntry":
        d = json.loads(payload)
        entry = ClusteringEntry(d["fingerprint"], d["prefix"], d["consumed"], d["clusters"])
        if not (isinstance(entry.fingerprint, int) and isinstance(entry.prefix, str)
                and (entry.consumed is None or isinstance(entry.consumed, int) and entry.consumed >= 0)
                and isinstance(entry.clusters, list)
                and all(isinstance(c, list) and c and all(isinstance(m, str) for m in c) for c in entry.clusters)):
            raise ValueError("fields of the wrong type")
        return entry

    @staticmethod
    def observed(clusters: dict[str, list[str]], fuel_start: int, fuel_after: int | None, sequence_before: dict,
                 sequence_after: dict, max_fuel: int) -> "ClusteringEntry | None":
        """The entry of a pass that produced ``clusters`` while the process state went from the ``_before``
        values to the ``_after`` ones; None when the state moved otherwise than this pass alone moves it
        (another thread clustered at the same time): such a result is not stored."""
        moved = {fp: n - sequence_before.get(fp, 0) for fp, n in sequence_after.items()
                 if n != sequence_before.get(fp, 0)}
        consumed = None if fuel_after is None else fuel_start - fuel_after
        if consumed is not None and not 0 <= consumed <= max_fuel:
            return None
        if not clusters:
            return ClusteringEntry(0, "cluster_", consumed, []) if not moved else None
        if len(moved) != 1:
            return None
        (fingerprint, count), = moved.items()
        first = sequence_after[fingerprint] - count
        if count != len(clusters):
            return None
        prefix = None
        for k, name in enumerate(clusters):
            number = str(first + k)
            if not name.endswith(number) or prefix not in (None, name[:-len(number)]):
                return None
            prefix = name[:-len(number)]
        return ClusteringEntry(fingerprint, prefix, consumed, [list(m) for m in clusters.values()])


class LazyMarkResult:
    """A clustering taken from the persistent cache: ``clusters`` as the pass made them, everything else of
    the pass's ``MarkResult`` (decisions, reasons: ``explain``, the report) computed on first use, by the
    pass itself on a copy of the process state it started from (so with the same names)."""

    def __init__(self, clusters: dict[str, list[str]], compute: Callable[[], tuple[dict, object]]) -> None:
        self.clusters = clusters
        self._compute = compute
        self._result = None
        self._lock = threading.Lock()

    def resolve(self):
        """The pass's ``MarkResult``."""
        with self._lock:
            if self._result is None:
                clusters, self._result = self._compute()
                if clusters != self.clusters:   # a key that missed an input of the pass: say so, loudly
                    log.warning("The clustering taken from the persistent cache differs from the clustering pass's "
                                "own (%d vs %d clusters); please report this", len(self.clusters), len(clusters))
            return self._result

    def __getattr__(self, name: str):
        if name.startswith("__"):   # copy/pickle probes: not the result's
            raise AttributeError(name)
        return getattr(self.resolve(), name)


def clustering_key(graph_def, flags, *, jit_compile, cpu_global_jit: bool, fuel: int | None) -> str:
    """The persistent key of auto-clustering ``graph_def`` (the graph the pass sees: after TF's rewrites and
    constant cloning, deterministic serialisation, library functions by canonical names): this package's source, TF's version and build, the flags
    and environment switches, the session's CPU global-JIT setting, the function's ``jit_compile`` and the
    fuel left (``fuel`` None: more than the graph can spend).

    The pass reads TF's XLA kernel list only for the ops of the graph (and of the functions it calls, in its
    library): TF's build fixes their kernels, and the graph names them. So the list's own key
    (:func:`kernels_key`, which lists every op registered in the process: ~30 ms) adds nothing here."""
    import tensorflow as tf

    h = hashlib.sha256()
    for part in (CLUSTERING_KIND, str(FORMAT_VERSION), source_digest(), f"tf{tf.__version__}|{tf.version.GIT_VERSION}",
                 _environment_key(flags),
                 f"jit_compile={jit_compile!r}|cpu_global_jit={bool(cpu_global_jit)}|fuel={fuel}"):
        h.update(part.encode() + b"\0")
    # Library functions by canonical names: a jit_compile=True body keeps its own FunctionDef, numbered by the
    # process's tracing history (FunctionNames).
    h.update(FunctionNames.of(graph_def).canonical(graph_def.SerializeToString(deterministic=True)))
    return "m" + h.hexdigest()[:32]


def clustered(graph_def, flags, run: Callable[[object], tuple[dict, object]], *, jit_compile,
              name: str = "graph") -> tuple[dict[str, list[str]], object]:
    """``run(state)`` — the clustering pass over ``graph_def`` with ``state`` (a ``ProcessState``; None: the
    process's) returning (clusters, MarkResult) — or, with the persistent cache on, the result an earlier
    process stored for the same key, replayed on the process state as the pass would have moved it (cluster
    sequence numbers, fuel) with a :class:`LazyMarkResult`. Never with the pass's debug dumps or INFO
    summary asked for (they are the pass's own output); a fresh result is stored."""
    from tfxla_cluster.process_state import PROCESS as state

    store = persistent_cache(flags)
    if (store is None or flags.tf_xla_clustering_debug
            or logging.getLogger("tfxla_cluster.mark_for_compilation").isEnabledFor(logging.INFO)):
        return run(None)
    from tfxla_cluster.tf_compat import session_cpu_global_jit

    flag_fuel = int(flags.tf_xla_clustering_fuel)
    with state.lock:
        fuel_before, sequence_before = state.fuel, dict(state.sequence)
    fuel_start = flag_fuel if fuel_before is None else fuel_before
    try:
        key = clustering_key(graph_def, flags, jit_compile=jit_compile, cpu_global_jit=session_cpu_global_jit(),
                             fuel=fuel_start if fuel_start <= len(graph_def.node) else None)
    except Exception as e:  # noqa: BLE001 - a graph or TF we can't key: cluster as with the cache off
        log.debug("No persistent key for the clustering of %s: %s", name, e)
        return run(None)
    entry = store.load_clustering(key, {n.name for n in graph_def.node})
    corrupt = entry is None and store.path_for(key).exists()
    if entry is not None:
        from tfxla_cluster.process_state import ProcessState

        replica = ProcessState()   # the state the pass would start from: for the lazy MarkResult
        with state.lock:
            replica.fuel = state.fuel
            first = replica.sequence[entry.fingerprint] = state.sequence[entry.fingerprint]
            state.sequence[entry.fingerprint] = first + len(entry.clusters)
            if entry.consumed is not None:
                state.fuel = (flag_fuel if state.fuel is None else state.fuel) - entry.consumed
        clusters = {f"{entry.prefix}{first + k}": list(members) for k, members in enumerate(entry.clusters)}
        compile_profile.note("persistent-cache clustering hit")
        return clusters, LazyMarkResult(clusters, lambda: run(replica))
    clusters, result = run(None)
    with state.lock:
        fuel_after, sequence_after = state.fuel, dict(state.sequence)
    entry = ClusteringEntry.observed(clusters, fuel_start, fuel_after, sequence_before, sequence_after,
                                     len(graph_def.node))
    if entry is not None:
        try:
            store.store_clustering(key, entry, name, replace=corrupt)
        except OSError as e:
            log.warning("Could not write persistent cache entry for the clustering of %s: %s", name, e)
    return clusters, result


def must_compile_checked(graph_def, flags, run: Callable[[], tuple[dict, object]], *,
                         name: str = "graph") -> tuple[dict[str, list[str]], object]:
    """``run()`` — the must-compile check of a ``jit_compile=True`` function's graph ``graph_def`` returning
    (clusters, MarkResult or None) — or, with the persistent cache on, the one cluster an earlier process's
    check found for the same key (:func:`clustering_key` with ``jit_compile=True``): the check reads TF's XLA
    kernel list for every node, ~0.2 s of a ResNet's warm first call. Only a check that found the whole body
    compilable (one cluster, no MarkResult) is stored; an error, or a body cut at data-dependent shapes, runs
    the check again in every process."""
    store = persistent_cache(flags)
    if store is None:
        return run()
    try:
        key = clustering_key(graph_def, flags, jit_compile=True, cpu_global_jit=False, fuel=None)
    except Exception as e:  # noqa: BLE001 - a graph or TF we can't key: check as with the cache off
        log.debug("No persistent key for the must-compile check of %s: %s", name, e)
        return run()
    entry = store.load_clustering(key, {n.name for n in graph_def.node})
    if entry is not None and entry.consumed is None and len(entry.clusters) <= 1 and entry.prefix == _MUST_COMPILE:
        compile_profile.note("persistent-cache clustering hit")
        return {f"{_MUST_COMPILE}0": list(m) for m in entry.clusters}, None
    corrupt = entry is None and store.path_for(key).exists()
    clusters, result = run()
    if result is None and list(clusters) in ([], [f"{_MUST_COMPILE}0"]):
        try:
            store.store_clustering(key, ClusteringEntry(0, _MUST_COMPILE, None, [list(m) for m in clusters.values()]),
                                   name, replace=corrupt or entry is not None)
        except OSError as e:
            log.warning("Could not write persistent cache entry for the must-compile check of %s: %s", name, e)
    return clusters, result


_MUST_COMPILE = "cluster_"   # a jit_compile=True function's one cluster is cluster_0


# ---------------------------------------------------------------------- TF's XLA kernel list
def kernels_key() -> str:
    """The persistent key of TF's XLA JIT kernel list: TF's version and build, the names of every op
    registered in this process (a custom op library loaded with ``tf.load_op_library`` adds ops, and may
    add XLA kernels) and this package's source (which filters the list)."""
    import tensorflow as tf

    from tfxla_cluster import tf_compat

    h = hashlib.sha256()
    for part in (KERNELS_KIND, str(FORMAT_VERSION), source_digest(), tf.__version__, tf.version.GIT_VERSION,
                 "\n".join(sorted(tf_compat.registered_op_names()))):  # sorted: TF's op map has no fixed order
        h.update(part.encode() + b"\0")
    return "k" + h.hexdigest()[:32]


def xla_jit_kernels(ask_tf: Callable[[], list]) -> list:
    """TF's XLA JIT KernelDefs: from the persistent cache when on and filled by an earlier process (asking
    TF initialises XLA's kernel registry, ~0.1 s of every process's first clustering), else ``ask_tf()``,
    stored for the next process."""
    from tfxla_cluster.flags import Flags

    store = persistent_cache(Flags.from_env())
    if store is None:
        return ask_tf()
    try:
        key = kernels_key()
    except Exception as e:  # noqa: BLE001 - a TF without the C API call: ask TF, as with the cache off
        log.debug("No persistent key for TF's XLA kernel list: %s", e)
        return ask_tf()
    cached = store.load_kernels(key)
    if cached is not None:
        return cached
    kernel_defs = ask_tf()
    try:
        store.store_kernels(key, kernel_defs)
    except OSError as e:
        log.warning("Could not write persistent cache entry for TF's XLA kernel list: %s", e)
    return kernel_defs


xla_kernels.set_kernel_list_source(xla_jit_kernels)


def _native_pool_store() -> "_PersistentStore | None":
    """The persistent store for the native thread pool's object code (the flags in the environment decide
    whether the cache is on), registered with codegen, which may not import this layer."""
    from tfxla_cluster.flags import Flags

    cache = CompilationCache.from_flags(Flags.from_env())
    return _PersistentStore(cache) if cache.persistent is not None else None
