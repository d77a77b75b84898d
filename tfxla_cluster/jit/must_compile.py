"""Must-compile checking: what ``jit_compile=True`` requires, and TF's error when it can't be met.

Stage: clustering (the ``_XlaMustCompile`` path). A function TF must compile is checked with TF's
permissive filter (resource, stateful RNG, Assert, TensorArray, ... are all fine; only ops without an
XLA kernel, or bad function bodies, are not). TF stops at the first unsupported op and says
``Detected unsupported operations when trying to compile graph <f>[...] on XLA_CPU_JIT: <Op> (<why>)
{{node <name>}}``; we raise the same text but list **every** offending node, each with the call
stack that reaches it.
"""
from __future__ import annotations

import threading

from tensorflow.core.framework import function_pb2, graph_pb2, node_def_pb2

from tfxla_cluster.errors import InvalidArgumentError, TfXlaError
from tfxla_cluster.graph.opdefs import ARG_OP, RETVAL_OP
from tfxla_cluster.jit.compilability import Frame, Uncompilable, must_compile_checker
from tfxla_cluster.tf_compat import called_functions
from tfxla_cluster.tfops.reasons import ReasonCode

# The context TF's XlaCompiler appends to every error of a must-compile function.
_TF2XLA_CONTEXT = ("tf2xla conversion failed while converting {fn}[{attrs}]. Run with "
                   "TF_DUMP_GRAPH_PREFIX=/path/to/dump/dir and --vmodule=xla_compiler=2 to obtain a dump of the "
                   "compiled functions.")


class MustCompileError(InvalidArgumentError):
    """A ``jit_compile=True`` function that XLA can't compile; ``problems`` lists every reason. It is a
    ``tf.errors.InvalidArgumentError``, the class TF raises for the same function."""

    def __init__(self, message: str, problems: list[Uncompilable]) -> None:
        super().__init__(message)
        self.problems = problems


def uncompilable_nodes(library: function_pb2.FunctionDefLibrary, function_name: str,
                       jit_device: str = "XLA_CPU_JIT") -> list[Uncompilable]:
    """Every node of ``function_name`` (recursively through calls and control flow) XLA can't compile,
    its arguments and results included: TF checks the instantiated body, whose ``_Arg``/``_Retval``
    nodes have XLA kernels only for XLA's types (a string argument is TF's first complaint)."""
    checker = must_compile_checker(jit_device, library)
    fdef = next((f for f in library.function if f.signature.name == function_name), None)
    args, rets = [], []
    if fdef is not None:
        for i, arg in enumerate(fdef.signature.input_arg):
            if arg.type:  # a type given by an attr is resolved only at instantiation
                args.append(_interface_node(arg.name, ARG_OP, arg.type, i))
        for i, out in enumerate(fdef.signature.output_arg):
            if out.type:
                rets.append(_interface_node(f"{out.name}_RetVal", RETVAL_OP, out.type, i))
    problems = _check_interface(checker, args, function_name)
    problems += checker.find_uncompilable_in_function(function_name)
    return problems + _check_interface(checker, rets, function_name)


def uncompilable_in_graph(graph_def: graph_pb2.GraphDef, name: str = "graph",
                          jit_device: str = "XLA_CPU_JIT") -> list[Uncompilable]:
    """The same check on a traced graph taken as a function body: its Placeholders are the ``_Arg``s
    (checked as such), and ``_Arg``/``_Retval`` nodes of a runtime-form graph are checked too."""
    checker = must_compile_checker(jit_device, graph_def.library)
    by_name = {n.name: n for n in graph_def.node}
    problems: list[Uncompilable] = []
    placeholders = 0
    for nd in graph_def.node:
        if nd.op == "Placeholder":
            nd = _interface_node(nd.name, ARG_OP, nd.attr["dtype"].type, placeholders)
            placeholders += 1
        # Depth 2: inside a function body, as TF sees the nodes of a must-compile call.
        found = checker._check(nd, (Frame(name, None), Frame(nd.name, name)), first_only=False,
                               ref_input=checker._has_ref_input(nd, by_name))
        problems.extend(found)
    return problems


def _interface_node(name: str, op: str, dtype: int, index: int) -> node_def_pb2.NodeDef:
    nd = node_def_pb2.NodeDef(name=name, op=op)
    nd.attr["T"].type = dtype
    nd.attr["index"].i = index
    if op == RETVAL_OP:
        nd.input.append("value")
    return nd


def _check_interface(checker, nodes: list[node_def_pb2.NodeDef], function_name: str) -> list[Uncompilable]:
    return [p for nd in nodes
            for p in checker._check(nd, (Frame(function_name, None), Frame(nd.name, function_name)),
                                    first_only=False)]


def _describe(problem: Uncompilable) -> str:
    reason = problem.reason.removeprefix(f"{ReasonCode.NO_XLA_KERNEL.text}: ")
    where = "".join(f" in {f.function}" for f in problem.stack[1:-1] if f.function)
    return f"{problem.op} ({reason}){{{{node {problem.node}}}}}{where}"


class CreationStacks:
    """Where each op of a traced ``tf.function`` was created, for TF's "The op is created at:" lines.

    Built from the tracebacks TF records on every op of a FuncGraph (and of the FuncGraphs of the
    functions it calls). Frames inside TensorFlow (and this package, which stands in for TF's
    internals) are dropped, as TF drops its internal frames — everything else, ``<frozen runpy>`` and
    Keras included, stays, as in TF's message; file names lose the directory prefix common to the
    whole traceback, as TF's ``StackTrace::ToString(filter_common_prefix)`` does.
    """

    _INTERNAL = ("tensorflow", "tfxla_cluster")

    def __init__(self, concrete) -> None:
        self.top = concrete.function_def.signature.name
        self._ops: dict[tuple[str, str], list[str]] = {}
        self._callee: dict[tuple[str, str], str] = {}
        # Read on the first lookup: formatting every op's traceback costs seconds on a big model, and
        # most first calls never ask (only error messages and reports do).
        self._graph = concrete.graph
        self._lock = threading.Lock()

    def _build(self) -> None:
        with self._lock:
            if self._graph is None:
                return
            try:
                self._add(self.top, self._graph, depth=0)
            except (AttributeError, TypeError, ValueError):
                # A graph without TF's usual tracebacks (another TF version, a restored function): no
                # creation sites, as TF's messages have none for functions without recorded stack traces.
                self._ops.clear()
            self._graph = None

    def _add(self, function: str, graph, depth: int) -> None:
        for op in graph.get_operations():
            self._ops[(function, op.name)] = self._format(op.traceback)
            for attr in ("f", "then_branch", "else_branch", "body"):
                try:
                    self._callee[(function, op.name)] = op.get_attr(attr).name
                    break
                except (ValueError, AttributeError):
                    continue
        # Called functions carry their own FuncGraphs (without them, callee ops have no stack here).
        for name, fn in called_functions(graph).items():
            sub = getattr(fn, "graph", None)
            if sub is not None and depth < 8 and not any(k[0] == name for k in self._ops):
                self._add(name, sub, depth + 1)

    @classmethod
    def _format(cls, traceback) -> list[str]:
        # Functions restored from a SavedModel have no tracebacks (None).
        frames = [(f.filename, f.lineno, f.name) for f in traceback or ()]
        if not frames:
            return []
        prefix = _common_dir_prefix([f[0] for f in frames])
        return [f'File "{file[len(prefix):]}", line {line}, in {name}' for file, line, name in frames
                if not cls._internal(file)]

    @classmethod
    def _internal(cls, filename: str) -> bool:
        parts = filename.replace("\\", "/").split("/")
        # AutoGraph's generated modules are TF's machinery too (TF maps them back to the user's file).
        return any(p in cls._INTERNAL or p.startswith("__autograph_generated") for p in parts)

    def lookup(self, function: str | None, node: str) -> list[str]:
        """The user frames that created ``node`` of ``function`` (the traced function if None);
        a node an inliner named ``call/inner_node`` is looked up inside the called function."""
        if self._graph is not None:
            self._build()
        function = function or self.top
        if (function, node) in self._ops:
            return self._ops[(function, node)]
        head, _, rest = node.partition("/")
        while rest:
            callee = self._callee.get((function, head))
            if callee is not None:
                found = self.lookup(callee, rest)
                if found:
                    return found
            nxt, _, rest = rest.partition("/")
            head = f"{head}/{nxt}"
        return []


def _common_dir_prefix(paths: list[str]) -> str:
    first = min(paths)
    last = max(paths)
    i = 0
    while i < min(len(first), len(last)) and first[i] == last[i]:
        i += 1
    return first[:first.rfind("/", 0, i) + 1] if "/" in first[:i] else ""


def error_for(function_name: str, problems: list[Uncompilable], jit_device: str = "XLA_CPU_JIT",
              attrs: str = "_XlaMustCompile=true", created_at: CreationStacks | None = None,
              eager_op: bool = False) -> MustCompileError:
    """TF's must-compile error (a ``tf.errors.InvalidArgumentError``) listing all problems (TF lists
    the first). With ``created_at``, each problem is followed by TF's "The op is created at:" block
    naming the user's source lines. The message keeps TF's form: the ValidateGraph text, then each
    problem's call stack and TF's "tf2xla conversion failed" context as ``\n\t`` lines (TF's
    ``AppendToMessage``), and with ``eager_op`` (the error of a call) TF's `` [Op:<function>]`` suffix."""
    parts, with_stacks = [], False
    for p in problems:
        text = _describe(p)
        frames = created_at.lookup(p.stack[-1].function if p.stack else None, p.node) if created_at else []
        if frames:
            text += "\nThe op is created at: \n" + "\n".join(frames)
            with_stacks = True
        parts.append(text)
    # TF names one problem; after a stack block the next problem starts on its own line.
    listed = ("\n" if with_stacks else ", ").join(parts)
    message = (f"Detected unsupported operations when trying to compile graph {function_name}[{attrs}] on "
               f"{jit_device}: {listed}")
    stacks = []
    for p in problems:
        frames = " -> ".join(f"{f.node}" + (f" (in {f.function})" if f.function else "") for f in p.stack)
        stacks.append(f"\t{p.node}: {frames}")
    message += "\nUncompilable nodes and their call stacks:\n" + "\n".join(stacks)
    message += "\n\t" + _TF2XLA_CONTEXT.format(fn=function_name, attrs=attrs)
    if eager_op:
        message += f" [Op:{function_name}]"
    return MustCompileError(message, problems)


def conversion_error(error: Exception, function_name: str, created_at: CreationStacks | None = None,
                     attrs: str = "_XlaMustCompile=true") -> Exception:
    """A failure while compiling a must-compile function, in the form TF's XLA reports it:
    ``<reason>\n\nStack trace for op definition: ...\n\n\t [[{{node N}}]]\n\ttf2xla conversion failed
    while converting <f>[...]. ... [Op:<f>]``, as the same class (a ``tf.errors`` type). Only errors
    raised while lowering a node carry ``node_name``; any other error is returned unchanged."""
    node = getattr(error, "node_name", None)
    if node is None or not isinstance(error, TfXlaError):
        return error
    message = getattr(error, "reason", error.message)
    frames = created_at.lookup(None, node) if created_at else []
    if frames:
        message += "\n\nStack trace for op definition: \n" + "\n".join(frames) + "\n"
    message += f"\n\t [[{{{{node {node}}}}}]]\n\t" + _TF2XLA_CONTEXT.format(fn=function_name, attrs=attrs)
    message += f" [Op:{function_name}]"
    try:
        converted = type(error)(message)
    except TypeError:  # a subclass with its own constructor: keep it as it is
        return error
    converted.node_name, converted.reason = node, getattr(error, "reason", error.message)
    return converted


def check_function(library: function_pb2.FunctionDefLibrary, function_name: str,
                   jit_device: str = "XLA_CPU_JIT", created_at: CreationStacks | None = None) -> None:
    """Raise :class:`MustCompileError` unless XLA can compile all of ``function_name``."""
    problems = uncompilable_nodes(library, function_name, jit_device)
    if problems:
        raise error_for(function_name, problems, jit_device, created_at=created_at)


def check_concrete(concrete, jit_device: str = "XLA_CPU_JIT") -> None:
    """Must-compile check for a traced ``tf.function`` (ConcreteFunction)."""
    library = concrete.graph.as_graph_def().library
    fdef = concrete.function_def
    lib = function_pb2.FunctionDefLibrary()
    lib.CopyFrom(library)
    if not any(f.signature.name == fdef.signature.name for f in lib.function):
        lib.function.add().CopyFrom(fdef)
    check_function(lib, fdef.signature.name, jit_device, created_at=CreationStacks(concrete))
