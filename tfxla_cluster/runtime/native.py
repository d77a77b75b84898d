"""The native launch op: ``TfxlaLaunch`` nodes run compiled clusters with no Python on the step.

Stage: runtime (TF's ``_XlaRun``). :func:`available` builds ``native_launch.c`` on first use — gcc, TF's
C API headers from the pip package, linked against ``libtensorflow_framework.so.2`` — into a cache
directory (``$TFXLA_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/tfxla_cluster`` or ``~/.cache/tfxla_cluster``)
keyed by the source and TF's version, loads it with ctypes and registers the op and its CPU kernel
through TF's C op/kernel API. Where that fails (no compiler, no headers, a load error) it warns once
with the reason and launch nodes stay ``EagerPyFunc`` nodes (the Python launch). ``TFXLA_NATIVE_LAUNCH=0``
(read when a function traces) keeps the Python launch.

Guarantees:

* A launch whose signature (input shapes; the bytes of compile-time-constant inputs) has a published
  entry runs entirely in the kernel: TF's input buffers are the parameters, TF allocates the outputs,
  the llvmlite-compiled entry function writes them.
* Everything else — a new signature, a cluster that fell back to TF's kernels or is megamorphic, an
  executable the kernel can't drive (evaluator backend, bounds checks, non-default layouts, dtype
  conversions), observers installed — goes to the :class:`~.launcher.Launcher` in Python, which
  compiles (once per signature, under the cache's locks), runs, and writes the outputs through TF's C
  API. An error there is the op's error, with the exception's TF status code.
* Resource variables never reach the kernel: the launch node is given their values (ReadVariableOp
  nodes before it) and returns the final value of every variable a member may assign (AssignVariableOp
  nodes after it), as XlaLaunch snapshots variables and writes them back; see ``encapsulate.NativeLaunch``.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shlex
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from tfxla_cluster.runtime import observers

log = logging.getLogger("tfxla_cluster.runtime")

OP_NAME = "TfxlaLaunch"
_SOURCE = Path(__file__).with_name("native_launch.c")
_MISS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.c_void_p)

_lock = threading.RLock()
_state: dict[str, Any] = {}            # "lib", "tf", "callback", or "error" once tried
_launchers: dict[int, Any] = {}        # native cluster id -> Launcher
_published: dict[int, list] = {}      # native cluster id -> CompiledClusters whose code the kernel calls
_consts_set: set[int] = set()

# TF_Code of each status name our errors carry (tensorflow/c/tf_status.h).
_TF_CODES = {"CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
             "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
             "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
             "DATA_LOSS": 15}


def _tf_paths() -> tuple[str, str, str]:
    """(TF's include directory, the directory of libtensorflow_framework.so.2, TF's version)."""
    import tensorflow as tf

    root = os.path.dirname(tf.__file__)
    include = next((f[2:] for f in tf.sysconfig.get_compile_flags() if f.startswith("-I")),
                   os.path.join(root, "include"))
    libdir = next((f[2:] for f in tf.sysconfig.get_link_flags() if f.startswith("-L")), root)
    return include, libdir, tf.__version__


def build_library() -> Path:
    """The shared library's path, compiled now if the cache has none for this source and TF."""
    from tfxla_cluster.codegen.native_runtime import native_cache_dir

    include, libdir, version = _tf_paths()
    source = _SOURCE.read_bytes()
    digest = hashlib.sha256(source + f"\0{version}\0{libdir}".encode()).hexdigest()[:16]
    target = native_cache_dir() / f"tfxla_launch-{digest}.so"
    if target.exists():
        return target
    if not os.path.exists(os.path.join(include, "tensorflow", "c", "kernels.h")):
        raise OSError(f"TF's C API headers are missing ({include}/tensorflow/c/kernels.h)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    from tfxla_cluster.flags import env_switch

    cc = env_switch("CC")
    cmd = [*shlex.split(cc), "-O2", "-shared", "-fPIC", "-std=gnu11", f"-I{include}", str(_SOURCE), "-o", tmp,
           f"-L{libdir}", "-l:libtensorflow_framework.so.2", f"-Wl,-rpath,{libdir}", "-lpthread"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        os.unlink(tmp)
        raise OSError(f"cannot run the C compiler {cc!r}: {e}") from e
    if done.returncode != 0:
        os.unlink(tmp)
        first = (done.stderr.strip().splitlines() or ["(no output)"])[0]
        raise OSError(f"{cc} failed to build {_SOURCE.name}: {first}")
    os.replace(tmp, target)   # atomic: concurrent processes never load a half-written file
    return target


def _load() -> None:
    """Build, load and initialise the library into ``_state`` (or record why not)."""
    try:
        path = build_library()
        _, libdir, _ = _tf_paths()
        tf_lib = ctypes.CDLL(os.path.join(libdir, "libtensorflow_framework.so.2"))
        lib = ctypes.CDLL(str(path))
        _declare(lib, tf_lib)
        message = ctypes.create_string_buffer(512)
        code = lib.tfxla_init(message, len(message))
        if code != 0:
            raise OSError(f"registering {OP_NAME} failed: {message.value.decode(errors='replace')}")
    except Exception as e:  # noqa: BLE001 - any failure means: keep the Python launch, say why
        _state["error"] = f"{type(e).__name__}: {e}"
        log.warning("Native launch unavailable, clusters launch through Python (~100x slower per launch): %s",
                    _state["error"])
        return
    callback = _MISS_FN(_on_miss)
    lib.tfxla_set_miss_callback(callback)
    _state.update(lib=lib, tf=tf_lib, callback=callback)
    lib.tfxla_set_force_python(int(bool(observers.OBSERVERS)))


def _declare(lib, tf) -> None:
    c_void_p, c_int, c_int64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lib.tfxla_init.argtypes, lib.tfxla_init.restype = [ctypes.c_char_p, c_int], c_int
    lib.tfxla_register_cluster.argtypes, lib.tfxla_register_cluster.restype = [ctypes.c_char_p, c_int64], c_int64
    lib.tfxla_set_miss_callback.argtypes, lib.tfxla_set_miss_callback.restype = [_MISS_FN], None
    lib.tfxla_set_force_python.argtypes, lib.tfxla_set_force_python.restype = [c_int], None
    lib.tfxla_set_python_only.argtypes, lib.tfxla_set_python_only.restype = [c_int64, c_int], None
    lib.tfxla_executions.argtypes, lib.tfxla_executions.restype = [c_int64], c_int64
    lib.tfxla_set_const_inputs.argtypes, lib.tfxla_set_const_inputs.restype = [c_int64, c_void_p], None
    lib.tfxla_add_entry.argtypes, lib.tfxla_add_entry.restype = [c_int64, c_void_p], c_int
    for name, res, args in [
        ("TF_NumInputs", c_int, [c_void_p]), ("TF_NumOutputs", c_int, [c_void_p]),
        ("TF_GetInput", None, [c_void_p, c_int, ctypes.POINTER(c_void_p), c_void_p]),
        ("TF_ExpectedOutputDataType", c_int, [c_void_p, c_int]),
        ("TF_AllocateOutput", c_void_p, [c_void_p, c_int, c_int, ctypes.POINTER(c_int64), c_int, ctypes.c_size_t,
                                         c_void_p]),
        ("TF_OpKernelContext_Failure", None, [c_void_p, c_void_p]),
        ("TF_TensorType", c_int, [c_void_p]), ("TF_NumDims", c_int, [c_void_p]), ("TF_Dim", c_int64, [c_void_p, c_int]),
        ("TF_TensorData", c_void_p, [c_void_p]), ("TF_TensorByteSize", ctypes.c_size_t, [c_void_p]),
        ("TF_DeleteTensor", None, [c_void_p]), ("TF_NewStatus", c_void_p, []), ("TF_DeleteStatus", None, [c_void_p]),
        ("TF_SetStatus", None, [c_void_p, c_int, ctypes.c_char_p]), ("TF_GetCode", c_int, [c_void_p]),
    ]:
        fn = getattr(tf, name)
        fn.restype, fn.argtypes = res, args


def disabled() -> bool:
    """``TFXLA_NATIVE_LAUNCH=0``: graphs built from now on launch their clusters through Python."""
    from tfxla_cluster.flags import env_switch

    return env_switch("TFXLA_NATIVE_LAUNCH").strip().lower() in ("0", "false", "no", "off")


def available() -> bool:
    """Whether ``TfxlaLaunch`` is registered in this process (building and loading it on first call)."""
    with _lock:
        if not _state:
            _load()
        return "lib" in _state


def unavailable_reason() -> str:
    available()
    return _state.get("error", "")


def set_force_python(on: bool) -> None:
    """Send every launch through Python (observers see each one)."""
    lib = _state.get("lib")
    if lib is not None:
        lib.tfxla_set_force_python(int(on))


observers.on_change(set_force_python)


def bind(launcher, *, resources: bool = True):
    """Register ``launcher``'s cluster with the kernel: the :class:`~.encapsulate.NativeLaunch` its launch
    node is built from, or None when the cluster keeps the Python launch (the op unavailable; resource
    variables with ``resources`` False or that can't move out of the node)."""
    from tensorflow.core.framework import types_pb2

    from tfxla_cluster.errors import TfXlaError
    from tfxla_cluster.runtime.encapsulate import NativeLaunch

    sig = launcher.sig
    if disabled():
        return None
    positions = [i for i, dt in enumerate(sig.input_dtypes) if dt == types_pb2.DT_RESOURCE]
    if positions and not resources or sig.boundary.duplicate_variable:   # (the Python launch raises TF's error)
        return None
    # A resource output must be an input handle passed through (its consumers take the handle).
    if any(dt == types_pb2.DT_RESOURCE and k not in launcher.passthrough for k, dt in enumerate(sig.output_dtypes)):
        return None
    try:
        reads = {p: launcher.resource_dtype(p) for p in positions}
    except TfXlaError:
        return None
    written = _written_variables(launcher, positions)
    if not available():
        return None
    lib = _state["lib"]
    with _lock:
        key = f"{sig.name}/{len(_launchers)}/{id(launcher):x}"
        cid = lib.tfxla_register_cluster(key.encode(), len(sig.inputs))
        if cid < 0:
            return None
        _launchers[cid] = launcher
        _published[cid] = []
    launcher.written = written
    seen = [0]

    def sync() -> None:
        # The kernel counts its launches; fold the new ones into the stats and the cache.
        n = lib.tfxla_executions(cid)
        with _lock:
            delta, seen[0] = n - seen[0], max(n, seen[0])
        if delta > 0:
            with launcher._lock:
                launcher._stats.executions += delta
            cache = launcher._compilation_cache
            if cache is not None:
                with cache._lock:
                    from tfxla_cluster.runtime.compile_cache import ClusterStats

                    cache.clusters.setdefault(sig.name, ClusterStats()).executions += delta
    launcher.native_sync = sync
    launcher.native_id = cid
    return NativeLaunch(key, reads, tuple(written), dict(launcher.passthrough))


# Ops that only read the variable behind a handle; any other member taking a handle may write it.
_READ_ONLY = frozenset({"ReadVariableOp", "ResourceGather", "ResourceGatherNd", "VariableShape"})


def _written_variables(launcher, positions: list[int]) -> list[int]:
    """The resource inputs some member may assign (a superset of what the lowering updates), following
    handles through pass-through members."""
    return [p for p in positions if any(node.op not in _READ_ONLY for node in launcher.handle_users(p))]


def native_executions(launcher) -> int:
    """How many launches of ``launcher``'s cluster ran in the kernel without Python (0 if not bound)."""
    cid = getattr(launcher, "native_id", None)
    return int(_state["lib"].tfxla_executions(cid)) if cid is not None and "lib" in _state else 0


# ---------------------------------------------------------------------------- the Python side of a launch
def numpy_dtype(tf_dtype: int) -> np.dtype:
    import tensorflow as tf

    return np.dtype(tf.as_dtype(tf_dtype).as_numpy_dtype)


def _on_miss(cid: int, ctx: int) -> int:
    """The kernel's callback (GIL held by ctypes): run the launch in Python. Never raises."""
    tf = _state["tf"]
    status = tf.TF_NewStatus()
    try:
        _serve(_launchers[cid], cid, ctx, status)
    except BaseException as e:  # noqa: BLE001 - every failure becomes the op's status
        # The owner's hook gives the error TF's form and keeps it, so the caller can re-raise it as is
        # (TF wraps an op's failure in "Graph execution error").
        hook = getattr(_launchers.get(cid), "on_error", None)
        if hook is not None and isinstance(e, Exception):
            e = hook(e)
        code, text = _status_of(e)
        tf.TF_SetStatus(status, code, text.encode(errors="replace"))
        tf.TF_OpKernelContext_Failure(ctx, status)
    finally:
        tf.TF_DeleteStatus(status)
    return 0


def _status_of(e: BaseException) -> tuple[int, str]:
    """(TF_Code, message) for an exception: a TF error keeps its own; ours map their status name, as
    ``function._as_tf_error`` does for the direct launch."""
    import tensorflow as tf

    if isinstance(e, tf.errors.OpError):
        return e.error_code, e.message
    code = getattr(e, "code", "UNKNOWN")
    return _TF_CODES.get(code if isinstance(code, str) else "UNKNOWN", 2), f"{type(e).__name__}: {e}"


def _serve(launcher, cid: int, ctx: int, status: int) -> None:
    # The whole launch is profiled (a first launch's "run" includes reading the inputs and writing the outputs).
    with launcher.launch_context():
        _serve_launch(launcher, cid, ctx, status)


def _serve_launch(launcher, cid: int, ctx: int, status: int) -> None:
    from tfxla_cluster.errors import InternalError

    tf = _state["tf"]
    n = tf.TF_NumInputs(ctx)
    handles: list[int] = []
    try:
        arrays = []
        for i in range(n):
            t = ctypes.c_void_p()
            tf.TF_GetInput(ctx, i, ctypes.byref(t), status)
            if tf.TF_GetCode(status) != 0:
                tf.TF_OpKernelContext_Failure(ctx, status)
                return
            handles.append(t.value)
            arrays.append(_view(tf, t.value))
        if observers.OBSERVERS:
            # Observers may keep the inputs past this launch: give them memory TF does not reclaim.
            arrays = [np.array(a, copy=True) for a in arrays]
        launcher.stats  # fold native executions in first: the megamorphic rule counts them
        updates: dict[int, np.ndarray] = {}
        outputs, compiled = launcher.run_observed(tuple(arrays), arrays, None, updates)
        written = launcher.written or ()
        if set(updates) - set(written):
            raise InternalError(f"cluster {launcher.sig.name} assigned variables at inputs "
                                f"{sorted(set(updates) - set(written))} its launch node does not write back")
        # The variables' final values follow the value outputs (AssignVariableOp nodes store them).
        outputs = list(outputs) + [updates.get(p, arrays[p]) for p in written]
        _write_outputs(tf, ctx, outputs, status)
        if compiled is not None and not observers.OBSERVERS:
            _publish(launcher, cid, compiled, arrays)
    finally:
        for h in handles:
            tf.TF_DeleteTensor(h)


def _view(tf, t: int) -> np.ndarray:
    """A numpy view of TF tensor ``t`` (valid while ``t`` lives)."""
    dtype = numpy_dtype(tf.TF_TensorType(t))
    dims = tuple(tf.TF_Dim(t, d) for d in range(tf.TF_NumDims(t)))
    nbytes = tf.TF_TensorByteSize(t)
    data = tf.TF_TensorData(t)
    if not nbytes or not data:
        return np.zeros(dims, dtype)
    arr = np.frombuffer((ctypes.c_char * nbytes).from_address(data), dtype=dtype).reshape(dims)
    arr.flags.writeable = False   # TF's buffer: nothing of ours may write it
    return arr


def _write_outputs(tf, ctx: int, outputs: list, status: int) -> None:
    for k, value in enumerate(outputs):
        dtype = tf.TF_ExpectedOutputDataType(ctx, k)
        a = np.asarray(value)
        if a.dtype != numpy_dtype(dtype):
            a = a.astype(numpy_dtype(dtype))
        if not a.flags.c_contiguous:
            a = a.copy(order="C")
        dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        t = tf.TF_AllocateOutput(ctx, k, dtype, dims, a.ndim, a.nbytes, status)
        if tf.TF_GetCode(status) != 0:
            tf.TF_OpKernelContext_Failure(ctx, status)
            return
        try:
            if a.nbytes:
                ctypes.memmove(tf.TF_TensorData(t), a.ctypes.data, a.nbytes)
        finally:
            tf.TF_DeleteTensor(t)


def _publish(launcher, cid: int, compiled, arrays: list[np.ndarray]) -> None:
    """Give the kernel ``compiled`` for the signature of ``arrays`` if it can drive it alone."""
    blob = _entry_blob(launcher, compiled, arrays)
    if blob is None:
        return
    lib = _state["lib"]
    with _lock:
        if compiled in _published[cid]:
            return
        if cid not in _consts_set:
            consts = launcher.const_positions or frozenset()
            mask = np.array([i in consts for i in range(len(arrays))] or [False], dtype=np.uint8)
            lib.tfxla_set_const_inputs(cid, mask.ctypes.data)
            _consts_set.add(cid)
        _published[cid].append(compiled)   # keeps the machine code and constants alive
        lib.tfxla_add_entry(cid, blob.ctypes.data)


def signature_key(arrays: list[np.ndarray], consts) -> list[int]:
    """The kernel's signature words (native_launch.c build_key): per input its rank and dims, then for
    compile-time constants the byte count and the bytes, zero-padded to 8-byte words."""
    key: list[int] = []
    for i, a in enumerate(arrays):
        key.append(a.ndim)
        key.extend(int(d) for d in a.shape)
        if i in consts:
            raw = np.ascontiguousarray(a).tobytes()
            key.append(len(raw))
            raw += b"\0" * (-len(raw) % 8)
            key.extend(int(w) for w in np.frombuffer(raw, dtype=np.int64))
    return key


def _entry_blob(launcher, compiled, arrays: list[np.ndarray]) -> np.ndarray | None:
    """The int64 words native_launch.c's tfxla_add_entry reads, or None if the kernel can't run it."""
    exe = compiled.executable
    if compiled.backend != "llvm" or exe is None or exe.options.bounds_checks or compiled.dynamic_results:
        return None
    if not compiled.param_specs and exe._params:
        return None
    if not exe._all_default_layout or len(compiled.param_specs) != len(exe._params):
        return None
    words: list[int] = []
    key = signature_key(arrays, launcher.const_positions or frozenset())
    words += [len(key), *key]
    fn = ctypes.cast(exe._entry, ctypes.c_void_p).value
    words += [fn, len(exe._template), *(int(v) for v in exe._template)]
    words.append(len(exe._params))
    for (position, dtype), (slot, shape, _), fast in zip(compiled.param_specs, exe._params, exe._fast):
        a = arrays[position]
        # The kernel passes TF's buffer as is: same dtype, same shape, row-major.
        if a.dtype != np.dtype(dtype) or a.shape != tuple(shape.dimensions) or not fast[2]:
            return None
        words += [position, slot]
    # Top-level result k -> output leaf (nested tuples: not for the kernel).
    structure = exe._structure if exe._root_is_tuple else (0,)
    if not all(isinstance(s, int) for s in structure):
        return None
    # The launch node's outputs: value outputs, then each written variable's final value.
    written = list(launcher.written or ())
    value_dtypes = [dt for k, dt in enumerate(launcher.sig.output_dtypes) if k not in launcher.passthrough]
    results = [(k, numpy_dtype(dt), None) for k, dt in zip(compiled.output_order, value_dtypes)]
    results += [(compiled.updates.get(p), arrays[p].dtype, p) for p in written]
    words.append(len(results))
    first_of_leaf: dict[int, int] = {}
    for j, (k, want, position) in enumerate(results):
        if k is None:   # a variable the cluster left as is: its value read in, copied out
            a = arrays[position]
            words += [-2 - position, 0, a.nbytes, a.ndim, *a.shape]
            continue
        leaf = structure[k]
        slot, shape = exe._outputs[leaf]
        if np.dtype(shape.dtype) != want:
            return None
        dims = [int(d) for d in shape.dimensions]
        nbytes = int(np.prod(dims, dtype=np.int64)) * np.dtype(shape.dtype).itemsize
        # A result feeding several launch outputs is written once and copied: TF owns each buffer alone.
        words += [first_of_leaf.get(leaf, -1), slot, nbytes, len(dims), *dims]
        first_of_leaf.setdefault(leaf, j)
    words.append(len(exe._temp_slots))
    for slot, offset in zip(exe._temp_slots, exe._temp_offsets):
        words += [int(slot), int(offset)]
    words.append(int(exe.arena_bytes))
    return np.array([w if w < 2 ** 63 else w - 2 ** 64 for w in words], dtype=np.int64)
