"""From ``tf.function`` to the GraphDef TF's JIT passes see: instantiation and call inlining.

Stage: import. TF runs a ``tf.function`` by *instantiating* its FunctionDef into a graph whose inputs
are ``_Arg`` nodes and whose outputs are ``_Retval`` nodes (names ``<arg>`` and ``<ret>_RetVal``), and by
*inlining* nested ``PartitionedCall``/``StatefulPartitionedCall`` calls (names ``<call>/<node>``) before
MarkForCompilation runs. This module does the same in Python so the clustering pass sees one graph:

* :func:`instantiate` — FunctionDef → GraphDef in TF's runtime form (``FunctionDefToBodyHelper``);
* :func:`inline_calls` — inline function calls recursively, except functions TF also keeps as calls
  (``_noinline``, or ``_XlaMustCompile=true``, which XLA compiles as a unit);
* the entry points for Python callers (:func:`~tfxla_cluster.graph.loader.graph_def_from_function`,
  :func:`~tfxla_cluster.graph.loader.graph_def_from_concrete`) are in :mod:`tfxla_cluster.graph.loader`.

Functional control flow (If, While, Case and their stateless forms) stays as nodes; their branch and
body functions remain in the library (:mod:`.lower_functional` lowers them before grappler, as TF does).
"""
from __future__ import annotations


from tensorflow.core.framework import function_pb2, graph_pb2, node_def_pb2

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.graph import opdefs
from tfxla_cluster.graph.opdefs import ARG_OP, ARG_OPS, RETVAL_OP, RETVAL_OPS

CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


def _flat_output_index(node_def: node_def_pb2.NodeDef, op_def, arg_name: str, index: int) -> int:
    offset = 0
    for arg in op_def.output_arg:   # the usual case: single-tensor arguments up to arg_name
        if arg.name == arg_name and not (arg.number_attr or arg.type_list_attr):
            return offset + index
        if arg.number_attr or arg.type_list_attr:
            break   # a list argument: count its slots
        offset += 1
    offset = 0
    for slot in opdefs.output_slots(node_def, op_def):
        if slot.arg_name == arg_name:
            return offset + index
        offset += 1
    raise InvalidArgumentError(f"Node '{node_def.name}' has no output argument '{arg_name}'")


def instantiate(fdef: function_pb2.FunctionDef,
                library: function_pb2.FunctionDefLibrary) -> graph_pb2.GraphDef:
    """Instantiate ``fdef`` as TF's function runtime does: ``_Arg`` → body → ``_Retval``.

    Input references in FunctionDef syntax (``node:out_arg:i``) become GraphDef syntax (``node:k``).
    """
    sig = fdef.signature
    out = graph_pb2.GraphDef()
    out.library.CopyFrom(library)
    body = {n.name: n for n in fdef.node_def}
    arg_names = {a.name for a in sig.input_arg}
    translated: dict[str, str] = {}   # a tensor feeds many inputs: each reference is translated once
    op_defs: dict[str, object] = {}   # lookup_op_def scans the library

    def translate(ref: str) -> str:
        if ref.startswith("^"):
            return ref
        done = translated.get(ref)
        if done is not None:
            return done
        parts = ref.split(":")
        if len(parts) == 1 or (len(parts) == 2 and parts[0] in arg_names):
            return ref if parts[0] in arg_names else parts[0]
        if len(parts) != 3 or not parts[2].isdigit():
            raise InvalidArgumentError(f"Function '{sig.name}': malformed input '{ref}'")
        node_name, arg, idx = parts
        src = body.get(node_name)
        if src is None:
            raise InvalidArgumentError(f"Function '{sig.name}': input '{ref}' names no node")
        op_def = op_defs.get(src.op)
        if op_def is None:
            op_def = op_defs[src.op] = opdefs.lookup_op_def(src.op, library)
        flat = _flat_output_index(src, op_def, arg, int(idx))
        done = translated[ref] = node_name if flat == 0 else f"{node_name}:{flat}"
        return done

    for i, arg in enumerate(sig.input_arg):
        nd = out.node.add(name=arg.name, op=ARG_OP)
        nd.attr["T"].type = arg.type if arg.type else fdef.attr[arg.type_attr].type
        nd.attr["index"].i = i
        if i in fdef.arg_attr:
            for key, value in fdef.arg_attr[i].attr.items():
                nd.attr[key].CopyFrom(value)
    for src in fdef.node_def:
        nd = out.node.add()
        nd.CopyFrom(src)
        del nd.input[:]
        nd.input.extend(translate(r) for r in src.input)
    for i, arg in enumerate(sig.output_arg):
        nd = out.node.add(name=f"{arg.name}_RetVal", op=RETVAL_OP)
        nd.input.append(translate(fdef.ret[arg.name]))
        nd.attr["T"].type = arg.type if arg.type else fdef.attr[arg.type_attr].type
        nd.attr["index"].i = i
    return out


def find_function(library: function_pb2.FunctionDefLibrary, name: str) -> function_pb2.FunctionDef | None:
    for fdef in library.function:
        if fdef.signature.name == name:
            return fdef
    return None


def callee_name(node_def: node_def_pb2.NodeDef, library: function_pb2.FunctionDefLibrary) -> str | None:
    """The function a node calls: ``f`` of a (Stateful)PartitionedCall, or the op itself if it is a
    library function. None for other nodes."""
    if node_def.op in CALL_OPS and "f" in node_def.attr:
        return node_def.attr["f"].func.name
    if find_function(library, node_def.op) is not None:
        return node_def.op
    return None


def _multi_device_call(node_def: node_def_pb2.NodeDef) -> bool:
    """TF's ``LowerAsMultiDeviceFunction``: a (Stateful)PartitionedCall, or a call marked
    ``_lower_as_multi_device_function``."""
    attr = node_def.attr.get("_lower_as_multi_device_function")
    return node_def.op in ("PartitionedCall", "StatefulPartitionedCall") or bool(attr is not None and attr.b)


def _keeps_call(fdef: function_pb2.FunctionDef, node_def: node_def_pb2.NodeDef) -> bool:
    """TF does not inline functions marked _noinline, nor ones XLA must compile as a whole."""
    def flag(name: str) -> bool:
        return (name in fdef.attr and fdef.attr[name].b) or (name in node_def.attr and node_def.attr[name].b)
    return flag("_noinline") or flag("_XlaMustCompile")


#: The NoOp control consumers of an inlined call wait on, ``<call>/`` + this.
OUTPUT_CONTROL_NODE = "output_control_node/_0"


def inline_calls(graph_def: graph_pb2.GraphDef, max_depth: int = 32) -> graph_pb2.GraphDef:
    """Inline every function call (recursively) that TF's runtime would inline.

    Names follow TF's inliner: body nodes become ``<call>/<node>``; the callee's ``_Arg``/``_Retval``
    become Identity nodes ``<call>/<arg>`` and ``<call>/<ret>_RetVal``; a call with control inputs gets a
    NoOp ``<call>/input_control_node/_0`` that gates the body, and control consumers of the call wait on
    a NoOp ``<call>/output_control_node/_0`` — which waits, as TF's lowering of calls does, on the
    function's control outputs for a (Stateful)PartitionedCall and on its data outputs for a native call.
    """
    library = graph_def.library
    current = graph_def
    for _ in range(max_depth):
        changed, current = _inline_once(current, library)
        if not changed:
            return current
    raise InvalidArgumentError(f"Function inlining did not converge after {max_depth} levels (recursive function?)")


def _inline_once(graph_def: graph_pb2.GraphDef,
                 library: function_pb2.FunctionDefLibrary) -> tuple[bool, graph_pb2.GraphDef]:
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(library)
    rename: dict[str, str] = {}   # "call:i" → replacement tensor; "^call" → replacement control
    changed = False
    for nd in graph_def.node:
        fname = callee_name(nd, library)
        fdef = find_function(library, fname) if fname else None
        if fdef is None or _keeps_call(fdef, nd):
            out.node.add().CopyFrom(nd)
            continue
        changed = True
        body = instantiate(fdef, library)
        prefix = nd.name + "/"
        data_inputs = [i for i in nd.input if not i.startswith("^")]
        control_inputs = [i for i in nd.input if i.startswith("^")]
        gate = None
        if control_inputs:
            gate = out.node.add(name=prefix + "input_control_node/_0", op="NoOp", device=nd.device)
            gate.input.extend(control_inputs)
        ret_names: list[str] = []
        for bn in body.node:
            new = out.node.add()
            new.CopyFrom(bn)
            new.name = prefix + bn.name
            if not new.device:
                new.device = nd.device
            del new.input[:]
            if bn.op == ARG_OP:
                index = bn.attr["index"].i
                if index >= len(data_inputs):
                    raise InvalidArgumentError(
                        f"Node '{nd.name}': calls '{fname}' with {len(data_inputs)} inputs, "
                        f"but the function takes more")
                new.op = "Identity"
                new.ClearField("attr")
                new.attr["T"].CopyFrom(bn.attr["T"])
                new.input.append(data_inputs[index])
            else:
                for ref in bn.input:
                    ctrl = ref.startswith("^")
                    new.input.append(("^" if ctrl else "") + prefix + ref.lstrip("^"))
                if bn.op == RETVAL_OP:
                    new.op = "Identity"
                    t = bn.attr["T"]
                    new.ClearField("attr")
                    new.attr["T"].CopyFrom(t)
                    ret_names.append(new.name)
            if gate is not None and not bn.input and bn.op != ARG_OP:
                new.input.append("^" + gate.name)
        for i, name in enumerate(ret_names):
            rename[f"{nd.name}:{i}"] = name
        done = out.node.add(name=prefix + OUTPUT_CONTROL_NODE, op="NoOp", device=nd.device)
        if _multi_device_call(nd):
            # TF's lowering of a (Stateful)PartitionedCall: control consumers wait on the function's
            # control outputs (its side effects), not on its data outputs.
            done.input.extend("^" + prefix + cr for cr in fdef.control_ret.values())
        else:  # a native function call: on its data outputs
            done.input.extend("^" + n for n in ret_names)
        rename["^" + nd.name] = "^" + done.name
    if not changed:
        return False, graph_def
    for node in out.node:
        refs = list(node.input)
        del node.input[:]
        for ref in refs:
            if ref.startswith("^"):
                node.input.append(rename.get(ref, ref))
                continue
            name, _, idx = ref.partition(":")
            node.input.append(rename.get(f"{name}:{idx or 0}", ref))
    _prune_unused_control_gates(out)
    return True, out


def _prune_unused_control_gates(graph_def: graph_pb2.GraphDef) -> None:
    """Drop ``output_control_node`` NoOps nobody waits on (TF only creates them when needed)."""
    used = {ref[1:] for n in graph_def.node for ref in n.input if ref.startswith("^")}
    keep = [n for n in graph_def.node
            if not (n.op == "NoOp" and n.name.endswith("/output_control_node/_0") and n.name not in used)]
    if len(keep) != len(graph_def.node):
        del graph_def.node[:]
        graph_def.node.extend(keep)


def runtime_to_placeholders(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """A runnable (Session) form of a runtime-form graph: each ``_Arg`` becomes a Placeholder of its
    recorded dtype and shape, each ``_Retval`` an Identity of the same name (fetch ``<name>:0``)."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    for nd in out.node:
        if nd.op in ARG_OPS:
            dtype = nd.attr["T"].type
            shapes = nd.attr["_output_shapes"].list.shape if "_output_shapes" in nd.attr else []
            nd.op = "Placeholder"
            nd.ClearField("attr")
            nd.attr["dtype"].type = dtype
            if shapes:
                nd.attr["shape"].shape.CopyFrom(shapes[0])
        elif nd.op in RETVAL_OPS:
            t = nd.attr["T"].type
            nd.op = "Identity"
            nd.ClearField("attr")
            nd.attr["T"].type = t
    return out
