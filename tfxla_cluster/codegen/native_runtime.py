"""Native runtime services the generated code calls (XLA:CPU's ``__xla_cpu_runtime_*`` functions).

They are resolved through llvmlite's symbol table (``llvm.add_symbol``) before any library is loaded:

    tfxla_cblas_sgemm / tfxla_cblas_dgemm   numpy's OpenBLAS ``cblas_?gemm`` (ILP64), like XLA's Eigen
                                            matmul calls; absent BLAS, the emitter uses an IR GEMM
    tfxla_blas_threads_local(n) -> prev     OpenBLAS's thread-local thread count: GEMM kernels set 1
                                            and split the rows over our pool instead
    tfxla_parallel_for(fn, table, n, tasks) split work items [0, n) of a kernel into ``tasks`` ranges
                                            run on a thread pool: the native fork-join pool of
                                            native_pool.py (a few microseconds per split; its code comes
                                            from the persistent compile cache when that is on, else from
                                            the native cache directory, like the launch op), or, with
                                            TFXLA_CODEGEN_POOL=python, Python threads (ctypes releases
                                            the GIL while native code runs)
    tfxla_resolve_cold(table, code) -> ok   a rare branch's first run: compile the executable's cold code
                                            (``executable.ColdCode``) and fill its code-pointer array
                                            ``code``; 0 when that failed (the usual branch runs instead)
    tfxla_bounds_fail(table, kernel, i, n)  debug mode: an out-of-range access; recorded per buffer
                                            table and raised by the executable after the call
    __extendhfsf2, __truncsfhf2, ...        f16 <-> f32/f64 helpers LLVM calls on targets without F16C
                                            (baseline x86-64): from libgcc_s, which Python does not
                                            export them from

Either pool has ``threads - 1`` workers and the calling thread takes ranges itself. Kernels never call
back into ``parallel_for``, so concurrent executables cannot deadlock on the pool.
"""
from __future__ import annotations

import ctypes
import glob
import hashlib
import logging
import os
import queue
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from tfxla_cluster.codegen.engine import add_symbol

log = logging.getLogger("tfxla_cluster.codegen")

_lock = threading.Lock()
_registered = False
_blas: dict[str, int] = {}

KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
PARALLEL_FOR_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
BOUNDS_FAIL_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
RESOLVE_COLD_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


# ---------------------------------------------------------------- BLAS
def _find_openblas() -> dict[str, int]:
    """Addresses of numpy's bundled OpenBLAS cblas_sgemm/dgemm (64-bit integer interface)."""
    import numpy
    base = os.path.dirname(numpy.__file__)
    candidates = glob.glob(os.path.join(base, "..", "numpy.libs", "libscipy_openblas*.so*"))
    try:
        import scipy_openblas64  # noqa: F401 - present in some environments
        candidates += glob.glob(os.path.join(os.path.dirname(scipy_openblas64.__file__), "lib", "*.so*"))
    except ImportError:
        pass
    names = {"s": ["scipy_cblas_sgemm64_", "cblas_sgemm64_"], "d": ["scipy_cblas_dgemm64_", "cblas_dgemm64_"],
             "threads": ["openblas_set_num_threads_local"],
             "global_threads": ["scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                                "openblas_set_num_threads"],
             "corename": ["scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"]}
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        found = {}
        for kind, options in names.items():
            for n in options:
                try:
                    found[kind] = ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
                    break
                except AttributeError:
                    continue
        if "s" in found and "d" in found:
            found["_lib"] = lib  # keep the handle open
            return found
    return {}


def blas_available() -> bool:
    ensure_registered()
    return bool(_blas)


def blas_core() -> str:
    """The kernel family OpenBLAS chose for this CPU (``openblas_get_corename``: ``Haswell`` on AVX2 CPUs,
    Zen included; ``SkylakeX``/``Cooperlake``/``SapphireRapids`` on AVX-512 ones); "" without BLAS."""
    ensure_registered()
    addr = _blas.get("corename")
    if not addr:
        return ""
    return (ctypes.CFUNCTYPE(ctypes.c_char_p)(addr)() or b"").decode(errors="replace")


# ---------------------------------------------------------------- thread pool
class _Pool:
    """A minimal fork-join pool: fixed workers, one queue, one completion counter per job."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        for k in range(workers):
            threading.Thread(target=self._run, name=f"tfxla-cpu-{k}", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, args, done = self.q.get()
            try:
                fn(*args)
            finally:
                done.release()

    def run(self, fn, ranges, table) -> None:
        done = threading.Semaphore(0)
        for lo, hi in ranges[1:]:
            self.q.put((fn, (table, lo, hi), done))
        fn(table, *ranges[0])
        for _ in ranges[1:]:
            done.acquire()


_pool: _Pool | None = None
_kernels: dict[int, object] = {}
_callback_errors: dict[int, Exception] = {}   # buffer table address -> what _parallel_for caught


def _get_pool(threads: int) -> _Pool:
    global _pool
    if _pool is None or _pool.workers < threads - 1:
        with _lock:
            if _pool is None or _pool.workers < threads - 1:
                _pool = _Pool(max(threads - 1, 1))
    return _pool


def split_range(n: int, tasks: int) -> list[tuple[int, int]]:
    tasks = max(1, min(tasks, n))
    step, extra = divmod(n, tasks)
    out, lo = [], 0
    for k in range(tasks):
        hi = lo + step + (1 if k < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def _parallel_for(fn_addr, table, n, tasks) -> None:
    try:
        fn = _kernels.get(fn_addr)
        if fn is None:
            fn = _kernels[fn_addr] = KERNEL_FN(fn_addr)
        ranges = split_range(n, tasks)
        if len(ranges) == 1:
            fn(table, *ranges[0])
        else:
            _get_pool(len(ranges)).run(fn, ranges, table)
    except Exception as e:  # pragma: no cover - an exception must not cross the C frame: kept for the caller
        with _bounds_lock:
            _callback_errors.setdefault(table or 0, e)


def take_callback_error(table_address: int) -> Exception | None:
    """The exception ``tfxla_parallel_for`` caught while running the code on this buffer table, if any
    (the executable raises it as an InternalError after the call)."""
    if not _callback_errors:  # the common case, without taking the lock
        return None
    with _bounds_lock:
        return _callback_errors.pop(table_address, None)


_parallel_for_c = PARALLEL_FOR_FN(_parallel_for)

# ---------------------------------------------------------------- bounds checks
_bounds_lock = threading.Lock()
_bounds_errors: dict[int, list[tuple[int, int, int]]] = {}


def _bounds_fail(table, kernel, index, size) -> None:
    with _bounds_lock:
        errs = _bounds_errors.setdefault(table or 0, [])
        if len(errs) < 16:
            errs.append((kernel, index, size))


_bounds_fail_c = BOUNDS_FAIL_FN(_bounds_fail)


def take_bounds_errors(table_address: int) -> list[tuple[int, int, int]]:
    with _bounds_lock:
        return _bounds_errors.pop(table_address, [])


# ---------------------------------------------------------------- lazily compiled cold code
_cold_lock = threading.Lock()
_cold_code: dict[int, Callable[[], bool]] = {}   # code-pointer array address -> what loads its code


def register_cold(code_address: int, load: Callable[[], bool]) -> None:
    """``tfxla_resolve_cold`` on the array at ``code_address`` calls ``load()``: it compiles the cold code,
    fills the array (addresses first, element 0 last) and says whether it succeeded."""
    with _cold_lock:
        _cold_code[code_address] = load


def unregister_cold(code_address: int) -> None:
    with _cold_lock:
        _cold_code.pop(code_address, None)


def _resolve_cold(table, code) -> int:
    """The generated code's callback (ctypes takes the GIL; any thread, a TF executor's included). Never
    raises: a failure is logged and the rare branch falls back to the usual kernels."""
    try:
        with _cold_lock:
            load = _cold_code.get(code or 0)
        if load is None:
            log.error("tfxla_resolve_cold: no cold code registered for array %#x", code or 0)
            return 0
        return 1 if load() else 0
    except BaseException:  # noqa: BLE001 - an exception must not cross the C frame
        log.exception("compiling the cold code of a rare branch failed; its usual kernels run instead")
        return 0


_resolve_cold_c = RESOLVE_COLD_FN(_resolve_cold)

_threads_noop_c = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda n: 0)


# ---------------------------------------------------------------- native pool
POOL_ENV = "TFXLA_CODEGEN_POOL"
_native_pool = None


def _native_parallel_for() -> int | None:
    """Address of the native fork-join pool (native_pool.py), or None to use the Python pool
    (``TFXLA_CODEGEN_POOL=python``, or when it cannot be built)."""
    global _native_pool
    from tfxla_cluster.flags import env_switch

    if env_switch(POOL_ENV).strip().lower() == "python":
        return None
    try:
        from tfxla_cluster.codegen.engine import get_engine
        from tfxla_cluster.codegen.native_pool import ENTRY, build_module
        engine, ir_text = get_engine(), build_module(max_workers=max((os.cpu_count() or 1) - 1, 1))
        store = _persistent_store() or _InstalledPoolStore()
        _native_pool = store.load(ir_text, engine, "tfxla_native_pool", (ENTRY,))
        if _native_pool is None:
            _native_pool = engine.compile(ir_text, [ENTRY], name="tfxla_native_pool")
            store.store(ir_text, _native_pool)
        return _native_pool.address_of(ENTRY)
    except Exception:  # pragma: no cover - documented fallback: the Python pool runs the same kernels
        log.exception("native thread pool unavailable; using the Python pool")
        return None


# The runtime layer (runtime.compile_cache) registers its persistent store here: codegen sits below it and
# must not import it.
_pool_store_factory: Callable[[], Any] | None = None


def set_pool_store_factory(factory: Callable[[], Any] | None) -> None:
    """Where the pool's object code persists: ``factory()`` gives an object with ``load(ir, engine, name,
    entries)`` and ``store(ir, compiled)``, or None when the persistent cache is off."""
    global _pool_store_factory
    _pool_store_factory = factory


def _persistent_store():
    """The persistent compile cache's IR-keyed layer when one is registered and on (the pool is the same code
    in every process: a later process loads it instead of compiling it), else None."""
    return _pool_store_factory() if _pool_store_factory is not None else None


def native_cache_dir() -> Path:
    """Where the runtime's own native code lives between processes, whatever the compile cache's setting
    (the launch op's library, the pool's object code): ``$TFXLA_NATIVE_CACHE``, else
    ``$XDG_CACHE_HOME/tfxla_cluster`` or ``~/.cache/tfxla_cluster``."""
    from tfxla_cluster.flags import env_switch

    if env_switch("TFXLA_NATIVE_CACHE"):
        return Path(env_switch("TFXLA_NATIVE_CACHE"))
    base = env_switch("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfxla_cluster"


class _InstalledPoolStore:
    """The pool's object code in :func:`native_cache_dir` when the persistent compile cache is off.

    The pool is the runtime's code, not a user's: like the launch op's library it is built once per
    install (its IR, the LLVM target and pipeline key the file), sparing every later process's first call
    its compile (~30 ms). A file whose digest does not match its code (a torn or foreign file) is compiled
    again and replaced; an unwritable directory only costs the next process the compile."""

    MAGIC = b"tfxla-pool-1\0"

    @staticmethod
    def _path(ir_text: str, engine) -> Path:
        digest = hashlib.sha256(f"{engine.key}\0{ir_text}".encode()).hexdigest()[:24]
        return native_cache_dir() / f"native_pool-{digest}.o"

    def load(self, ir_text: str, engine, name: str, exports: tuple[str, ...]):
        try:
            blob = self._path(ir_text, engine).read_bytes()
        except OSError:
            return None
        head, digest, obj = blob[:len(self.MAGIC)], blob[len(self.MAGIC):len(self.MAGIC) + 32], blob[len(self.MAGIC) + 32:]
        if head != self.MAGIC or hashlib.sha256(obj).digest() != digest:
            return None
        return engine.load_object(obj, exports, name)

    def store(self, ir_text: str, library) -> None:
        from tfxla_cluster.codegen.engine import get_engine

        target = self._path(ir_text, get_engine())
        obj = library.object_code
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=target.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(self.MAGIC + hashlib.sha256(obj).digest() + obj)
            os.replace(tmp, target)   # atomic: a concurrent process never reads a half-written file
        except OSError as e:
            log.debug("Could not keep the native pool's code in %s: %s", target.parent, e)


def pool_kind() -> str:
    ensure_registered()
    return "native" if _native_pool is not None else "python"


# ---------------------------------------------------------------- registration
def ensure_registered() -> None:
    """Register the runtime symbols with LLVM (once per process)."""
    global _registered, _blas
    if _registered:
        return
    with _lock:
        if _registered:
            return
        add_symbol("tfxla_parallel_for", _native_parallel_for() or ctypes.cast(_parallel_for_c, ctypes.c_void_p).value)
        add_symbol("tfxla_bounds_fail", ctypes.cast(_bounds_fail_c, ctypes.c_void_p).value)
        add_symbol("tfxla_resolve_cold", ctypes.cast(_resolve_cold_c, ctypes.c_void_p).value)
        _blas = _find_openblas()
        if _blas:
            add_symbol("tfxla_cblas_sgemm", _blas["s"])
            add_symbol("tfxla_cblas_dgemm", _blas["d"])
        else:
            log.info("OpenBLAS not found next to numpy: GEMMs are emitted as LLVM IR loops")
        # GEMMs run on our threads, one OpenBLAS thread each (OpenBLAS's own spinning workers would fight
        # our pool for the cores); without the thread-local setter this is a no-op.
        setter = _blas.get("threads") or ctypes.cast(_threads_noop_c, ctypes.c_void_p).value
        add_symbol("tfxla_blas_threads_local", setter)
        single_thread_blas(_blas)
        _register_half_libcalls()
        _registered = True


def single_thread_blas(blas: dict[str, int]) -> bool:
    """Make every BLAS call of our kernels run on one OpenBLAS thread (our pool supplies the parallelism:
    its threads plus OpenBLAS's must not exceed the cores). With ``openblas_set_num_threads_local`` the
    kernels set it per call; an OpenBLAS older than 0.3.27 lacks it, and each of our tasks would start all
    of OpenBLAS's threads, so its process-wide count is set to 1 instead. True when that was needed."""
    if not blas or blas.get("threads") or not blas.get("global_threads"):
        return False
    log.warning("OpenBLAS has no openblas_set_num_threads_local: its thread count is set to 1")
    ctypes.CFUNCTYPE(None, ctypes.c_int)(blas["global_threads"])(1)
    return True


HALF_LIBCALLS = ("__extendhfsf2", "__truncsfhf2", "__extendhfdf2", "__truncdfhf2")


def _register_half_libcalls() -> None:
    """Make LLVM's f16 conversion libcalls resolvable. MCJIT looks symbols up in the process, and the
    Python binary does not link them: without this, f16 code for a CPU without F16C calls address 0."""
    import ctypes.util

    import llvmlite.binding as llvm

    missing = [s for s in HALF_LIBCALLS if not llvm.address_of_symbol(s)]
    if not missing:
        return
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("gcc_s") or "libgcc_s.so.1")
    except OSError:
        lib = None
    for sym in missing:
        fn = getattr(lib, sym, None) if lib is not None else None
        if fn is None:   # libgcc before GCC 12; only targets without F16C need them
            log.warning("%s not found: f16 code for CPUs without F16C cannot run", sym)
            continue
        add_symbol(sym, ctypes.cast(fn, ctypes.c_void_p).value)
