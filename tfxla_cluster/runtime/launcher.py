"""Launchers: the callable behind each cluster's launch node (TF's ``_XlaCompile`` + ``_XlaRun``).

Stage: runtime. A :class:`Launcher` receives the cluster's inputs as tensors, and per *signature*
(input dtypes and shapes, plus the values of compile-time-constant inputs, which the cluster is
specialised on as TF does) lowers the cluster (:mod:`tfxla_cluster.tf2hlo`), optimises it
(:mod:`tfxla_cluster.passes`) and compiles it (:mod:`tfxla_cluster.codegen`), caching the result in a
:class:`~tfxla_cluster.runtime.compile_cache.CompilationCache` — the one implementation of signature keys, compile
causes (logged at INFO), TF's megamorphic rule and the persistent cache (``--tf_xla_persistent_cache_*``).
When lowering or compiling refuses the cluster with a typed error, auto-clustering falls back to TF's
own kernels for that cluster with a warning naming cluster, op and reason; must-compile
(``jit_compile=True``) raises instead, and so does any InternalError or untyped exception (a bug).
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from tfxla_cluster import compile_profile
from tfxla_cluster.codegen.buffers import is_fresh
from tfxla_cluster.errors import InternalError, TfXlaError
from tfxla_cluster.graph.graph import Graph
from tfxla_cluster.mxcsr import kept_denormals
from tfxla_cluster.runtime import observers
from tfxla_cluster.tf_compat import tensor_view
from tfxla_cluster.runtime.encapsulate import ClusterSignature

log = logging.getLogger("tfxla_cluster.runtime")

def add_observer(fn: Callable[..., None]) -> None:
    """Call ``fn`` after every cluster launch in this process (:mod:`tfxla_cluster.runtime.observers`)."""
    observers.add(fn)


def remove_observer(fn: Callable[..., None]) -> None:
    observers.remove(fn)


@dataclass
class CompiledCluster:
    """One compiled signature of a cluster (the entry the launcher's CompilationCache holds)."""

    key: Any                              # compile_cache.Signature (shapes, dtypes, compile-time-constant values)
    run: Callable[..., Any]
    inputs: list                          # LoweredCluster.inputs (kinds: parameter/constant/resource)
    backend: str                          # "llvm" or "evaluator"
    compile_seconds: float
    # The HLO before and after optimisation, printed on first use (reports, debugging): printing every
    # compiled module up front cost a first call ~5% of its time. Each is a text, an HloModule, or a
    # callable making one (the pre-optimisation HLO is lowered again: the compile optimised its module
    # in place).
    hlo_source: Any = ""
    optimized_hlo_source: Any = ""
    executable: Any = None                # codegen.Executable (llvm backend): LLVM IR, kernels
    origin: str = "compiled"              # or "persistent cache", "evaluator"
    # How the launch node's values map onto the executable (the native launch op reads these):
    param_specs: list = field(default_factory=list)   # (launch input position, numpy dtype) per parameter
    output_order: list = field(default_factory=list)  # top-level result index of each value output
    updates: dict = field(default_factory=dict)       # resource input position -> result index
    # Bounded dynamic results are cut to their run-time sizes by ``run`` (the native kernel can't).
    dynamic_results: bool = False
    # Compiled ahead of its launch (runtime.ahead): the seconds the launch waited for it; None: compiled
    # at the launch.
    ahead_wait: float | None = None

    @property
    def hlo_text(self) -> str:
        """The cluster's HLO module as lowered (before the HLO passes)."""
        return self._text("hlo_source")

    @property
    def optimized_hlo_text(self) -> str:
        """The HLO module the native code was compiled from ("" for the evaluator backend)."""
        return self._text("optimized_hlo_source")

    def _text(self, attr: str) -> str:
        source = getattr(self, attr)
        if not isinstance(source, str):
            if not hasattr(source, "to_string"):
                source = source()
            source = source.to_string()
            setattr(self, attr, source)
        return source


@dataclass
class ClusterStats:
    compiles: int = 0
    executions: int = 0
    fallback_reason: str = ""
    compile_seconds: float = 0.0
    # Of compile_seconds, what launches spent on compiles (all of it, but the part of compiles done ahead
    # of their launch, runtime.ahead, that the launch did not wait for).
    launch_compile_seconds: float = 0.0
    causes: list[str] = field(default_factory=list)
    persistent_hits: int = 0              # of ``compiles``: native code loaded from the persistent cache


class Launcher:
    """Compiles and runs one cluster (see the module docstring)."""

    def __init__(self, graph: Graph, signature: ClusterSignature, *, must_compile: bool = False,
                 backend: str = "llvm", flags=None) -> None:
        self.graph = graph
        self.sig = signature
        self.must_compile = must_compile
        self.backend = backend
        self.flags = flags                    # the function's Flags (None: the environment's)
        self.const_positions: frozenset[int] | None = None  # known after the first lowering
        self._stats = ClusterStats()
        # Set by runtime.native when the cluster runs as a TfxlaLaunch node: folds the executions
        # the native kernel counted into the stats and the cache (TF's megamorphic rule needs them).
        self.native_sync: Callable[[], None] | None = None
        # Native launch nodes with variables (runtime.native): the inputs whose final value the node
        # returns; resource inputs then arrive as values, not handles.
        self.written: list[int] | None = None
        # What the owner wraps a native launch in (runtime.native calls it around each launch it serves
        # in Python): CompiledGraph profiles the first launch's compile there, as it does for a py-func.
        self.launch_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
        self._lock = threading.Lock()
        self._first_compile = threading.Lock()
        self._compilation_cache = None        # made on the first compile (it builds the JIT engine)
        self._hot: dict[tuple, CompiledCluster] = {}   # (dtype, shape) per input → entry (no constants)
        self._tf_fallback: Callable | None = None
        self._lazy: bool | None = None        # TF's kLazy compile mode (read from the flags once)
        self.ahead = None                     # runtime.ahead.AheadCompiler holding this cluster's job
        # Resource outputs (a handle passed through an Identity in the cluster, e.g. the input
        # Identity of an inlined call) are the input handle itself; everything else is a value.
        self._passthrough = signature.boundary.resource_passthrough
        self._value_outputs = [t for k, t in enumerate(signature.outputs) if k not in self._passthrough]
        # Lowering (tf2hlo, with every op family) is imported by the first compile that lowers: a cluster
        # loaded from the persistent cache never does.

    @property
    def stats(self) -> ClusterStats:
        if self.native_sync is not None:
            self.native_sync()
        return self._stats

    def resource_dtype(self, position: int) -> int:
        """The dtype of the variable behind resource input ``position`` (see ``ClusterBoundary``)."""
        return self.sig.boundary.resource_dtype(position)

    def handle_users(self, position: int):
        """The cluster members that use the resource handle at input ``position``, looking through
        pass-through members (the Identity an inlined call puts on each of its inputs)."""
        return self.sig.boundary.handle_users(position)

    @property
    def passthrough(self) -> dict[int, int]:
        """Output index -> input position of resource outputs that are an input handle passed through."""
        return self._passthrough

    @property
    def value_outputs(self) -> list[tuple[str, int]]:
        """The launch outputs the cluster computes (resource outputs passed through left out)."""
        return self._value_outputs

    # ----- compile ------------------------------------------------------------------------------
    @property
    def cache(self) -> dict:
        """Compiled signatures of this cluster: codegen ``Signature`` → :class:`CompiledCluster`."""
        return self._compilation_cache.entries(self.sig.name) if self._compilation_cache else {}

    def compilation_cache(self):
        """The :class:`~tfxla_cluster.runtime.compile_cache.CompilationCache` of this cluster (from the function's flags)."""
        with self._lock:
            if self._compilation_cache is None:
                from tfxla_cluster.runtime.compile_cache import CompilationCache

                self._compilation_cache = CompilationCache.from_flags(self.flags)
            return self._compilation_cache

    def _signature(self, arrays: list[np.ndarray]):
        from tfxla_cluster.runtime.compile_cache import Signature

        return Signature.of(arrays, self.const_positions or ())

    def _lookup(self, arrays: list[np.ndarray], lazy: bool = True) -> CompiledCluster | None:
        """The compiled signature for ``arrays`` (compiling on a miss); None when the cache says the
        cluster is megamorphic, or (``lazy``) when TF's lazy compilation runs this request on TF's
        kernels. Compile errors propagate."""
        cache = self.compilation_cache()
        if self.const_positions is not None:
            return self._get_or_compile(cache, arrays, lazy)
        # Which inputs are compile-time constants (and so part of the key) is known only once the
        # cluster has been lowered: the first compile runs alone and is re-keyed afterwards.
        with self._first_compile:
            if self.const_positions is not None:
                return self._get_or_compile(cache, arrays, lazy)
            from tfxla_cluster.runtime.compile_cache import Signature

            compiled = self._get_or_compile(cache, arrays, lazy)
            if compiled is not None and self.const_positions:
                compiled.key = self._signature(arrays)
                cache.rekey(self.sig.name, Signature.of(arrays), compiled.key)
            if self.const_positions is None:
                self.const_positions = frozenset()
            return compiled

    def _lazy_compilation(self) -> bool:
        """TF's compile mode for this cluster is kLazy: auto-clustered with --tf_xla_enable_lazy_compilation."""
        if self.must_compile:
            return False
        if self._lazy is None:
            from tfxla_cluster.flags import Flags

            self._lazy = bool((self.flags or Flags.from_env()).tf_xla_enable_lazy_compilation)
        return self._lazy

    def _get_or_compile(self, cache, arrays: list[np.ndarray], lazy: bool = True) -> CompiledCluster | None:
        signature = self._signature(arrays)
        result = cache.get_or_create(self.sig.name, signature, lambda: self._create(arrays, signature),
                                     strict=self.must_compile, lazy=lazy and self._lazy_compilation())
        if result.executable is None and result.cause == "lazy":
            return None   # this request runs on TF's kernels; the next one with this signature compiles
        if result.executable is None:
            st = cache.clusters[self.sig.name]
            with self._lock:
                self._stats.fallback_reason = f"megamorphic: {st.compiles} compiles for {st.executions} executions"
            return None
        if result.compiled:
            with self._lock:
                self._stats.compiles += 1
                self._stats.compile_seconds += result.executable.compile_seconds
                wait = result.executable.ahead_wait
                self._stats.launch_compile_seconds += result.executable.compile_seconds if wait is None else wait
                self._stats.persistent_hits += result.executable.origin == "persistent cache"
                self._stats.causes.append(result.cause)
            from tfxla_cluster import progress

            progress.note(f"compiled {self.sig.name}")
        return result.executable

    def _create(self, arrays: list[np.ndarray], key) -> CompiledCluster:
        """The CompilationCache's create step: the entry compiled ahead for ``key`` (runtime.ahead), else
        compiled now."""
        ahead, self.ahead = self.ahead, None   # one job, for the first signature the cache creates
        compiled = ahead.take(self, key) if ahead is not None else None
        if compiled is None:
            compiled = self.compile_signature(arrays, key)
        self._learn_constants(compiled)
        return compiled

    def _learn_constants(self, compiled: CompiledCluster) -> None:
        """After the first compile: which launch inputs are compile-time constants (part of the key)."""
        if self.const_positions is None:
            by_tensor = {t: i for i, t in enumerate(self.sig.inputs)}
            self.const_positions = frozenset(by_tensor[i.tensor] for i in compiled.inputs  # + kConstantResource
                                             if i.kind == "constant" or i.value is not None)

    def compile_signature(self, arrays: list[np.ndarray], key) -> CompiledCluster:
        """The pipeline's per-signature stages for ``arrays`` (the CompilationCache's create step, as
        TF's ``_XlaCompile``): lower the cluster's boundary, optimise the module, compile native code.
        The launcher is left unchanged (runtime.ahead compiles with it on another thread)."""
        t0 = time.perf_counter()
        from tensorflow.core.framework import types_pb2

        # Resources are specified by their current value (dtype and shape), other inputs by shape.
        shapes = {t: (a if dt == types_pb2.DT_RESOURCE else a.shape)
                  for t, a, dt in zip(self.sig.inputs, arrays, self.sig.input_dtypes)}
        consts = {t: a for t, a in zip(self.sig.inputs, arrays)}
        by_tensor = {t: i for i, t in enumerate(self.sig.inputs)}
        # The persistent cache keyed before lowering (compile_cache.cluster_key): a hit skips lowering,
        # the HLO passes, IR emission and LLVM.
        stored = cache = cluster_key = None
        if self.backend == "llvm":
            cache = self.compilation_cache()
            cluster_key = cache.cluster_key(self.sig.boundary, arrays, flags=self.flags, must_compile=self.must_compile)
            stored = cache.load_cluster(cluster_key, self.sig.name, lambda: self._emit_again(inputs, shapes, consts))
        if stored is not None:
            code, executable = stored
            inputs, param_specs, order, updates = code.inputs, code.param_specs, code.output_order, code.updates
            trims: list[tuple[int, Any, int]] = []   # never stored with bounded dynamic results (below)
            hlo_source = self._relower(inputs, shapes, consts)
            optimized_source: Any = lambda: self._optimize(hlo_source())
            origin = executable.origin
        else:
            from tfxla_cluster.tf2hlo.lower import lower_boundary
            from tfxla_cluster.tf2hlo.registry import lowered_ops

            with compile_profile.stage("lowering"):
                # Every op family is loaded (under the registry's lock) before this thread lowers: TF runs
                # independent launch nodes concurrently.
                lowered_ops()
                lowered = lower_boundary(self.sig.boundary, arg_shapes=shapes, const_args=consts)
            inputs = lowered.inputs
            # (launch-node input position, numpy dtype) of every HLO parameter, in parameter order.
            param_specs = [(by_tensor[inp.tensor], inp.element_type.dtype) for inp in lowered.parameters]
            out_index = lowered.output_tensors()
            missing = [t for t in self._value_outputs if t not in out_index]
            if missing:
                raise InternalError(f"cluster {self.sig.name}: lowering produced no value for {missing}")
            order = [out_index[t] for t in self._value_outputs]
            # Resource variables: the cluster's final value of each, written back after the run.
            updates = {by_tensor[lowered.inputs[i].tensor]: k for i, k in lowered.resource_updates().items()}
            # Bounded dynamic results (NonMaxSuppressionV3): (result, bound, size result) cut at each run.
            trims = [(o.index, o.dynamic[0], o.dynamic[1]) for o in lowered.outputs if o.dynamic is not None]
            hlo_source: Any = lowered.module
            optimized_source = ""
            executable = None
            origin = "evaluator"
            if self.backend == "llvm":
                # The passes rewrite the lowered module in place (no deep copy: it cost as much as a pass);
                # its text, if ever asked for, comes from lowering the cluster again.
                hlo_source = self._relower(inputs, shapes, consts)
                report = self._optimize_with_report(lowered.module)
                # the LLVM IR is dumped beside the HLO, under its module id, only where the flags say
                executable = cache.compile(report.module, dumper=report.dumper, dump_from_env=False)
                origin = executable.origin
                optimized_source = self._optimized_again(hlo_source, executable)
                if not trims:   # the entry has no room for the run-time cut of dynamic results
                    cache.store_cluster(cluster_key, executable, inputs=inputs, param_specs=param_specs,
                                        output_order=order, updates=updates)
        if trims:
            from tfxla_cluster.tf2hlo.bounded_dynamic import trim
        if executable is not None:
            def run(arrs: list[np.ndarray]) -> list[np.ndarray]:
                # np.asarray, not np.ascontiguousarray: the latter turns 0-d arrays into shape [1].
                params = [np.asarray(arrs[p], dtype=dtype, order="C") for p, dtype in param_specs]
                result = executable(*params)
                result = result if isinstance(result, (tuple, list)) else (result,)
                if trims:
                    result = list(result)
                    for k, bound, size_k in trims:
                        result[k] = trim(result[k], bound, result[size_k])
                return ([np.asarray(result[k]) for k in order],
                        {p: np.asarray(result[k]) for p, k in updates.items()})
        else:
            def run(arrs: list[np.ndarray]) -> list[np.ndarray]:
                ordered = [None] * len(lowered.inputs)
                for inp in lowered.inputs:
                    ordered[inp.index] = arrs[by_tensor[inp.tensor]]
                result = lowered.trim_results(lowered.run(*ordered))
                return ([np.asarray(result[k]) for k in order],
                        {p: np.asarray(result[k]) for p, k in updates.items()})
        seconds = time.perf_counter() - t0
        return CompiledCluster(key, run, inputs, self.backend, seconds, hlo_source, optimized_source,
                               executable, origin, param_specs, order, updates, bool(trims))

    def _optimize_with_report(self, module, flags=None) -> Any:
        from tfxla_cluster.flags import Flags
        from tfxla_cluster.passes.pipeline import optimize_with_report

        # the function's own flags (its XLA_FLAGS part too), else the environment's
        flags = flags if flags is not None else (self.flags or Flags.from_env())
        return optimize_with_report(module, flags, cluster=self.sig.name)

    def _optimize(self, module, flags=None) -> Any:
        return self._optimize_with_report(module, flags).module

    def _optimized_again(self, lower: Callable[[], Any], executable) -> Callable[[], Any]:
        """After a compile: the optimised module made again on need (its text, the cold code), so that the
        entry keeps no HloModule — ~10k Python objects a mid-size cluster, which every full collection of
        the cyclic GC would walk for as long as the function lives. The module is the same: lowering and
        the passes are deterministic (the persistent cache's entries rely on it too)."""
        def again() -> Any:
            from tfxla_cluster.flags import Flags

            flags = self.flags or Flags.from_env()   # what the compile's passes read; a dump is not written twice
            return self._optimize(lower(), flags.replace(xla_dump_to="") if flags.xla_dump_to else flags)
        executable.cold_from(again)
        return again

    def _emit_again(self, inputs: list, shapes: dict, consts: dict) -> str:
        """The LLVM IR of this signature, lowered, optimised and emitted again (an executable loaded from
        the persistent cache keeps no IR)."""
        from tfxla_cluster.codegen.executable import emit_module

        return emit_module(self._optimize(self._relower(inputs, shapes, consts)()), self.compilation_cache().options)[1]

    def _relower(self, inputs: list, shapes: dict, consts: dict) -> Callable[[], Any]:
        """A function lowering this signature again (the same module: lowering is deterministic), holding
        no input buffers: resources by a zero-stride stand-in of their dtype and shape, and only the
        compile-time-constant inputs' values (copied)."""
        kept_shapes = {t: (np.broadcast_to(np.zeros((), v.dtype), v.shape) if isinstance(v, np.ndarray) else v)
                       for t, v in shapes.items()}
        kept_consts = {i.tensor: np.array(consts[i.tensor]) for i in inputs
                       if (i.kind == "constant" or i.value is not None) and i.tensor in consts}
        boundary = self.sig.boundary

        def lower() -> Any:
            from tfxla_cluster.tf2hlo.lower import lower_boundary

            return lower_boundary(boundary, arg_shapes=kept_shapes, const_args=kept_consts).module
        return lower

    # ----- run ----------------------------------------------------------------------------------
    def __call__(self, *tensors: Any) -> list[np.ndarray]:
        arrays, handles = self._arrays(tensors)
        return self._with_passthrough(self._run(tensors, arrays, handles), tensors)

    def compile_for(self, *tensors: Any) -> CompiledCluster | None:
        """The compiled entry for a launch on ``tensors`` (the launch node's inputs), compiling it on a miss
        without running it: variables are read, never written (TF's ``experimental_get_compiler_ir``)."""
        return self._lookup(self._arrays(tensors)[0], lazy=False)

    def _arrays(self, tensors: tuple) -> tuple[list[np.ndarray], dict[int, tuple[Any, int]]]:
        """The launch's input values, and the variable handles among them (position -> (handle, dtype))."""
        from tensorflow.core.framework import types_pb2

        arrays: list[np.ndarray] = []
        handles: dict[int, tuple[Any, int]] = {}
        for i, t in enumerate(tensors):
            if self.sig.input_dtypes[i] == types_pb2.DT_RESOURCE:
                # A variable: the cluster reads its value now and writes it back after the run, as
                # XlaLaunch snapshots resource variables.
                dtype = self.resource_dtype(i)
                handles[i] = (t, dtype)
                arrays.append(_read_variable(t, dtype))
            else:
                # A view of the tensor's buffer; .numpy() would copy it.
                arrays.append(tensor_view(t))
        return arrays, handles

    def _with_passthrough(self, values: list, tensors: tuple) -> list:
        """The launch node's outputs: computed values, with resource outputs as their input handles."""
        if not self._passthrough:
            return values
        it = iter(values)
        return [tensors[self._passthrough[k]] if k in self._passthrough else next(it)
                for k in range(len(self.sig.outputs))]

    def _run(self, tensors: tuple, arrays: list[np.ndarray], handles: dict[int, tuple[Any, int]]) -> list:
        return self.run_observed(tensors, arrays, handles)[0]

    def run_observed(self, tensors: tuple, arrays: list[np.ndarray], handles: dict[int, tuple[Any, int]] | None,
                     updates_out: dict | None = None) -> tuple[list, CompiledCluster | None]:
        """(value outputs, the CompiledCluster that ran or None), observers called. With ``handles``
        None (the native op, which holds the variables locked), ``tensors`` and ``arrays`` carry the
        variables' values and their new values go to ``updates_out`` (input position -> array)."""
        if not observers.OBSERVERS:
            return self._run_unobserved(tensors, arrays, handles, updates_out)
        t0 = time.perf_counter()
        outputs, compiled = self._run_unobserved(tensors, arrays, handles, updates_out)
        seconds = time.perf_counter() - t0
        for fn in list(observers.OBSERVERS):
            fn(self, compiled, arrays, outputs, seconds)
        return outputs, compiled

    def _run_unobserved(self, tensors: tuple, arrays: list[np.ndarray], handles: dict[int, tuple[Any, int]] | None,
                        updates_out: dict | None = None) -> tuple[list, CompiledCluster | None]:
        """(outputs, the CompiledCluster that produced them or None when TF's kernels did)."""
        if self.sig.boundary.duplicate_variable:
            from tfxla_cluster.errors import UnimplementedError
            raise UnimplementedError("Duplicate variable passed to XLA cluster")   # TF's XlaCompile, as it locks them
        if self._stats.fallback_reason:
            return self._run_tf(list(tensors), updates_out if handles is None else None), None
        # Without compile-time-constant inputs, dtypes and shapes alone pick the entry: a plain tuple
        # lookup skips building the cache's Signature on every launch.
        hot = tuple((a.dtype.str, a.shape) for a in arrays) if self.const_positions == frozenset() else None
        compiled = self._hot.get(hot) if hot is not None else None
        if compiled is None:
            try:
                compiled = self._lookup(arrays)
            except TfXlaError as e:
                # Auto-clustering: a cluster we refuse with a typed error (an op or dtype without a
                # lowering, a shape or constant we can't specialise on) runs on TF's kernels, as
                # XlaCompileOp falls back to the cluster's function when compilation is refused.
                # Must-compile raises; so does an InternalError (our own bug) and any untyped
                # exception, which never reach here as silent fallbacks.
                if self.must_compile or isinstance(e, InternalError):
                    raise
                return self._fall_back(list(tensors), f"{type(e).__name__}: {str(e).splitlines()[0]}",
                                       updates_out if handles is None else None), None
            if compiled is None:  # megamorphic (the cache warned), or lazy compilation's first request
                if not self._stats.fallback_reason:   # lazy: TF counts the execution (its megamorphic rule)
                    with self._lock:
                        self._stats.executions += 1
                    self._compilation_cache.record_execution(self.sig.name)
                return self._run_tf(list(tensors), updates_out if handles is None else None), None
            if hot is not None:
                self._hot[hot] = compiled
        with self._lock:
            self._stats.executions += 1
        self._compilation_cache.record_execution(self.sig.name)
        outputs, updates = _unshared(*compiled.run(arrays))
        if handles is None:
            updates_out.update(updates)
        else:
            for position, value in updates.items():
                _assign_variable(handles[position][0], value)
        return outputs, compiled

    # ----- measuring (the report) ---------------------------------------------------------------
    def tf_graph_runner(self) -> Callable[[list], list[np.ndarray]]:
        """The cluster's nodes on TF's kernels as one TF graph function (TF's executor, so independent
        ops run concurrently as in the program); ``run(tensors)`` -> value outputs."""
        return _tf_subgraph_runner(self.graph, self.sig, self._value_outputs)

    def run_on_tf(self, tensors: list) -> list[np.ndarray]:
        """The cluster's nodes on TF's kernels as the fallback runs them (value outputs)."""
        return self._run_tf(list(tensors))

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        """Launches inside are not the program's: observers do not see them, and this launcher's
        statistics (launch counts, compiles, causes, fallback) are restored afterwards."""
        st = self.stats
        saved = (st.executions, st.compiles, list(st.causes), st.compile_seconds, st.launch_compile_seconds,
                 st.fallback_reason)
        watching = list(observers.OBSERVERS)
        observers.OBSERVERS.clear()
        try:
            yield
        finally:
            observers.OBSERVERS.extend(watching)
            (st.executions, st.compiles, st.causes, st.compile_seconds, st.launch_compile_seconds,
             st.fallback_reason) = saved

    def _fall_back(self, tensors: list, reason: str, updates_out: dict | None = None) -> list[np.ndarray]:
        self._stats.fallback_reason = reason
        log.warning("Cluster %s falls back to TF's kernels: %s", self.sig.name, reason)
        return self._run_tf(tensors, updates_out)

    def _run_tf(self, tensors: list, updates_out: dict | None = None) -> list[np.ndarray]:
        """Run the cluster's nodes on TF's own kernels (the subgraph, inputs fed as placeholders;
        resource handles are passed through, so variable ops act on the real variables). With
        ``updates_out`` (the native op holds the variables), resource inputs are values: the nodes act
        on temporary variables holding them, whose final values go to ``updates_out``."""
        if self._tf_fallback is None:
            self._tf_fallback = (_eager_subgraph_runner(self.graph, self.sig, self._value_outputs) or
                                 _tf_subgraph_runner(self.graph, self.sig, self._value_outputs))
        if updates_out is None:
            return self._tf_fallback(tensors)
        import tensorflow as tf
        from tensorflow.core.framework import types_pb2

        temps = {p: tf.Variable(tensors[p]) for p, dt in enumerate(self.sig.input_dtypes)
                 if dt == types_pb2.DT_RESOURCE}
        outputs = self._tf_fallback([temps[p].handle if p in temps else t for p, t in enumerate(tensors)])
        updates_out.update({p: v.numpy() for p, v in temps.items() if self.written is None or p in self.written})
        return outputs


def _unshared(outputs: list, updates: dict) -> tuple[list, dict]:
    """Outputs and variable values with no two sharing memory (one HLO result can feed several launch
    outputs, or an output and a variable): each goes to TF zero-copy, and TF may write into a buffer
    it believes it owns alone (variable updates in place, input forwarding)."""
    seen: set[int] = set()

    def own(a):
        if isinstance(a, np.ndarray) and a.size:
            if a.ctypes.data in seen:
                return np.array(a, copy=True)
            seen.add(a.ctypes.data)
        return a
    outputs = [own(a) for a in outputs]
    return outputs, {p: own(a) for p, a in updates.items()}


def _read_variable(handle: Any, dtype: int) -> np.ndarray:
    import tensorflow as tf

    return tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.as_dtype(dtype)).numpy()


def _assign_variable(handle: Any, value: np.ndarray) -> None:
    import tensorflow as tf

    tf.raw_ops.AssignVariableOp(resource=handle, value=to_tensor(value))


_DLPACK_KINDS = frozenset("fiucb")   # numpy kinds DLPack and TF's from_dlpack both take (not bfloat16)
_TF_ALIGN = 64                       # EIGEN_MAX_ALIGN_BYTES: TF's kernels map CPU buffers as aligned


def to_tensor(value: Any) -> Any:
    """A launch output (numpy array, or a TF tensor passed through) as an EagerTensor.

    Stage: runtime, the hand-back to TF. An executable's fresh output buffer (``codegen.buffers
    .FreshArray``: allocated for this call, never written by us again) that is C-contiguous, writable,
    64-byte aligned and of a DLPack dtype becomes a tensor over the *same* memory (``from_dlpack``;
    the tensor keeps the array alive). Anything else is copied by ``tf.convert_to_tensor``: TF may
    write into a buffer it thinks it owns alone (input forwarding), which must never be one of ours
    that is still in use, nor a view of another tensor.
    """
    import tensorflow as tf

    if (isinstance(value, np.ndarray) and value.dtype.kind in _DLPACK_KINDS and value.size
            and value.flags.c_contiguous and value.flags.writeable and value.ctypes.data % _TF_ALIGN == 0
            and is_fresh(value)):
        return tf.experimental.dlpack.from_dlpack(np.asarray(value).__dlpack__())
    return tf.convert_to_tensor(np.asarray(value) if isinstance(value, np.ndarray) else value)


def _tf_subgraph_runner(graph: Graph, sig: ClusterSignature,
                        outputs: list[tuple[str, int]]) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    gd.versions.CopyFrom(graph.graph_def.versions)
    gd.library.CopyFrom(graph.graph_def.library)
    feeds = {}
    for i, (name, slot) in enumerate(sig.inputs):
        ph = gd.node.add(name=f"tfxla_input_{i}", op="Placeholder")
        ph.attr["dtype"].type = sig.input_dtypes[i]
        feeds[(name, slot)] = ph.name
    members = set(sig.members)
    for name in sig.members:
        nd = gd.node.add()
        nd.CopyFrom(graph.node(name).node_def)
        refs = []
        for ref in nd.input:
            if ref.startswith("^"):
                if ref[1:] in members:
                    refs.append(ref)
                continue
            src, _, idx = ref.partition(":")
            t = (src, int(idx or 0))
            refs.append(ref if src in members else feeds[t])
        del nd.input[:]
        nd.input.extend(refs)
    fetches = [f"{n}:{i}" for n, i in outputs]
    inputs = [f"tfxla_input_{i}:0" for i in range(len(sig.inputs))]
    fn = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(gd, name=""), [])
    pruned = fn.prune([fn.graph.get_tensor_by_name(x) for x in inputs],
                      [fn.graph.get_tensor_by_name(x) for x in fetches])

    def run(tensors: list) -> list[np.ndarray]:
        return [np.asarray(t) for t in pruned(*tensors)]
    return run


def _eager_attr(value: Any, attr_type: str) -> Any:
    """A NodeDef AttrValue as the Python value TF's eager ``execute`` takes for an attr of ``attr_type``."""
    import tensorflow as tf

    def shape(proto: Any) -> Any:
        return tf.TensorShape(proto).as_list() if not proto.unknown_rank else None

    if attr_type.startswith("list("):
        lst = value.list
        return {"list(int)": list(lst.i), "list(float)": list(lst.f), "list(bool)": list(lst.b),
                "list(string)": list(lst.s), "list(type)": list(lst.type),
                "list(shape)": [shape(p) for p in lst.shape]}[attr_type]
    return {"int": lambda: value.i, "float": lambda: value.f, "bool": lambda: value.b,
            "string": lambda: value.s, "type": lambda: value.type,
            "shape": lambda: shape(value.shape)}[attr_type]()


def _eager_subgraph_runner(graph: Graph, sig: ClusterSignature,
                           outputs: list[tuple[str, int]]) -> Callable[[list], list[np.ndarray]] | None:
    """Run the cluster's nodes one by one as eager ops (None if some node can't run that way).

    The launch node runs on one of TF's inter-op threads. A nested TF *function* would schedule its
    kernels on that same pool, so launch nodes falling back at the same time can take every thread
    of the pool and deadlock (two of them do on a 2-core machine). Eager ops run inline on the
    calling thread. Nodes run in topological order; control edges inside the cluster are implied.
    """
    import tensorflow as tf
    from tfxla_cluster.tf_compat import eager_context, eager_execute, op_def as registered_op_def

    members = set(sig.members)
    steps = []
    for node in graph.topological_order():
        if node.name not in members:
            continue
        nd = node.node_def
        op_def = registered_op_def(nd.op)
        if op_def is None:
            return None  # a function call: the function runner below handles it
        types = {a.name: a.type for a in op_def.attr}
        if nd.op in ("Const", "HostConst"):
            with kept_denormals():  # float_val goes through Python floats, which DAZ would flush
                value = tf.make_ndarray(nd.attr["value"].tensor)
            steps.append((node, None, value))
            continue
        if any(t not in ("int", "float", "bool", "string", "type", "shape") and not
               (t.startswith("list(") and t[5:-1] in ("int", "float", "bool", "string", "type", "shape"))
               for name, t in types.items() if name in nd.attr):
            return None  # tensor/func attrs: not representable in the eager attr tuple
        attrs: list[Any] = []
        for name, t in types.items():
            if name in nd.attr:
                attrs += [name, _eager_attr(nd.attr[name], t)]
        steps.append((node, tuple(attrs), None))
    feeds = {t: i for i, t in enumerate(sig.inputs)}

    def run(tensors: list) -> list[np.ndarray]:
        ctx = eager_context()
        values: dict[tuple[str, int], Any] = {}
        for node, attrs, const in steps:
            if attrs is None:
                values[(node.name, 0)] = tf.constant(const)
                continue
            inputs = []
            for e in node.data_inputs():
                t = (e.src.name, e.src_output)
                inputs.append(values[t] if t in values else tf.convert_to_tensor(tensors[feeds[t]]))
            outs = eager_execute(node.op, len(node.outputs), inputs, attrs, ctx)
            for i, v in enumerate(outs or []):
                values[(node.name, i)] = v
        return [np.asarray(values[t]) for t in outputs]
    return run
