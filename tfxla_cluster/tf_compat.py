"""The one module that touches TensorFlow's internals.

Stage: bottom layer (below ``graph/``). Every private ``tensorflow.python...`` import of the package,
TF's kernel registry, and the hook that swaps ``tf.function`` live here; everything else uses public TF
or this module. Guarantee: importing this module does not import TensorFlow (each function imports what
it needs on first call), so ``tfxla-cluster --help`` and ``import tfxla_cluster`` stay TF-free. When a TF
release moves one of these internals, this file is the only one to change.
"""
from __future__ import annotations

import functools

import sys
import threading
from typing import Any, Callable

from tfxla_cluster import flags as flags_mod

__all__ = ["mkl_enabled", "op_def", "eager_context", "eager_execute", "function_runtime_config", "without_grappler", "function_from_graph_def",
           "GraphDefFunction",
           "eager_tensor_type", "concrete_function_type", "frequent_tracing_detector",
           "register_eager_func", "called_functions", "resource_handle_data", "read_variable", "optimize_graph",
           "registered_xla_jit_kernels", "registered_xla_jit_kernels_for_op", "cpu_kernel_types", "tf_function", "replace_tf_function", "restore_tf_function",
           "tf_function_replaced", "registered_op_names", "has_cpu_kernel", "kernel_defs_for_op", "placeable_on_cpu"]


# ----------------------------------------------------------------------------------- process facts
def mkl_enabled() -> bool | None:
    """TensorFlow's own ``IsMklEnabled()`` if TF is already imported in this process, else None (this
    question must not be the reason TF gets imported)."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):   # a TF without the binding: the caller predicts by rule
        return None


# ------------------------------------------------------------------------------------ op registry
def op_def(op: str) -> Any:
    """TF's registered ``OpDef`` for ``op`` (``op_def_registry.get``), None if not registered."""
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op)


def registered_op_names() -> list[str]:
    """The names of every op registered in this process (TF's own and any ``tf.load_op_library``'s)."""
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    return [op.name for op in op_def_pb2.OpList.FromString(c_api.TF_GetBuffer(c_api.TF_GetAllOpList())).op]

_xla_kernels_lock = threading.Lock()
_xla_kernels_registered = False


_XLA_KERNELS_PROBE = "tfxla_cluster_xla_kernels_probe"


def _register_xla_jit_kernels() -> None:
    """Make TF register XLA's JIT kernels (once per process).

    XLA registers them lazily, on first use. Lowering one tiny function to HLO makes them visible without
    compiling it: a real compile would write its modules into the user's ``--xla_dump_to`` directory and
    log TF's once-per-process "Compiled cluster using XLA!" line. The function is an identity
    ``FunctionDef`` given to TF's ``GetCompilerIr`` directly (~3 ms; tracing a ``tf.function`` for it and
    asking through ``experimental_get_compiler_ir`` costs ~10 ms more, ~20 ms more with autograph)."""
    global _xla_kernels_registered
    if _xla_kernels_registered:
        return
    with _xla_kernels_lock:
        if _xla_kernels_registered:
            return
        import tensorflow as tf

        # Eagerly, even when the first question comes while another function is being traced.
        with tf.init_scope():
            x = tf.constant(1.0)
            try:
                from tensorflow.core.framework import function_pb2, types_pb2
                from tensorflow.python import pywrap_tfe
                from tensorflow.python.eager import context

                fdef = function_pb2.FunctionDef()
                fdef.signature.name = _XLA_KERNELS_PROBE
                fdef.signature.input_arg.add(name="x", type=types_pb2.DT_FLOAT)
                fdef.signature.output_arg.add(name="y", type=types_pb2.DT_FLOAT)
                fdef.ret["y"] = "x"
                ctx = context.context()
                ctx.add_function_def(fdef)
                pywrap_tfe.TF_GetCompilerIr(ctx._context_handle, _XLA_KERNELS_PROBE, "hlo", x.device, [x], [], None)
            except Exception:  # noqa: BLE001 - a TF whose internals moved: the public road
                # TF's own tf.function even when ours has replaced it.
                tf_function()(lambda v: v + 1, jit_compile=True, autograph=False
                              ).experimental_get_compiler_ir(x)(stage="hlo")
        _xla_kernels_registered = True


def registered_xla_jit_kernels() -> list[Any]:
    """The ``KernelDef`` of every kernel registered on an XLA JIT compilation device (``*_JIT``)."""
    from tensorflow.python.framework import kernels

    _register_xla_jit_kernels()
    return [k for k in kernels.get_all_registered_kernels().kernel if k.device_type.endswith("_JIT")]


def registered_xla_jit_kernels_for_op(op: str) -> list[Any]:
    """The ``KernelDef`` of each kernel of ``op`` on an XLA JIT compilation device, in the order of
    :func:`registered_xla_jit_kernels` (TF's registry answers one op in ~0.3 ms, the whole list in ~25 ms)."""
    from tensorflow.python.framework import kernels

    _register_xla_jit_kernels()
    return [k for k in kernels.get_registered_kernels_for_op(op).kernel if k.device_type.endswith("_JIT")]


@functools.lru_cache(maxsize=None)
def kernel_defs_for_op(op: str) -> tuple:
    """Every ``KernelDef`` registered for ``op`` (all devices, labelled ones included), in TF's registry order
    (TF answers in ~2 ms: it walks its whole registry)."""
    from tensorflow.python.framework import kernels

    return tuple(kernels.get_registered_kernels_for_op(op).kernel)


def _plain_cpu_kernels(op: str) -> tuple:
    """``op``'s plain (unlabelled) CPU ``KernelDef``s: the ones a NodeDef without a ``_kernel`` label can get."""
    return tuple(k for k in kernel_defs_for_op(op) if k.device_type == "CPU" and not k.label)


def has_cpu_kernel(node_def: Any) -> bool:
    """``FindKernelDef(DEVICE_CPU, node_def)`` succeeds: a kernel registered for CPU — or, where none matches, for
    DEFAULT (NoOp, IdentityN, ...) — under the node's ``_kernel`` label, whose constraints its attributes meet (a
    list of types each; an attribute the NodeDef leaves to its default is taken to match). Constant folding asks
    it (an f16 ``Rint`` has none, so TF does not fold it). Silent, unlike :func:`placeable_on_cpu`."""
    attr = node_def.attr
    label = attr["_kernel"].s.decode() if "_kernel" in attr else ""
    for device in ("CPU", "DEFAULT"):   # FindKernelRegistration: the device's own kernels first
        if any(k.device_type == device and k.label == label and _constraints_met(k, attr)
               for k in kernel_defs_for_op(node_def.op)):
            return True
    return False


def _constraints_met(kernel: Any, attr: Any) -> bool:
    """KernelAttrsMatch: each constrained attribute's value (each type of a type list) is an allowed one."""
    for c in kernel.constraint:
        if c.name not in attr:
            continue
        value, allowed = attr[c.name], c.allowed_values.list
        if allowed.type:
            got = [value.type] if value.type else list(value.list.type)
            if any(t not in allowed.type for t in got):
                return False
        elif (allowed.i and value.i not in allowed.i or allowed.s and value.s not in allowed.s
              or allowed.b and value.b not in allowed.b):
            return False
    return True


def placeable_on_cpu(node_def: Any) -> bool:
    """What TF's placer asks of each node of a function graph on this host: TF's own ``FindKernelDef`` for the
    CPU device (the NodeDef's default attributes added first), ~3 µs where :func:`has_cpu_kernel` reads TF's
    registry per op (~2 ms each). TF logs a warning line where it finds none (the call then fails anyway).
    Memoised by the op, its ``_kernel`` label and the type and int/bool attributes kernels constrain."""
    key = [node_def.op]
    for name in sorted(node_def.attr):
        v = node_def.attr[name]
        kind = v.WhichOneof("value")
        if kind in ("type", "i", "b") or name == "_kernel" and kind == "s":
            key.append((name, getattr(v, kind)))
        elif kind == "list" and v.list.type:
            key.append((name, tuple(v.list.type)))
    key = tuple(key)
    found = _placeable.get(key)
    if found is None:
        from tensorflow.python.util import _pywrap_kernel_registry

        nd = type(node_def)()
        nd.CopyFrom(node_def)
        nd.device = "/job:localhost/replica:0/task:0/device:CPU:0"
        found = _placeable[key] = bool(_pywrap_kernel_registry.TryFindKernelClass(nd.SerializeToString()))
    return found


_placeable: dict[tuple, bool] = {}


@functools.lru_cache(maxsize=None)
def cpu_kernel_types(op: str, attr: str = "T") -> frozenset[int]:
    """The ``DataType`` values of ``attr`` that ``op``'s plain (unlabelled) CPU kernels take."""
    return frozenset(t for k in _plain_cpu_kernels(op)
                     for c in k.constraint if c.name == attr for t in c.allowed_values.list.type)


# ------------------------------------------------------------------------------------------ eager
def eager_context() -> Any:
    """TF's eager context object (what ``execute`` takes)."""
    from tensorflow.python.eager import context

    return context.context()


def eager_execute(op: str, num_outputs: int, inputs: list, attrs: tuple, ctx: Any) -> Any:
    """Run one op eagerly, as TF's generated op wrappers do (``execute.execute``)."""
    from tensorflow.python.eager import execute

    return execute.execute(op, num_outputs, inputs, attrs, ctx)


def function_runtime_config() -> Any:
    """A copy of the eager context's ``ConfigProto`` (what TF's function runtime starts from)."""
    from tensorflow.core.protobuf import config_pb2

    cfg = config_pb2.ConfigProto()
    cfg.CopyFrom(eager_context().config)
    return cfg


_no_grappler = threading.local()


def without_grappler(call: Callable[[], Any]) -> Any:
    """``call()`` with this thread's function-call options (the ``config_proto`` attr TF's eager runtime
    gives a function call, which its instantiation hands to grappler) saying: no grappler. For a
    function whose graph grappler already rewrote: TF's runtime runs grappler once, before its JIT
    passes; a second run on the rewritten graph costs time and is not TF's. The options object is
    kept per thread, so every call reuses the kernel TF cached for the first."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context

    ctx = context.context()
    base = ctx.function_call_options
    cached = getattr(_no_grappler, "pair", None)
    if cached is None or cached[0] is not base:   # TF makes new options whenever its config changes
        cfg = config_pb2.ConfigProto()
        cfg.ParseFromString(base.config_proto_serialized)
        cfg.graph_options.rewrite_options.disable_meta_optimizer = True
        cached = _no_grappler.pair = (base, context.FunctionCallOptions(base.executor_type, cfg))
    ctx.function_call_options = cached[1]
    try:
        return call()
    finally:
        ctx.function_call_options = base


class GraphDefFunction:
    """A function running ``graph_def`` (a graph of Placeholders, no captures): the Placeholders named
    ``feeds`` in, the tensors ``fetches`` out, the ops ``run_ops`` as control outputs. Called like the
    ``ConcreteFunction`` :func:`function_from_graph_def` returns (``fn(*args)``, ``fn._call_flat(args, [])``).

    An eager call that no gradient tape watches — every call of a compiled function but a traced or
    differentiated one — runs a FunctionDef made in C++ (the GraphDef imported into a bare C graph,
    ``TF_GraphToFunction``, as ``from_func_graph`` makes a ConcreteFunction's): TF's Python importer
    (``import_graph_def``) makes a Python ``Operation`` per node, under a device scope each, ~0.5 ms a node
    — most of a warm first call. Any other call (inside another function's trace, under a tape) and any
    other attribute go to that ConcreteFunction, made on first use."""

    def __init__(self, graph_def: Any, feeds: list[str], fetches: list[str], run_ops: list[str]) -> None:
        from tensorflow.python.client import pywrap_tf_session as c_api
        from tensorflow.python.eager import context
        from tensorflow.python.eager.polymorphic_function import atomic_function
        from tensorflow.python.framework import c_api_util, dtypes, ops, tensor_spec
        from tensorflow.python.util import compat
        from tensorflow.core.function.polymorphism import function_type as function_type_lib

        self._args = (graph_def, feeds, fetches, run_ops)
        self._concrete = None
        self.captured_inputs: list = []
        ctx = context.context()
        for fdef in graph_def.library.function:   # what the graph calls (registered by its traced function)
            if not ctx.has_function(fdef.signature.name):
                ctx.add_function_def(fdef)
        holder = ops.Graph()   # its C graph only: no Python Operation is made for the imported nodes
        options = c_api_util.ScopedTFImportGraphDefOptions()
        names = [nd.name for nd in graph_def.node]
        for n in names:   # every node comes back as its TF_Operation
            c_api.TF_ImportGraphDefOptionsAddReturnOperation(options.options, n)
        buffer = c_api.TF_NewBufferFromString(compat.as_bytes(graph_def.SerializeToString()))
        with holder._c_graph.get() as c_graph:
            try:
                results = c_api_util.ScopedTFImportGraphDefResults(
                    c_api.TF_GraphImportGraphDefWithResults(c_graph, buffer, options.options))
            finally:
                c_api.TF_DeleteBuffer(buffer)
            by_name = dict(zip(names, c_api.TF_ImportGraphDefResultsReturnOperations(results.results))).__getitem__

            def output(ref: str):
                name, _, index = ref.rpartition(":")
                return c_api_util.tf_output(by_name(name), int(index))
            inputs = [c_api_util.tf_output(by_name(name), 0) for name in feeds]
            outputs = [output(ref) for ref in fetches]
            feed_set = set(feeds)
            body = [by_name(n) for n in names if n not in feed_set]
            name = f"__inference_pruned_{ops.uid()}"
            fn = c_api.TF_GraphToFunction_wrapper(c_graph, name, False, body, inputs, outputs, [],
                                                  [by_name(n) for n in run_ops], [], None, "")
        try:
            ctx.add_c_function(fn)
        finally:
            c_api.TF_DeleteFunction(fn)
        # Unknown shapes: only an eager call runs this function, and it takes them from the arguments.
        spec = lambda t: tensor_spec.TensorSpec(None, dtypes.as_dtype(c_api.TF_OperationOutputType(t)))  # noqa: E731
        function_type = function_type_lib.from_structured_signature(
            ((*map(spec, inputs),), {}), [spec(t) for t in outputs])
        self._atomic = atomic_function.AtomicFunction(name, ctx, function_type)

    def _full(self) -> Any:
        if self._concrete is None:
            self._concrete = function_from_graph_def(*self._args)
        return self._concrete

    def _fast(self, args: list) -> bool:
        from tensorflow.python.eager import context
        from tensorflow.python.ops import gradients_util

        return (context.executing_eagerly() and gradients_util.PossibleTapeGradientTypes(args)
                == gradients_util.POSSIBLE_GRADIENT_TYPES_NONE)

    def _call_flat(self, args: list, captured_inputs: list) -> Any:
        args = [*args, *captured_inputs]
        if self._fast(args):
            return [*(self._atomic.call_flat(*args) or []), *[None] * len(self._args[3])]
        return self._full()._call_flat(args, [])

    def __call__(self, *args: Any) -> Any:
        if self._fast(list(args)):
            return [*(self._atomic.call_flat(*args) or []), *[None] * len(self._args[3])]
        return self._full()(*args)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_args", "_concrete", "_atomic"):
            raise AttributeError(name)
        return getattr(self._full(), name)


def function_from_graph_def(graph_def: Any, feeds: list[str], fetches: list[str], run_ops: list[str]) -> Any:
    """A ``ConcreteFunction`` running ``graph_def`` (a graph of Placeholders, no captures): the
    Placeholders named ``feeds`` in, the tensors ``fetches`` out, the ops ``run_ops`` as control outputs
    (they run although nothing uses their outputs).

    What ``wrap_function(...).prune(feeds, fetches + run_ops)`` returns, built from the imported graph
    itself: prune copies it op by op in Python (``lift_to_graph``), most of the cost of the import,
    though the graph holds nothing the fetches and run ops do not reach. The unreached nodes TF's
    function runtime prunes when it instantiates the function, as for any ``tf.function``."""
    import tensorflow as tf
    from tensorflow.python.eager import wrap_function
    from tensorflow.python.framework import func_graph

    graph = func_graph.FuncGraph("pruned")
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    inputs = [graph.get_tensor_by_name(f"{name}:0") for name in feeds]
    outputs = [graph.get_tensor_by_name(t) for t in fetches]
    controls = [graph.get_operation_by_name(n) for n in run_ops]
    graph.inputs.extend(inputs)
    graph.outputs.extend(outputs)
    graph.control_outputs.extend(controls)
    graph.structured_outputs = outputs + [None] * len(controls)   # prune's structure: ops give None
    graph.structured_input_signature = None
    fn = wrap_function.WrappedFunction(graph, variable_holder=wrap_function.VariableHolder(share_variables=True))
    fn._num_positional_args = len(inputs)
    fn._arg_keywords = [t.op.name for t in inputs]
    return fn


def eager_tensor_type() -> type:
    """TF's ``EagerTensor`` class (``type(t) is`` this is the fast test for a concrete eager tensor)."""
    from tensorflow.python.framework.ops import EagerTensor

    return EagerTensor


def register_eager_func(call: Callable, output_dtypes: list) -> tuple[bytes, Any]:
    """Register ``call`` for TF's ``EagerPyFunc`` op (eager tensors in and out). Returns the op's
    ``token`` attr and the registered object, which the caller must keep alive: TF's registry holds
    only weak references."""
    from tensorflow.python.ops import script_ops

    eager = script_ops.EagerFunc(call, output_dtypes, False)
    return script_ops._py_funcs.insert(eager).encode(), eager


# ------------------------------------------------------------------------------------ tf.function
def concrete_function_type() -> type:
    """The class of ``tf.function(...).get_concrete_function()`` results."""
    from tensorflow.python.eager.polymorphic_function import concrete_function

    return concrete_function.ConcreteFunction


def frequent_tracing_detector() -> Any:
    """TF's process-wide frequent-retracing detector (what ``tf.function.__call__`` reports each call
    to), or None if this TF has none."""
    try:
        from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf

        return pf._frequent_tracing_detector_manager
    except (ImportError, AttributeError):
        return None


_hook_lock = threading.Lock()
_original_tf_function: Callable | None = None


def tf_function() -> Callable:
    """TF's own ``tf.function`` (also while :func:`replace_tf_function` has replaced it)."""
    import tensorflow as tf

    return _original_tf_function or tf.function


def tf_function_replaced() -> bool:
    return _original_tf_function is not None


def replace_tf_function(make: Callable[[], Callable]) -> bool:
    """Set ``tf.function`` to ``make()`` unless it is already replaced (then nothing happens and the
    answer is False). ``make`` runs under the hook's lock, once."""
    global _original_tf_function
    import tensorflow as tf

    with _hook_lock:
        if _original_tf_function is not None:
            return False
        replacement = make()
        _original_tf_function = tf.function
        tf.function = replacement
        return True


def restore_tf_function() -> None:
    """Put TF's own ``tf.function`` back (nothing if it was not replaced)."""
    global _original_tf_function
    import tensorflow as tf

    with _hook_lock:
        if _original_tf_function is not None:
            tf.function = _original_tf_function
            _original_tf_function = None


# ----------------------------------------------------------------------------- graphs, variables
def called_functions(graph: Any) -> dict[str, Any]:
    """The functions a ``tf.Graph``/``FuncGraph`` has registered (name → function object with its own
    ``graph``); {} if this TF keeps none."""
    return getattr(graph, "_functions", None) or {}


def resource_handle_data(placeholder: Any) -> Any:
    """The handle data (dtype and shape of the variable) a resource placeholder carries, or None."""
    from tensorflow.python.ops import handle_data_util

    return handle_data_util.get_resource_handle_data(placeholder)


def read_variable(handle: Any, dtype: Any) -> Any:
    """The value of the resource variable behind ``handle`` (``ReadVariableOp``)."""
    from tensorflow.python.ops import resource_variable_ops

    return resource_variable_ops.read_variable_op(handle, dtype)


def inferred_output_shapes(meta_graph: Any) -> dict[str, list[tuple[int, ...] | None]]:
    """Grappler's static shape inference (``GraphProperties``, through a grappler ``Item``) on
    ``meta_graph``: node name -> the shape of each output, None where a rank or dimension is unknown."""
    from tensorflow.python.grappler import item as gitem

    out: dict[str, list[tuple[int, ...] | None]] = {}
    for name, props in gitem.Item(meta_graph).GetOpProperties().items():
        shapes: list[tuple[int, ...] | None] = []
        for p in props:
            dims = tuple(d.size for d in p.shape.dim)
            shapes.append(None if p.shape.unknown_rank or any(d < 0 for d in dims) else dims)
        out[name] = shapes
    return out


def optimize_graph(config: Any, meta_graph: Any) -> Any:
    """Grappler's meta optimizer on ``meta_graph`` (``tf_optimizer.OptimizeGraph``); raises TF's errors.

    On a grappler ``VirtualCluster`` of this host's devices, as TF's function runtime runs it
    (``grappler::OptimizeGraph``: ``VirtualCluster cluster(&device_set)``). ``OptimizeGraph`` without a
    cluster provisions a ``SingleMachine`` one per call — a session with its thread pools, started and
    joined again: ~1 ms of CPU and 3-10 ms of wall time a call on a loaded machine — and serialises every
    call behind one process-wide lock. The devices (names and properties) are that machine's, read once."""
    from tensorflow.python.grappler import cluster as gcluster, tf_optimizer

    return tf_optimizer.OptimizeGraph(config, meta_graph, verbose=False,
                                      cluster=gcluster.Cluster(devices=_grappler_devices()))


_grappler_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _grappler_devices() -> tuple:
    """The ``NamedDevice``s a grappler ``SingleMachine`` cluster finds on this host (once per process)."""
    from tensorflow.python.grappler import cluster as gcluster, tf_optimizer

    with getattr(tf_optimizer, "_OPTIMIZE_GRAPH_CLUSTER_LOCK", _grappler_lock):   # one SingleMachine at a time
        machine = gcluster.Cluster()
        try:
            return tuple(machine.ListDevices())
        finally:
            machine.Shutdown()


def function_def_to_graph(fdef: Any, input_shapes: list) -> Any:
    """A ``FuncGraph`` built from a ``FunctionDef`` with the given input shapes."""
    from tensorflow.python.framework import function_def_to_graph as fdg

    return fdg.function_def_to_graph(fdef, input_shapes=input_shapes)


def graph_to_function_def(graph: Any, operations: list, inputs: list, outputs: list) -> Any:
    """A ``FunctionDef`` of ``operations`` of ``graph`` from ``inputs`` to ``outputs``."""
    from tensorflow.python.framework import graph_to_function_def as gfd

    return gfd.graph_to_function_def(graph, operations, inputs, outputs)


def bind_call_inputs(tf_function: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args``/``kwargs`` of a call of the ``tf.function`` ``tf_function`` as TF's ``Function._call``
    binds them: defaults filled in, keywords put in order and, with an ``input_signature``, values cast to
    it (numpy arrays, lists, Python numbers) as TF's ``trace_function`` does. Raises TF's TypeError."""
    from tensorflow.python.eager.polymorphic_function import function_type_utils

    polymorphic_type = getattr(tf_function, "_function_type", None)
    if polymorphic_type is None:
        return args, kwargs
    bound = function_type_utils.canonicalize_function_inputs(
        args, kwargs, polymorphic_type, tf_function._default_values, tf_function._is_pure)
    args, kwargs = bound.args, bound.kwargs
    if tf_function.input_signature and (args or kwargs):
        bound = function_type_utils.bind_function_inputs(args, kwargs, polymorphic_type, tf_function._default_values)
        args, kwargs = bound.args, bound.kwargs
    return args, kwargs


# ------------------------------------------------------------------------- private attributes of TF objects
def tensor_view(t: Any) -> Any:
    """A numpy view of an eager tensor's buffer (``EagerTensor._numpy``; ``.numpy()`` would copy), or
    ``np.asarray(t)`` for anything else."""
    import numpy as np

    view = getattr(t, "_numpy", None)
    return np.asarray(view() if view is not None else t)


def eager_shape(t: Any) -> tuple:
    """An eager tensor's shape as a tuple, without building a TensorShape (``_shape_tuple``)."""
    return t._shape_tuple()


def handle_data(handle: Any) -> Any:
    """The handle data (dtype and shape of the variable) an eager resource handle carries, or None."""
    return getattr(handle, "_handle_data", None)


def call_flat(fn: Any) -> Callable | None:
    """A concrete function's flat call ``(args, captured_inputs)`` (``_call_flat``), or None."""
    return getattr(fn, "_call_flat", None)


def tracing_key(tf_fn: Any) -> tuple[Any, Any, bool]:
    """(call-stats key, the Python function, whether the frequent-tracing warning is off) of a
    ``tf.function``, as TF's frequent-tracing detector uses them; key None if this TF keeps none."""
    return (getattr(tf_fn, "_key_for_call_stats", None), getattr(tf_fn, "_python_function", tf_fn),
            bool(getattr(tf_fn, "_omit_frequent_tracing_warning", False)))


def session_jit_level() -> int:
    """The ``OptimizerOptions.global_jit_level`` of the ConfigProto TF's function runtime runs a
    ``tf.function`` with (the eager context's ``config``): ON_1 after ``tf.config.optimizer.set_jit(True)``
    or ``"autoclustering"``, OFF after ``set_jit(False)``, else the level of a ConfigProto given to the
    context, else DEFAULT. Read per call (~0.3 µs) from the context's ``_optimizer_jit``/``_config``, the
    fields ``context.config`` builds it from (that property costs ~10 µs); the property if they moved."""
    from tensorflow.python.eager import context

    ctx = context.context()
    jit = getattr(ctx, "_optimizer_jit", _MOVED)
    config = getattr(ctx, "_config", _MOVED)
    if jit is _MOVED or config is _MOVED:
        return int(ctx.config.graph_options.optimizer_options.global_jit_level)
    if jit is not None:
        return 1 if jit else -1   # OptimizerOptions.ON_1 / OFF, as context.config sets them
    return int(config.graph_options.optimizer_options.global_jit_level) if config is not None else 0


_MOVED = object()


def _session_jit_level_if_tf() -> int:
    # a process that has not imported TF has no session level, and resolving flags must not import TF
    return session_jit_level() if "tensorflow" in sys.modules else 0


flags_mod.register_session_jit_level(_session_jit_level_if_tf)


def session_cpu_global_jit() -> bool:
    """``OptimizerOptions.cpu_global_jit`` of the eager context's ConfigProto: with it TF 2.21's
    MarkForCompilation clusters a ``tf.function`` on CPU without ``--tf_xla_cpu_global_jit`` (seen in TF's
    live dumps). ``set_jit`` never sets it; only a ConfigProto given to the context does."""
    from tensorflow.python.eager import context

    ctx = context.context()
    config = getattr(ctx, "_config", _MOVED)
    if config is _MOVED:
        return bool(ctx.config.graph_options.optimizer_options.cpu_global_jit)
    return bool(config.graph_options.optimizer_options.cpu_global_jit) if config is not None else False


# ---- Calls under a gradient tape (runtime/gradients.py): TF's ConcreteFunction._call_flat protocol ----

_tape_set_is_empty: Callable[[], bool] | None = None


def tape_could_record() -> bool:
    """Whether any gradient tape (or forward accumulator) is active on this thread: one C call (every call
    of a compiled function asks it)."""
    global _tape_set_is_empty
    if _tape_set_is_empty is None:
        from tensorflow.python import pywrap_tfe

        _tape_set_is_empty = pywrap_tfe.TFE_Py_TapeSetIsEmpty   # record.could_possibly_record's test
    return not _tape_set_is_empty()


def taped_forward(concrete: Any, args: list) -> Any:
    """What TF's ``ConcreteFunction._call_flat`` does for an eager call ``args`` (inputs then captured
    inputs) that a tape may record: every variable the function reads is reported as accessed (a tape
    watches the trainable ones), then the forward/backward pair TF builds for it — a
    ``_ForwardBackwardCall`` — or None when no tape watches these arguments."""
    from tensorflow.python.ops import gradients_util, resource_variable_ops

    for v in concrete.graph.variables:
        resource_variable_ops.variable_accessed(v)
    kind = gradients_util.PossibleTapeGradientTypes(args)
    if kind == gradients_util.POSSIBLE_GRADIENT_TYPES_NONE:
        return None
    return concrete._select_forward_and_backward_functions(args, kind, True)


def forward_backward_parts(call: Any) -> tuple[Any, Any, list, bool] | None:
    """(the forward ``AtomicFunction``, TF's pair object, the forward's arguments, whether forward-mode
    tangents flow) of a ``_ForwardBackwardCall``, building the pair on first use."""
    forward, args = call.forward()
    return forward, call._functions, args, bool(call._input_tangents)


def forward_concrete(forward: Any) -> Any:
    """A ``ConcreteFunction`` over TF's forward ``AtomicFunction`` (its graph returns the intermediates too)."""
    from tensorflow.python.eager.polymorphic_function import concrete_function

    return concrete_function.ConcreteFunction(forward, shared_func_graph=True)


def record_backward(functions: Any, backward: Any, flat_outputs: list, inference_args: list) -> None:
    """Record a forward call's ``flat_outputs`` on the active tapes with ``backward`` (an object called as
    TF's backward ``ConcreteFunction`` is: ``_call_flat(gradients, captures)``), as TF's
    ``_TapeGradientFunctions.record`` does without forward-mode tangents."""
    from tensorflow.python.eager import record

    backward_function, to_record = functions._wrap_backward_function(functions._forward_graph, backward,
                                                                     flat_outputs)
    record.record_operation(functions._forward.cached_definition.signature.name, to_record, inference_args,
                            backward_function)


def backward_concrete(functions: Any) -> Any:
    """TF's backward ``ConcreteFunction`` of a built forward/backward pair."""
    return functions._backward


def stop_recording() -> Any:
    """A context in which no tape records (the forward's own ops are recorded as one call, by us)."""
    from tensorflow.python.eager import record

    return record.stop_recording()
