"""Must-compile checking: what ``jit_compile=True`` requires, and TF's error when it can't be met.

Stage: clustering (the ``_XlaMustCompile`` path). A function TF must compile is checked with TF's
permissive filter (resource, stateful RNG, Assert, TensorArray, ... are all fine; only ops without an
XLA kernel, or bad function bodies, are not). TF stops at the first unsupported op and says
``Detected unsupported operations when trying to compile graph <f>[...] on XLA_CPU_JIT: <Op> (<why>)
{{node <name>}}``; we raise the same text but list **every** offending node, each with the call
stack that reaches it.
"""
from __future__ import annotations

from tensorflow.core.framework import function_pb2, graph_pb2

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.jit.compilability import Frame, Uncompilable, must_compile_checker

# Nodes of a traced graph that stand for the function's arguments and results, not body ops.
_INTERFACE_OPS = ("_Arg", "_Retval", "Placeholder")


class MustCompileError(InvalidArgumentError):
    """A ``jit_compile=True`` function that XLA can't compile; ``problems`` lists every reason."""

    def __init__(self, message: str, problems: list[Uncompilable]) -> None:
        super().__init__(message)
        self.problems = problems


def uncompilable_nodes(library: function_pb2.FunctionDefLibrary, function_name: str,
                       jit_device: str = "XLA_CPU_JIT") -> list[Uncompilable]:
    """Every node of ``function_name`` (recursively through calls and control flow) XLA can't compile."""
    return must_compile_checker(jit_device, library).find_uncompilable_in_function(function_name)


def uncompilable_in_graph(graph_def: graph_pb2.GraphDef, name: str = "graph",
                          jit_device: str = "XLA_CPU_JIT") -> list[Uncompilable]:
    """The same check on a traced graph taken as a function body (its Placeholders are the args)."""
    checker = must_compile_checker(jit_device, graph_def.library)
    by_name = {n.name: n for n in graph_def.node}
    problems: list[Uncompilable] = []
    for nd in graph_def.node:
        if nd.op in _INTERFACE_OPS:
            continue
        # Depth 2: inside a function body, as TF sees the nodes of a must-compile call.
        found = checker._check(nd, (Frame(name, None), Frame(nd.name, name)), first_only=False,
                               ref_input=checker._has_ref_input(nd, by_name))
        problems.extend(found)
    return problems


def _describe(problem: Uncompilable) -> str:
    reason = problem.reason.removeprefix("unsupported op: ")
    where = "".join(f" in {f.function}" for f in problem.stack[1:-1] if f.function)
    return f"{problem.op} ({reason}){{{{node {problem.node}}}}}{where}"


def error_for(function_name: str, problems: list[Uncompilable], jit_device: str = "XLA_CPU_JIT",
              attrs: str = "_XlaMustCompile=true") -> MustCompileError:
    """TF's ValidateGraph error text, listing all problems (TF lists the first)."""
    listed = ", ".join(_describe(p) for p in problems)
    message = (f"Detected unsupported operations when trying to compile graph {function_name}[{attrs}] on "
               f"{jit_device}: {listed}")
    stacks = []
    for p in problems:
        frames = " -> ".join(f"{f.node}" + (f" (in {f.function})" if f.function else "") for f in p.stack)
        stacks.append(f"\t{p.node}: {frames}")
    return MustCompileError(message + "\nUncompilable nodes and their call stacks:\n" + "\n".join(stacks),
                            problems)


def check_function(library: function_pb2.FunctionDefLibrary, function_name: str,
                   jit_device: str = "XLA_CPU_JIT") -> None:
    """Raise :class:`MustCompileError` unless XLA can compile all of ``function_name``."""
    problems = uncompilable_nodes(library, function_name, jit_device)
    if problems:
        raise error_for(function_name, problems, jit_device)


def check_concrete(concrete, jit_device: str = "XLA_CPU_JIT") -> None:
    """Must-compile check for a traced ``tf.function`` (ConcreteFunction)."""
    library = concrete.graph.as_graph_def().library
    fdef = concrete.function_def
    lib = function_pb2.FunctionDefLibrary()
    lib.CopyFrom(library)
    if not any(f.signature.name == fdef.signature.name for f in lib.function):
        lib.function.add().CopyFrom(fdef)
    check_function(lib, fdef.signature.name, jit_device)
