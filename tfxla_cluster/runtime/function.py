"""``tfxla_cluster.function``: a drop-in for ``tf.function`` whose clusters run through our pipeline.

Stage: the user API. For each traced signature (TF's own tracing and retracing rules apply) the
concrete function goes through :func:`tfxla_cluster.runtime.pipeline.compile_concrete` (import → mark →
encapsulate → TF import; lower → optimise → compile at each cluster's first launch of a signature);
calls run TF's function over the rewritten graph, or the single launch node directly.

Results are TF tensors with the function's own output structure.
"""
from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from tfxla_cluster import compile_profile, tf_compat
from tfxla_cluster._gc import collect_before_resume, gc_paused
from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP
from tfxla_cluster.runtime import arguments


class CompiledGraph:
    """One traced signature: the rewritten graph, its launchers and the callable that runs it (built by
    :func:`tfxla_cluster.runtime.pipeline.compile_concrete`)."""

    def __init__(self, concrete, *, jit_compile: bool | None, flags, grappler: bool, backend: str,
                 profile: "compile_profile.CompileProfile | None" = None) -> None:
        from tfxla_cluster.runtime.pipeline import compile_concrete

        self.concrete = concrete
        self.profile = profile
        self._profiled: set[str] = set()   # clusters whose first launch was profiled
        self._jit_compile = jit_compile
        # Grappler already rewrote the graph (or never sees it, jit_compile=True): TF's runtime must not
        # run it again when it instantiates the rewritten function.
        self._grappled = grappler or jit_compile is True
        self._created_at = None
        # Launch errors raised inside TF's EagerPyFunc, which reports them as UNKNOWN (or
        # INVALID_ARGUMENT for a ValueError) with a Python traceback: the call re-raises the original.
        self._launch_errors: collections.deque = collections.deque(maxlen=8)
        self._first_call = True
        self._settings = dict(jit_compile=jit_compile, flags=flags, grappler=grappler, backend=backend)
        self._taped = None   # gradients.TapedCalls, made on the first call a tape watches
        self._ahead_planned = False   # runtime.ahead: the clusters' compiles started at the first eager run
        self.ahead = None             # its AheadCompiler (None: nothing compiled ahead)
        program = compile_concrete(concrete, jit_compile=jit_compile, flags=flags, grappler=grappler,
                                   backend=backend, py_launch=self._py_launch, on_native=self._on_native,
                                   profile=profile)
        self.graph, self.clusters, self.mark_result = program.graph, program.clusters, program.mark_result
        self.graph_def, self.signatures, self.launchers = program.graph_def, program.signatures, program.launchers
        self._fn, self._num_outputs, self._callbacks = program.fn, program.num_outputs, program.keep
        # The number of the caller's flat arguments (the captured inputs follow them), and whether the
        # result is one plain tensor (returned as is: TF's pack_sequence_as costs ~5 µs a call).
        self.num_args = len(concrete.inputs) - len(concrete.captured_inputs)
        self._single_tensor = _is_plain_tensor(concrete.structured_outputs)
        self._direct = _direct_plan(self.graph_def, self.signatures, self.launchers, self._launch, self.tf_error,
                                    self._take_launch_error)

    def _on_native(self, launcher) -> None:
        launcher.on_error = self._launch_error
        # The native op serves a new signature in Python, on TF's thread: profile it there.
        launcher.launch_context = lambda: self._profiling(launcher)

    def _py_launch(self, launcher) -> Callable[..., list]:
        """The py-func body of ``launcher``'s launch node: its outputs as eager tensors; an error is
        kept in TF's form for the caller to re-raise (EagerPyFunc would report it as UNKNOWN)."""
        from tfxla_cluster.runtime.launcher import to_tensor

        def call(*tensors):
            try:
                return [to_tensor(a) for a in self._launch(launcher, tensors)]
            except Exception as e:  # any launch error: re-raised as TF's class with the original message
                raise _across_py_func(self._launch_error(e)) from None
        return call

    def _launch(self, launcher, tensors) -> list:
        """Run ``launcher`` (its first launch profiled)."""
        with self._profiling(launcher):
            return launcher(*tensors)

    @contextlib.contextmanager
    def _profiling(self, launcher) -> Iterator[None]:
        """Around a launch of ``launcher``: its first launch is profiled — the compile's stages (recorded
        by the stages themselves, on this thread) and the rest of the launch as ``run``."""
        profile = self.profile
        name = launcher.sig.name
        if profile is None or name in self._profiled:
            yield
            return
        self._profiled.add(name)
        # What the launch spent compiling: a compile done ahead (runtime.ahead) costs it only its wait. What
        # this thread recorded meanwhile is the compile's stages (another cluster's, compiled while it waited,
        # included): other threads' launches record into the same profile concurrently.
        own, compiled_before = profile.thread_seconds(), launcher.stats.launch_compile_seconds
        t0 = time.perf_counter()
        with compile_profile.collecting(profile, name):
            yield
        elapsed = time.perf_counter() - t0
        compile_s = launcher.stats.launch_compile_seconds - compiled_before
        profile.add("compile-other", max(0.0, compile_s - (profile.thread_seconds() - own)), name)
        profile.add("run", max(0.0, elapsed - compile_s), name)

    def __call__(self, flat_inputs: list) -> Any:
        return self.call_structured(flat_inputs, self.concrete.captured_inputs)

    def call_structured(self, flat_inputs: list, captured_inputs: list) -> Any:
        """The function's structured result for ``flat_inputs`` and ``captured_inputs`` (TF's
        ``ConcreteFunction._call_flat``); an eager call a tape watches runs TF's forward/backward pair
        through our pipeline (:mod:`tfxla_cluster.runtime.gradients`)."""
        import tensorflow as tf

        if tf_compat.tape_could_record():
            from tfxla_cluster.runtime import gradients

            if not tf.executing_eagerly():
                # Inside another function's trace with a tape: TF's own call op, whose gradient TF builds
                # from this graph; the caller's clustering (ours or TF's) takes the must-compile call.
                return tf_compat.call_flat(self.concrete)(list(flat_inputs), list(captured_inputs))
            if self._taped is None:
                self._taped = gradients.TapedCalls(self._compile_related)
            result = self._taped.call(self.concrete, flat_inputs, captured_inputs)
            if result is not gradients.UNWATCHED:
                return result
        outputs = self.run_flat([*flat_inputs, *captured_inputs])
        if self._single_tensor:
            return outputs[0]
        if self.concrete.structured_outputs is None:
            return None  # a function that returns nothing (TF's ConcreteFunction returns None too)
        # TF's own packing: a backward function's structure has None for inputs without a gradient.
        return self.concrete.function_type.pack_output(outputs)

    def _compile_related(self, concrete) -> "CompiledGraph":
        """A function TF derived from this one (the forward or backward function of a taped call),
        compiled with this one's settings, its first calls profiled with it."""
        return CompiledGraph(concrete, profile=self.profile, **self._settings)

    def run_flat(self, args: list) -> list:
        """The rewritten graph run on ``args`` (the inputs, then the captured inputs): its flat outputs."""
        import tensorflow as tf

        # The direct launch runs now, on values: only when executing eagerly (inside another function's
        # trace — Keras compiles train steps — the call must become a graph op, as TF's own would).
        if self._direct is not None and self._direct.run is not None and tf.executing_eagerly():
            outputs = self._direct.run(args)
        else:
            # The pruned function has no Python signature; calling it positionally makes TF try (and
            # fail, formatting every tensor) a structured bind first. The flat call is what that falls
            # back to.
            call_flat = tf_compat.call_flat(self._fn)
            first_run = not self._ahead_planned and tf.executing_eagerly()
            if first_run:
                self._start_ahead()
                mark, t0 = (len(self.profile.records), time.perf_counter()) if self.profile is not None else (0, 0.0)
            try:
                if self._first_call and len(self.launchers) > 1:
                    outputs = self._first_call_with_progress(call_flat, args)
                elif self._grappled:
                    outputs = tf_compat.without_grappler(lambda: call_flat(args, self._fn.captured_inputs)
                                                         if call_flat else self._fn(*args))
                else:
                    outputs = call_flat(args, self._fn.captured_inputs) if call_flat else self._fn(*args)
            except tf.errors.OpError as e:
                original = self._take_launch_error(e)
                if original is None:
                    raise
                raise original from None
            finally:
                if first_run and self.profile is not None:
                    # TF's runtime outside the launches (which record their own time, on TF's threads).
                    self.profile.add("tf-run", max(0.0, time.perf_counter() - t0
                                                   - compile_profile.seconds_since(mark, self.profile)))
            outputs = list(outputs or [])[:self._num_outputs]  # control outputs come back as None
        return outputs

    def _start_ahead(self) -> None:
        """Start compiling the clusters ahead of their launches (runtime.ahead): the graph runs now."""
        from tfxla_cluster.runtime import ahead

        self._ahead_planned = True
        launcher = next(iter(self.launchers.values()), None)
        if launcher is not None:
            self.ahead = ahead.start(self.graph, self.clusters, self.launchers, launcher.flags, self._traced_shape)

    def _traced_shape(self, name: str, slot: int) -> tuple | None:
        """The static dims TF's tracing gave tensor ``name:slot`` of the function's graph, or None (a node
        grappler made, an unknown dimension)."""
        try:
            shape = self.concrete.graph.get_operation_by_name(name).outputs[slot].shape
        except (KeyError, ValueError, IndexError):
            return None
        return tuple(shape.as_list()) if shape.rank is not None else None

    def _first_call_with_progress(self, call_flat, args: list):
        """The first call compiles every cluster it launches: on a terminal, a bar counts them."""
        from tfxla_cluster import progress

        def run():
            call = lambda: call_flat(args, self._fn.captured_inputs) if call_flat else self._fn(*args)  # noqa: E731
            return tf_compat.without_grappler(call) if self._grappled else call()
        if not tf_executing_eagerly():
            return run()  # inside another function's trace: nothing runs (or compiles) now
        self._first_call = False
        if progress.busy():
            return run()  # a command's own task (e.g. report's) counts these compiles
        name = self.concrete.name.decode() if isinstance(self.concrete.name, bytes) else self.concrete.name
        with progress.task(f"compiling the clusters of {name}", total=len(self.launchers)):
            return run()

    def tf_error(self, e: Exception) -> Exception:
        """A launch error as TF reports it: its ``tf.errors`` class, and for a ``jit_compile=True``
        function TF's tf2xla form naming the node and the function."""
        if self._jit_compile is True:
            from tfxla_cluster.jit import must_compile

            if self._created_at is None:
                self._created_at = must_compile.CreationStacks(self.concrete)
            e = must_compile.conversion_error(e, self.concrete.function_def.signature.name, self._created_at)
        return _as_tf_error(e)

    def _launch_error(self, e: Exception) -> Exception:
        """A launch error raised inside TF's graph runtime, in TF's form, kept for the caller to re-raise."""
        err = self.tf_error(e)
        self._launch_errors.append(err)
        return err

    def _take_launch_error(self, raised: Exception) -> Exception | None:
        """The launch error behind ``raised`` (TF's wrapping of it by EagerPyFunc or the native op's
        "Graph execution error"), if it was ours."""
        text = str(raised)
        for err in reversed(self._launch_errors):
            first = (str(err).strip().splitlines() or [""])[0]
            if first and first in text:
                self._launch_errors.remove(err)
                return err
        return None


def _is_plain_tensor(structure: Any) -> bool:
    """Whether a function's structured output is one dense ``tf.Tensor`` (not a composite, not nested)."""
    import tensorflow as tf

    return isinstance(structure, tf.Tensor)


def tf_executing_eagerly() -> bool:
    import tensorflow as tf

    return tf.executing_eagerly()


class _PyFuncInvalidArgument(ValueError):
    """Carries an INVALID_ARGUMENT launch error out of TF's EagerPyFunc, which maps ValueError (and
    only it) to INVALID_ARGUMENT — so a launch inside another traced function keeps TF's class."""


class _PyFuncUnimplemented(NotImplementedError):
    """The same for UNIMPLEMENTED (EagerPyFunc maps NotImplementedError to it)."""


def _across_py_func(err: Exception) -> Exception:
    import tensorflow as tf

    if isinstance(err, tf.errors.InvalidArgumentError):
        return _PyFuncInvalidArgument(str(err))
    if isinstance(err, tf.errors.UnimplementedError):
        return _PyFuncUnimplemented(str(err))
    return err


@dataclass
class DirectLaunch:
    """How a call runs a rewritten graph that is one launch node between the ``_Arg``s and the ``_Retval``s
    (the usual ``jit_compile=True`` shape): ``launcher`` and ``launch_inputs(args)`` (the launch node's inputs
    among the function's flat arguments, variable handles for the values it reads) name the launch; ``run``
    makes the call without TF's function runtime, or is None when TF's function is the faster road."""

    launcher: Any
    inputs: list[int]
    run: Callable[[list], list] | None

    def launch_inputs(self, args: list) -> list:
        return [args[i] for i in self.inputs]


def _direct_plan(rewritten, signatures, launchers, run_launcher,
                 to_tf_error: Callable[[Exception], Exception],
                 take_launch_error: Callable[[Exception], Exception | None] = lambda e: None
                 ) -> DirectLaunch | None:
    """The :class:`DirectLaunch` of a rewritten graph that is one launch node, else None.

    Stage: runtime, per call. Running that graph through TF's function runtime costs a function call
    (~0.1 ms) for one op. The direct roads give the same values:

    * a native ``TfxlaLaunch`` node without variables runs as one eager op (TF's kernel cache keeps its
      kernel; a hit never enters Python; ~10 µs);
    * a native node with variables keeps TF's function (``run`` None): its executor reads the variables,
      launches and assigns the results in C++ (AssignVariableOp adopts the launch's fresh output buffer,
      as after TF's XlaLaunch), where a call from Python pays one eager op per variable read and write;
    * a py-func launch node (the native op unavailable or off) calls the launcher in Python, which reads
      and writes back variables itself.

    The function's control outputs are all cluster members (so they run with the launch), and captured
    inputs are ordinary ``_Arg``s. A launcher error is raised as the ``tf.errors`` class of its status
    code (TF's own errors pass through), as XLA's launch op reports it (``to_tf_error``; through the
    native op, the error its hook kept, ``take_launch_error``), instead of the UnknownError EagerPyFunc
    would have made of it.
    """
    if len(signatures) != 1:
        return None
    sig = signatures[0]
    arg_index: dict[str, int] = {}
    ret_refs: dict[int, str] = {}
    reads: dict[str, str] = {}
    launch = None
    for nd in rewritten.node:
        if nd.op == ARG_OP:
            arg_index[nd.name] = nd.attr["index"].i
        elif nd.op == RETVAL_OP:
            data = [r for r in nd.input if not r.startswith("^")]
            if len(data) != 1:
                return None
            ret_refs[nd.attr["index"].i] = data[0]
        elif nd.name == sig.name and "_tfxla_cluster" in nd.attr:
            launch = nd
        elif nd.name.startswith(sig.name + "/") and nd.op in ("ReadVariableOp", "AssignVariableOp", "NoOp"):
            # The variable reads/writes around a native launch node (encapsulate.NativeLaunch): the
            # launcher called directly reads and writes the variables itself.
            if nd.op == "ReadVariableOp":
                reads[nd.name] = nd.input[0]
        else:
            return None  # anything else needs TF's runtime
    if launch is None or sorted(ret_refs) != list(range(len(ret_refs))):
        return None
    native = launch.op == "TfxlaLaunch"
    # A native launch node leaves out resource outputs (their consumers take the handle): its output
    # k is the launcher's value output kept[k].
    through = launchers[sig.name].passthrough if native else {}
    kept = [k for k in range(len(sig.outputs)) if k not in through]
    inputs = []
    for ref in launch.input:
        if ref.startswith("^"):
            if ref[1:] not in arg_index:
                return None
            continue
        ref = reads.get(ref, ref)
        name, _, slot = ref.partition(":")
        if name not in arg_index or int(slot or 0) != 0:
            return None
        inputs.append(arg_index[name])
    # Each return value: ("out", k) for launch output k, ("arg", i) for an argument returned as is.
    returns: list[tuple[str, int]] = []
    for k in range(len(ret_refs)):
        name, _, slot = ret_refs[k].partition(":")
        if name == sig.name:
            returns.append(("out", kept[int(slot or 0)]))
        elif name in arg_index and int(slot or 0) == 0:
            returns.append(("arg", arg_index[name]))
        else:
            return None
    launcher = launchers[sig.name]
    if native and (reads or through or any(nd.op == "AssignVariableOp" for nd in rewritten.node)):
        return DirectLaunch(launcher, inputs, None)
    if native:
        return DirectLaunch(launcher, inputs, _eager_native_run(launch, inputs, returns, take_launch_error))

    def run(args: list) -> list:
        from tfxla_cluster.runtime.launcher import to_tensor

        try:
            values = run_launcher(launcher, [args[i] for i in inputs])
        except Exception as e:  # any launch error: re-raised as its tf.errors class, with the cause
            raise to_tf_error(e) from e
        outs = [to_tensor(v) for v in values]
        return [outs[i] if kind == "out" else args[i] for kind, i in returns]
    return DirectLaunch(launcher, inputs, run)


def _eager_native_run(launch, inputs: list[int], returns: list[tuple[str, int]],
                      take_launch_error: Callable[[Exception], Exception | None]) -> Callable[[list], list]:
    """A call running the native launch node ``launch`` as one eager op on the function's arguments."""
    import tensorflow as tf

    attrs = ("key", launch.attr["key"].s, "Tin", list(launch.attr["Tin"].list.type),
             "Tout", list(launch.attr["Tout"].list.type))
    num_outputs = len(attrs[5])
    op = launch.op.encode()

    def run(args: list) -> list:
        try:
            outs = tf_compat.eager_execute(op, num_outputs, [args[i] for i in inputs], attrs,
                                           tf_compat.eager_context())
        except tf.errors.OpError as e:
            original = take_launch_error(e)   # the launcher's own error, in TF's form (kept by the hook)
            if original is None:
                raise
            raise original from None
        return [outs[i] if kind == "out" else args[i] for kind, i in returns]
    return run


def _as_tf_error(e: Exception) -> Exception:
    """``e`` as the ``tf.errors.OpError`` TF would raise for it (its status code; UNKNOWN otherwise)."""
    import tensorflow as tf

    if isinstance(e, tf.errors.OpError):
        return e
    code = getattr(e, "code", "UNKNOWN")
    cls = {"INVALID_ARGUMENT": tf.errors.InvalidArgumentError, "NOT_FOUND": tf.errors.NotFoundError,
           "UNIMPLEMENTED": tf.errors.UnimplementedError, "INTERNAL": tf.errors.InternalError,
           "FAILED_PRECONDITION": tf.errors.FailedPreconditionError,
           "DATA_LOSS": tf.errors.DataLossError}.get(code if isinstance(code, str) else "", tf.errors.UnknownError)
    return cls(None, None, f"{type(e).__name__}: {e}")


_EagerTensor: type | None = None   # tensorflow's EagerTensor class, imported on the first call

# How many of our Functions are tracing their Python function on this thread. A (not must-compile)
# Function called while one of ours traces becomes a plain call of its tf.function: TF's runtime inlines
# such a call (``_XlaMustCompile=false`` included, as Keras marks its train step) into the caller's
# graph before clustering, so the caller's clustering — ours — must see its ops, not our launch nodes.
_tracing = threading.local()


class Function:
    """What :func:`function` returns: call it like the ``tf.function`` it wraps."""

    def __init__(self, fn: Callable, *, jit_compile: bool | None, input_signature, reduce_retracing: bool,
                 flags, grappler: bool, backend: str) -> None:
        from tfxla_cluster.tf_compat import tf_function

        self.python_function = fn
        self.jit_compile = jit_compile
        self._flags = flags
        self._grappler = grappler
        self._backend = backend
        # TF decides when to retrace; our graphs are built per concrete function it returns.
        self._tf_function = fn if hasattr(fn, "get_concrete_function") else tf_function()(
            fn, input_signature=input_signature, reduce_retracing=reduce_retracing, autograph=True)
        # Keyed by (concrete function, the session's JIT settings): TF instantiates a function again,
        # clustered under the new level, after tf.config.optimizer.set_jit changes it.
        self._compiled: dict[tuple[int, tuple[int, bool]], CompiledGraph] = {}
        self._session_level = _session_jit()
        # (dtype, shape) of each positional tensor argument → CompiledGraph, for calls made only of
        # eager tensors: TF's concrete-function lookup (function-type binding) costs ~0.1 ms a call,
        # and its answer for such a call depends on nothing else.
        self._by_tensor_specs: dict[tuple, CompiledGraph] = {}
        self._lock = threading.Lock()
        self._profile = compile_profile.CompileProfile()

    def get_compiled(self, *args: Any, **kwargs: Any) -> CompiledGraph:
        _tracing.depth = getattr(_tracing, "depth", 0) + 1
        t0 = time.perf_counter()
        try:
            concrete = self._tf_function.get_concrete_function(*args, **kwargs)
        finally:
            _tracing.depth -= 1
        traced = time.perf_counter() - t0
        session = _session_jit()
        level = session[0]
        with self._lock:
            compiled = self._compiled.get((id(concrete), session))
            if compiled is None:
                self._profile.add("trace", traced)  # a new concrete function: TF traced (or retraced)
                compiled = CompiledGraph(concrete, jit_compile=self.jit_compile,
                                         flags=effective_flags(self._flags, level), grappler=self._grappler,
                                         backend=self._backend, profile=self._profile)
                self._compiled[(id(concrete), session)] = compiled
        return compiled

    def compile_stats(self) -> "compile_profile.CompileProfile":
        """Where this function's first calls spent their time: TF's tracing, import, grappler, clustering,
        encapsulation, TF's import of the rewritten graph, then per cluster lowering, each HLO pass,
        LLVM IR emission, LLVM optimisation, machine code, loading and the first run, TF's runtime around
        the launches and the collection after the call (see :mod:`tfxla_cluster.compile_profile`).
        ``print(f.compile_stats().table())`` shows it; every traced signature and cluster adds to it."""
        return self._profile

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import tensorflow as tf

        global _EagerTensor
        if _EagerTensor is None:
            _EagerTensor = tf_compat.eager_tensor_type()
        if getattr(_tracing, "depth", 0) and self.jit_compile is not True and not tf.executing_eagerly():
            return self._tf_function(*args, **kwargs)
        specs = None
        level = _session_jit()
        if level != self._session_level:   # set_jit changed: the signatures compiled before no longer apply
            self._by_tensor_specs.clear()
            self._session_level = level
        if not kwargs and all(type(a) is _EagerTensor for a in args):
            specs = tuple((a.dtype, tf_compat.eager_shape(a)) for a in args)
            compiled = self._by_tensor_specs.get(specs)
            if compiled is not None and len(args) == compiled.num_args:
                _record_call(self._tf_function, traced=False)
                return compiled(list(args))
        profile, known = self._profile, len(self._compiled)
        mark, t0 = len(profile.records), time.perf_counter()
        # A first call traces, clusters and compiles with the cyclic GC paused throughout (not only in each
        # stage, see _gc): between stages its collections promoted the work's live objects to the oldest
        # generation, and one full collection walked TF's and the model's ~0.4M objects (0.25 s).
        with gc_paused():
            result = self._call_slow(args, kwargs, specs)
            first = len(self._compiled) > known
            if first:
                profile.add("gc", collect_before_resume())
        if first:
            # A first call: what no stage recorded (Python imports of a cold process, argument handling).
            profile.add("other", max(0.0, time.perf_counter() - t0 - compile_profile.seconds_since(mark, profile)))
        return result

    def _call_slow(self, args: tuple, kwargs: dict, specs: tuple | None) -> Any:
        traces = _tracing_count(self._tf_function)
        compiled = self.get_compiled(*args, **kwargs)
        _record_call(self._tf_function, traced=_tracing_count(self._tf_function) != traces)
        flat = self._flat_inputs(compiled, args, kwargs)
        if specs is not None and len(flat) == len(args):
            self._by_tensor_specs[specs] = compiled
        return compiled(flat)

    def _flat_inputs(self, compiled: CompiledGraph, args: tuple, kwargs: dict) -> list:
        """The tensors of a call, in the concrete function's input order (captured inputs excluded)."""
        return arguments.flat_inputs(self._tf_function, compiled.concrete, args, kwargs)

    def experimental_get_compiler_ir(self, *args: Any, **kwargs: Any) -> Callable[..., str | bytes]:
        """TF's API: ``f.experimental_get_compiler_ir(*args)(stage='hlo')``. Stages: TF's 'hlo',
        'optimized_hlo', 'optimized_hlo_dot' (Graphviz), 'hlo_serialized' and 'optimized_hlo_serialized'
        (HloModuleProto bytes; needs jaxlib's XLA to parse our text), plus 'llvm_ir' (the LLVM IR our
        code generator emitted, before LLVM's optimisation) and 'clusters' (our clustering report).
        One text per cluster, in cluster order. A ``jit_compile=True`` function is compiled for these
        arguments without running it (as TF's: variables are read, not updated), data-dependent sizes
        (Unique, Where, NonMaxSuppression) included: its ``hlo`` has XLA's bounded shapes (``f32[<=4]``) and
        takes the function's arguments in order, as TF's, and runs in XLA with TF's results. Other functions'
        clusters (and a jit_compile=True function cut at a data-dependent size our dynamic padder can't
        follow) take inputs from TF's ops, so they must have run with these arguments first."""
        compiled = self.get_compiled(*args, **kwargs)
        direct = compiled._direct
        entry_for: dict[str, Any] = {}

        def entries() -> list:
            if direct is not None and not entry_for:
                flat = [*self._flat_inputs(compiled, args, kwargs), *compiled.concrete.captured_inputs]
                try:
                    entry_for[direct.launcher.sig.name] = direct.launcher.compile_for(*direct.launch_inputs(flat))
                except Exception as e:  # re-raised as its tf.errors class, with the cause
                    raise _as_tf_error(e) from e
            out = []
            for name, launcher in compiled.launchers.items():
                entry = entry_for.get(name) or next(iter(launcher.cache.values()), None)
                if entry is None:
                    if self.jit_compile is True:
                        # Data-dependent sizes (Unique, Where, ...) are bounded dynamic values inside one
                        # module where our padder takes every use of them (tf2hlo/dynamic_padder.py);
                        # otherwise the function is cut at such an op, and the clusters after it learn
                        # their input shapes from a run.
                        raise InvalidArgumentError(
                            f"{name} has not been compiled yet: this jit_compile=True function runs some ops "
                            "on TF's kernels next to its clusters (an op whose output size depends on run-time "
                            "values, used where our dynamic padder can't follow it), so the compiler IR of a "
                            "cluster fed by them needs a call with these arguments first")
                    raise InvalidArgumentError(f"{name} has not been compiled yet: the compiler IR of a function "
                                               "without jit_compile=True needs a call with these arguments first")
                out.append((name, entry))
            return out

        def get(stage: str = "hlo", **_: Any) -> str | bytes:
            if stage == "clusters":
                from tfxla_cluster.jit import explain

                return explain.explain(compiled.mark_result) if compiled.mark_result else str(compiled.clusters)
            render = _IR_STAGES.get(stage)
            if render is None:
                raise InvalidArgumentError(f"Unsupported stage '{stage}': use one of "
                                           f"{', '.join(sorted([*_IR_STAGES, 'clusters']))}")
            texts = [render(_ArgumentOrder(entry, direct if direct is not None and name == direct.launcher.sig.name
                                           else None) if stage in _ARGUMENT_ORDER_STAGES else entry)
                     for name, entry in entries()]
            if stage.endswith("_serialized"):
                return b"".join(texts)
            return "\n".join(texts)
        return get


def _session_jit() -> tuple[int, bool]:
    """The eager context's JIT settings a function is clustered under: (global_jit_level, cpu_global_jit)."""
    return tf_compat.session_jit_level(), tf_compat.session_cpu_global_jit()


def _tracing_count(tf_fn) -> int | None:
    get = getattr(tf_fn, "experimental_get_tracing_count", None)
    return get() if get is not None else None


_tracing_detector = None   # TF's process-wide frequent-retracing detector (private API; None if absent)


def _record_call(tf_fn, traced: bool) -> None:
    """Tell TF's frequent-retracing detector about a call, as ``tf.function.__call__`` does (eager
    calls only), so TF's "N out of the last N calls to <f> triggered tf.function retracing" warning
    appears — from TF's own logger, with TF's wording and limits — for our functions too."""
    global _tracing_detector
    if _tracing_detector is None:
        _tracing_detector = tf_compat.frequent_tracing_detector() or False
    key, python_fn, omit = tf_compat.tracing_key(tf_fn)
    if not _tracing_detector or key is None or not tf_executing_eagerly():
        return
    if traced:
        _tracing_detector.called_with_tracing(key, python_fn, omit)
    else:
        _tracing_detector.called_without_tracing(key)


def _llvm_ir(entry) -> str:
    if entry.executable is None:
        raise InvalidArgumentError(f"stage 'llvm_ir' needs the llvm backend (this cluster ran on {entry.backend})")
    return entry.executable.ir


def _serialized(text: str) -> bytes:
    try:
        from jax._src.lib import xla_client
    except ImportError:  # TF's own parser is not exposed to Python; jaxlib's is
        from tfxla_cluster.errors import UnimplementedError

        raise UnimplementedError("serialized HLO stages need jaxlib (XLA's HLO parser) installed") from None
    return xla_client.hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()


def _optimized_dot(entry) -> str:
    from tfxla_cluster.hlo.parser import parse_module
    from tfxla_cluster.passes.dump import module_to_dot

    return module_to_dot(parse_module(entry.optimized_hlo_text or entry.hlo_text))


class _ArgumentOrder:
    """A compiled cluster's HLO texts with the entry's parameters numbered in the function's argument order,
    as TF's (a one-launch function's launch node takes its inputs in the cluster's input order, e.g. a
    tf.cond's predicate first); other clusters' texts as they are."""

    def __init__(self, entry, direct: "DirectLaunch | None") -> None:
        self._entry = entry
        order = None
        if direct is not None and entry.param_specs:
            order = [direct.inputs[position] for position, _ in entry.param_specs]
        self._order = order

    @property
    def hlo_text(self) -> str:
        return self._reordered(self._entry.hlo_text)

    @property
    def optimized_hlo_text(self) -> str:
        return self._reordered(self._entry.optimized_hlo_text)

    def _reordered(self, text: str) -> str:
        order = self._order
        if not text or order is None or order == sorted(order):
            return text
        from tfxla_cluster.hlo.parser import parse_module

        module = parse_module(text)
        params = module.entry.parameters
        if len(params) != len(order):
            return text
        for new, k in enumerate(sorted(range(len(order)), key=lambda k: order[k])):
            params[k].parameter_number = new
        return module.to_string()


# The stages whose text is an HloModule TF numbers in argument order.
_ARGUMENT_ORDER_STAGES = frozenset({"hlo", "optimized_hlo", "hlo_serialized", "optimized_hlo_serialized"})

# experimental_get_compiler_ir stage → how to render one compiled cluster (a CompiledCluster).
_IR_STAGES: dict[str, Callable[[Any], str | bytes]] = {
    "hlo": lambda e: e.hlo_text,
    "optimized_hlo": lambda e: e.optimized_hlo_text,
    "optimized_hlo_dot": _optimized_dot,
    "hlo_serialized": lambda e: _serialized(e.hlo_text),
    "optimized_hlo_serialized": lambda e: _serialized(e.optimized_hlo_text or e.hlo_text),
    "llvm_ir": _llvm_ir,
}


def effective_flags(flags: Any, session_level: int | None = None) -> Any:
    """The flags a function traced now is clustered with: ``flags`` (a Flags, a TF_XLA_FLAGS string, or
    None for the environment's) under the session's global JIT level (``session_level``, default the
    process's: ``tf.config.optimizer.set_jit``), combined as TF does (``Flags.with_session_jit_level``)."""
    from tfxla_cluster.flags import Flags

    level = tf_compat.session_jit_level() if session_level is None else session_level
    return Flags.resolve(flags).with_session_jit_level(level)


def function(fn: Callable | None = None, *, jit_compile: bool | None = None, input_signature=None,
             reduce_retracing: bool = False, flags=None, grappler: bool = True,
             backend: str = "llvm") -> Any:
    """Like ``tf.function``; see the module docstring. ``flags`` defaults to ``TF_XLA_FLAGS``, combined
    with ``tf.config.optimizer.set_jit`` as TF combines them (:func:`effective_flags`);
    ``grappler=False`` skips TF's pre-clustering rewrites; ``backend="evaluator"`` runs clusters on
    the numpy HLO evaluator instead of native code."""
    def wrap(f: Callable) -> Function:
        return Function(f, jit_compile=jit_compile, input_signature=input_signature,
                        reduce_retracing=reduce_retracing, flags=flags, grappler=grappler, backend=backend)
    return wrap(fn) if fn is not None else wrap
