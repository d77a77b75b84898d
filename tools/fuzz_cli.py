"""Bad-input fuzzer for the command line (issue 19): mutated GraphDefs, HLO modules, SavedModels and flags.

Stage: testing tool (not part of the package). Each case takes a bundled input and damages it, then runs one
command on it in-process (``tfxla_cluster.cli.main``). The kinds of case:

* ``graph``: a ``graphs/*.pbtxt`` with 1-3 structural mutations (a node's op, inputs, name, attributes, dtypes,
  constant tensors, shapes, device; the function library; versions; a cycle) or plausible ones that TF's
  importer often takes (an op swapped for another of its arity, an argument's shape, special constant values,
  a flipped or changed attribute), through info/mark/explain/hlo/viz/ops/tensorboard, auto-clustering on or
  off, with or without ``--grappler`` / ``--no-inline``;
* ``bytes`` / ``pb``: the text truncated, a line dropped, bytes flipped or junk inserted; the binary ``.pb``;
* ``hlo``: the HLO text ``tfxla-cluster hlo`` prints for a bundled graph, mutated (shapes, types, opcodes,
  operands, attributes, bytes), through ``run-hlo``, with damaged ``--inputs`` npz files and odd ``--output``;
* ``flags``: random ``TF_XLA_FLAGS`` / ``XLA_FLAGS`` strings (known and unknown names, bad values);
* ``savedmodel``: a small SavedModel with its saved_model.pb damaged, variables missing or truncated, a bad
  fingerprint or an unknown signature;
* ``aot``: the ``tools/examples/aot`` model with its graph or tf2xla.Config damaged, or odd ``--name``,
  ``--out-dir``, ``--target-cpu``/``--target-features``/``--threads``.

What a run must end in:

* exit 0, only for a GraphDef TF's own importer (``tf.graph_util.import_graph_def``) accepts;
* exit 2 with exactly one line on stderr (for a one-file command, naming that file);
* ``run-hlo`` alone may exit 1: a difference from the HLO evaluator, reported as such.

Anything else is a defect: ``internal error`` (exit 1), an exception out of ``main``, a hang (``--case-seconds``),
or the process dying (a signal: cases run in a worker process, restarted after the case that killed it).

    python tools/fuzz_cli.py --seed 1 --count 500            # a summary and each defect
    python tools/fuzz_cli.py --seed 1 --count 500 --json out.json
    python tools/fuzz_cli.py --seed 1 --case 17               # one case again, with a traceback
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = sorted((ROOT / "graphs").glob("*.pbtxt"))
HLO_SOURCES = ("mlp", "layer_norm", "softmax_xent", "conv_block")   # small clusters: run-hlo stays quick
AUTO_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_min_cluster_size=1"
GRAPH_COMMANDS = ("info", "mark", "explain", "hlo", "viz", "ops", "tensorboard")
# DataType enum values: valid ones of every kind, reference types, and numbers no DataType has
DTYPES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 14, 17, 19, 20, 21, 23, 101, 119, 99, 1000, -3)
DIMS = (-7, -1, 0, 1, 3, 2**31, 2**40, 2**62)
WEIRD_NAMES = ("", "a b", "x:0", "^x", "node/", "_", "ü", "a" * 300)
OPS = ("NoSuchOp", "Add", "MatMul", "Relu", "Const", "Placeholder", "Identity", "Conv2D", "While", "If",
       "ConcatV2", "Reshape", "Split", "Pack", "_Retval", "_Arg", "VarHandleOp", "ReadVariableOp",
       "StatelessWhile", "PartitionedCall", "NoOp", "Switch", "Merge", "Enter", "Unique", "StringJoin")
FLAG_NAMES = ("--tf_xla_auto_jit", "--tf_xla_min_cluster_size", "--tf_xla_max_cluster_size",
              "--tf_xla_clustering_fuel", "--tf_xla_ops_to_cluster", "--tf_xla_cpu_global_jit",
              "--tf_xla_clustering_debug", "--tf_xla_persistent_cache_directory", "--tf_xla_no_such_flag")
XLA_FLAG_NAMES = ("--xla_dump_to", "--xla_backend_optimization_level", "--xla_cpu_enable_fast_math",
                  "--xla_disable_hlo_passes", "--xla_no_such_flag")
FLAG_VALUES = ("", "1", "-1", "2", "0", "true", "false", "yes", "x", "1e3", "9" * 5000, "2147483648", "-0",
               "single-gpu(1)", "fast", "MatMul,Relu", "FUSIBLE", ",", "=", "ü", "/dev/null/x")


@dataclasses.dataclass
class Case:
    index: int
    kind: str          # 'graph' | 'bytes' | 'pb' | 'hlo' | 'flags'
    mutations: list[str]
    argv: list[str]
    payload: bytes     # the input file's content ('' for flags)
    suffix: str        # the input file's extension
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)  # more inputs, written beside it


# ------------------------------------------------------------------------------------- graph mutations

def _tf():
    import tensorflow as tf
    return tf


def _graph_def(path: Path):
    from google.protobuf import text_format
    return text_format.Parse(path.read_text(encoding="utf-8"), _tf().compat.v1.GraphDef())


def _random_attr_value(r: np.random.Generator):
    from tensorflow.core.framework import attr_value_pb2
    v = attr_value_pb2.AttrValue()
    k = int(r.integers(10))
    if k == 0:
        v.s = b"float"
    elif k == 1:
        v.i = int(r.choice([-1, 0, 2, 2**40, -(2**63)]))
    elif k == 2:
        v.f = float(r.choice([0.5, float("nan"), float("inf")]))
    elif k == 3:
        v.b = True
    elif k == 4:
        v.type = int(r.choice(DTYPES))
    elif k == 5:
        for d in r.choice(DIMS, size=int(r.integers(0, 4))):
            v.shape.dim.add().size = int(d)
    elif k == 6:
        v.list.i.extend(int(x) for x in r.choice(DIMS, size=int(r.integers(0, 5))))
    elif k == 7:
        v.list.type.extend(int(x) for x in r.choice(DTYPES, size=int(r.integers(0, 3))))
    elif k == 8:
        v.tensor.dtype = int(r.choice(DTYPES))
        v.tensor.tensor_shape.dim.add().size = int(r.choice(DIMS))
    else:
        v.func.name = str(r.choice(["no_such_function", ""]))
    return v


def _mutate_tensor(t, r: np.random.Generator) -> str:
    k = int(r.integers(5))
    if k == 0:
        del t.tensor_shape.dim[:]
        for d in r.choice(DIMS, size=int(r.integers(1, 4))):
            t.tensor_shape.dim.add().size = int(d)
        return "tensor_shape"
    if k == 1:
        t.dtype = int(r.choice(DTYPES))
        return "tensor_dtype"
    if k == 2:
        t.tensor_content = bytes(r.integers(0, 256, size=int(r.integers(0, 13)), dtype=np.uint8))
        return "tensor_content"
    if k == 3:
        t.ClearField("tensor_content")
        t.float_val.extend([1.0] * int(r.integers(0, 5)))
        t.int_val.extend([7] * int(r.integers(0, 5)))
        return "tensor_values"
    t.tensor_shape.unknown_rank = True
    return "tensor_unknown_rank"


def _mutate_node(nd, names: list[str], r: np.random.Generator) -> str:
    k = int(r.integers(11))
    if k == 0:
        nd.op = str(r.choice(OPS))
        return "op"
    if k == 1 and nd.input:
        del nd.input[int(r.integers(len(nd.input)))]
        return "drop_input"
    if k == 2:
        ref = str(r.choice(names + ["no_such_node"]))
        nd.input.append(str(r.choice([ref, f"{ref}:{int(r.choice([1, 7, -1]))}", f"^{ref}", nd.name])))
        return "add_input"
    if k == 3 and nd.input:
        i = int(r.integers(len(nd.input)))
        nd.input[i] = str(r.choice(names + ["no_such_node:0", "x:99", "^", ":0", nd.name]))
        return "rewire_input"
    if k == 4:
        nd.name = str(r.choice(names + list(WEIRD_NAMES)))
        return "name"
    if k == 5 and nd.attr:
        del nd.attr[str(r.choice(sorted(nd.attr)))]
        return "drop_attr"
    if k == 6:
        key = str(r.choice(sorted(nd.attr) + ["T", "dtype", "shape", "value", "N", "no_such_attr"]))
        nd.attr[key].CopyFrom(_random_attr_value(r))
        return "attr_value"
    if k == 7:
        typed = [a for a in sorted(nd.attr) if nd.attr[a].WhichOneof("value") == "type"]
        if typed:
            nd.attr[str(r.choice(typed))].type = int(r.choice(DTYPES))
            return "dtype"
    if k == 8 and "value" in nd.attr and nd.attr["value"].HasField("tensor"):
        return _mutate_tensor(nd.attr["value"].tensor, r)
    if k == 9:
        shaped = [a for a in sorted(nd.attr) if nd.attr[a].WhichOneof("value") in ("shape", "list")]
        if shaped:
            v = nd.attr[str(r.choice(shaped))]
            if v.WhichOneof("value") == "shape":
                v.shape.dim.add().size = int(r.choice(DIMS))
            else:
                v.list.i.extend(int(x) for x in r.choice(DIMS, size=2))
            return "shape_or_list"
    nd.device = str(r.choice(["/device:GPU:0", "garbage", "/job:x/replica:-1", "/device:CPU:99", ""]))
    return "device"


UNARY = ("Relu", "Tanh", "Exp", "Neg", "Rsqrt", "Round", "Abs", "Sigmoid", "Sqrt", "Log", "Floor", "Square",
         "Reciprocal", "Sign", "Softplus", "Erf", "IsNan", "LogicalNot", "Invert")
BINARY = ("AddV2", "Mul", "Sub", "RealDiv", "Maximum", "Minimum", "Pow", "SquaredDifference", "FloorDiv",
          "FloorMod", "Atan2", "DivNoNan", "Xlogy", "Less", "Equal", "LogicalAnd", "BitwiseAnd", "LeftShift")
SPECIAL = (float("nan"), float("inf"), -float("inf"), -0.0, 1e-45, 3.4e38, 0.0, 1.0)


def mutate_plausibly(gd, r: np.random.Generator) -> str:
    """One mutation that often leaves a graph TF's importer takes — so that clustering and lowering, not
    only the importer, see odd graphs: an op swapped for another of its arity, an argument's shape, a
    constant's values (special ones) or shape, a boolean or integer attribute."""
    nodes = [n for n in gd.node if n.op not in ("_Arg", "_Retval", "NoOp")]
    if not nodes:
        return "none"
    nd = nodes[int(r.integers(len(nodes)))]
    k = int(r.integers(5))
    if k == 0 and nd.op in UNARY + BINARY:
        nd.op = str(r.choice(UNARY if nd.op in UNARY else BINARY))
        return "swap_op"
    if k == 1:
        ph = [n for n in gd.node if n.op == "Placeholder"]
        if ph:
            shape = ph[int(r.integers(len(ph)))].attr["shape"].shape
            if r.random() < 0.2:
                shape.Clear()
                shape.unknown_rank = True
            elif shape.dim:
                shape.dim[int(r.integers(len(shape.dim)))].size = int(r.choice([-1, 0, 1, 5, 2**31]))
            return "placeholder_shape"
    if k == 2:
        consts = [n for n in gd.node if n.op == "Const" and n.attr["dtype"].type in (1, 2, 3, 9)]
        if consts:
            t = consts[int(r.integers(len(consts)))].attr["value"].tensor
            dims = [d.size for d in t.tensor_shape.dim]
            values = r.choice(SPECIAL, size=int(np.prod(dims)) if dims else 1)
            if r.random() < 0.3:  # another shape: a scalar or one more dimension
                dims = [] if r.random() < 0.5 else dims + [1]
                values = values[:1] if not dims else values
            from tensorflow.python.framework import tensor_util
            dtype = {1: np.float32, 2: np.float64, 3: np.int32, 9: np.int64}[t.dtype]
            with np.errstate(all="ignore"):
                arr = values.astype(dtype) if dtype in (np.float32, np.float64) else \
                    np.nan_to_num(values, posinf=2**31 - 1, neginf=-2**31).astype(dtype)
            t.CopyFrom(tensor_util.make_tensor_proto(arr.reshape(dims)))
            return "const_values"
    if k == 3:
        flags = [a for a in sorted(nd.attr) if nd.attr[a].WhichOneof("value") == "b"]
        if flags:
            a = str(r.choice(flags))
            nd.attr[a].b = not nd.attr[a].b
            return "flip_bool"
    ints = [a for a in sorted(nd.attr) if nd.attr[a].WhichOneof("value") == "i"]
    if ints:
        nd.attr[str(r.choice(ints))].i = int(r.choice([-2, -1, 0, 1, 2, 3, 64]))
        return "int_attr"
    return "none"


def mutate_graph(gd, r: np.random.Generator) -> list[str]:
    """1-3 structural mutations of ``gd`` in place (half the time plausible ones); their names."""
    if r.random() < 0.5:
        return [mutate_plausibly(gd, r) for _ in range(int(r.integers(1, 3)))]
    done = []
    for _ in range(int(r.integers(1, 4))):
        funcs = list(gd.library.function)
        k = int(r.integers(10))
        if k == 0 and gd.node:
            del gd.node[int(r.integers(len(gd.node)))]
            done.append("drop_node")
        elif k == 1:
            gd.versions.producer = int(r.choice([-1, 0, 2**31 - 1]))
            gd.versions.min_consumer = int(r.choice([0, 10**6]))
            done.append("versions")
        elif k == 2 and funcs:
            f = funcs[int(r.integers(len(funcs)))]
            fk = int(r.integers(4))
            if fk == 0 and f.node_def:
                done.append("function_" + _mutate_node(f.node_def[int(r.integers(len(f.node_def)))],
                                                       [n.name for n in f.node_def], r))
            elif fk == 1:
                del gd.library.function[int(r.integers(len(funcs)))]
                done.append("drop_function")
            elif fk == 2 and f.ret:
                f.ret[str(r.choice(sorted(f.ret)))] = str(r.choice(["no_such:output:0", "", "x"]))
                done.append("function_ret")
            else:
                f.signature.name = str(r.choice([funcs[0].signature.name, "", "renamed"]))
                done.append("function_name")
        elif k == 3 and gd.node:  # a cycle: a node takes a later one as input
            i, j = sorted(int(x) for x in r.integers(len(gd.node), size=2))
            gd.node[i].input.append(gd.node[j].name)
            done.append("cycle")
        elif gd.node:
            done.append(_mutate_node(gd.node[int(r.integers(len(gd.node)))], [n.name for n in gd.node], r))
    return done


def mutate_bytes(data: bytes, r: np.random.Generator) -> tuple[bytes, str]:
    k = int(r.integers(4))
    if k == 0:
        return data[:int(r.integers(len(data) + 1))], "truncate"
    if k == 1:
        lines = data.split(b"\n")
        del lines[int(r.integers(len(lines)))]
        return b"\n".join(lines), "drop_line"
    if k == 2:
        b = bytearray(data)
        for i in r.integers(len(b), size=int(r.integers(1, 6))):
            b[int(i)] = int(r.integers(256))
        return bytes(b), "flip_bytes"
    i = int(r.integers(len(data) + 1))
    alphabet = np.frombuffer(b"{}:\"\\ \n\x00\xffnode attr input 9-", dtype=np.uint8)
    junk = r.choice(alphabet, size=int(r.integers(1, 12))).tobytes()
    return data[:i] + junk + data[i:], "insert"


# ----------------------------------------------------------------------------------------- HLO and flags

def _hlo_texts() -> dict[str, str]:
    """The HLO module ``tfxla-cluster hlo`` prints for each of HLO_SOURCES (its first cluster)."""
    from tfxla_cluster.cli import main
    out = {}
    for name in HLO_SOURCES:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            main(["hlo", str(ROOT / "graphs" / f"{name}.pbtxt"), "--flags", AUTO_FLAGS])
        text = buf.getvalue()
        start = text.find("HloModule")
        if start >= 0:
            end = text.find("\nHloModule", start + 1)
            out[name] = text[start:end if end > 0 else len(text)].strip() + "\n"
    return out


def mutate_hlo(text: str, r: np.random.Generator) -> tuple[str, list[str]]:
    import re
    done = []
    for _ in range(int(r.integers(1, 3))):
        lines = text.split("\n")
        body = [i for i, ln in enumerate(lines) if "=" in ln and not ln.startswith("HloModule")]
        k = int(r.integers(7))
        if not body:
            k = 6
        i = int(r.choice(body)) if body else 0
        if k == 0:
            lines[i] = re.sub(r"\[(\d+)", lambda m: f"[{int(r.choice([0, 1, 7, 2**31, 2**40]))}", lines[i], count=1)
            done.append("hlo_dim")
        elif k == 1:
            lines[i] = re.sub(r"\b(f32|f64|s32|pred|f16|bf16|s64)\b",
                              lambda m: str(r.choice(["f32", "s8", "pred", "c64", "u64", "token", "f8e4m3fn", "q7"])),
                              lines[i], count=1)
            done.append("hlo_type")
        elif k == 2:
            lines[i] = re.sub(r"= (\S+) (\w[\w-]*)\(", lambda m: f"= {m.group(1)} " + str(r.choice(
                ["add", "dot", "tuple", "get-tuple-element", "reduce", "no-such-op", "parameter", "broadcast",
                 "convolution", "while", "custom-call"])) + "(", lines[i], count=1)
            done.append("hlo_opcode")
        elif k == 3:
            lines[i] = re.sub(r"%[\w.-]+(?=[,)])", lambda m: str(r.choice(["%nope", "%p0", m.group(0) + ".1"])),
                              lines[i], count=1)
            done.append("hlo_operand")
        elif k == 4:
            del lines[i]
            done.append("hlo_drop_line")
        elif k == 5:
            lines[i] = re.sub(r"(dimensions|slice|window|lhs_contracting_dims|index)=\{?[^}\s,]*",
                              lambda m: f"{m.group(1)}={{{int(r.choice([-1, 9, 2**40]))}", lines[i], count=1)
            done.append("hlo_attr")
        else:
            data, how = mutate_bytes(text.encode(), r)
            text = data.decode("utf-8", "replace")
            done.append("hlo_" + how)
            continue
        text = "\n".join(lines)
    return text, done


NPZ_DAMAGE = ("good", "wrong_dtype", "wrong_shape", "missing", "extra", "junk", "pickle", "empty")
_NP_TYPES = {"f32": np.float32, "f64": np.float64, "s32": np.int32, "s64": np.int64, "pred": np.bool_,
             "f16": np.float16, "u8": np.uint8, "s8": np.int8}


def write_inputs(text: str, damage: str, path: Path) -> None:
    """``run-hlo --inputs`` for the module ``text``: its ENTRY parameters as arrays (arg0, arg1, ...),
    damaged as ``damage`` says."""
    import re
    if damage == "junk":
        path.write_bytes(b"PK\x03\x04 not a zip")
        return
    arrays = {}
    m = re.search(r"ENTRY %?[\w.-]+ \(([^)]*)\)", text)
    for k, (ty, dims) in enumerate(re.findall(r"\w+: (\w+)\[([\d,]*)\]", m.group(1) if m else "")):
        shape = tuple(int(d) for d in dims.split(",") if d)
        if any(d > 1 << 20 for d in shape):
            shape = (3,)
        arrays[f"arg{k}"] = np.ones(shape, _NP_TYPES.get(ty, np.float32))
    if arrays and damage == "wrong_dtype":
        arrays["arg0"] = arrays["arg0"].astype(np.complex64)
    elif arrays and damage == "wrong_shape":
        arrays["arg0"] = np.ones(arrays["arg0"].shape + (2,), arrays["arg0"].dtype)
    elif arrays and damage == "missing":
        del arrays[f"arg{len(arrays) - 1}"]
    elif damage == "extra":
        arrays[f"arg{len(arrays)}"] = np.zeros(2)
    elif damage == "pickle":
        arrays["arg0"] = np.array([{"a": 1}], dtype=object)
    elif damage == "empty":
        arrays = {}
    np.savez(path, **arrays)


def random_flags(r: np.random.Generator, names) -> str:
    parts = []
    for _ in range(int(r.integers(1, 4))):
        name = str(r.choice(names))
        k = int(r.integers(5))
        if k == 0:
            parts.append(name)
        elif k == 1:
            parts.append(name.lstrip("-"))
        else:
            parts.append(f"{name}={r.choice(FLAG_VALUES)}")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------- the cases

def make_case(seed: int, index: int, hlo: dict[str, str] | None = None, savedmodel: Path | None = None) -> Case:
    """Case ``index`` of ``seed`` (deterministic given the same ``hlo`` texts and ``savedmodel``)."""
    from google.protobuf import text_format
    r = np.random.default_rng([seed, index])
    kind = str(r.choice(["graph", "graph", "graph", "bytes", "pb", "hlo", "flags", "savedmodel", "aot"]))
    if (kind == "hlo" and not hlo) or (kind == "savedmodel" and savedmodel is None):
        kind = "graph"
    if kind == "savedmodel":
        return _savedmodel_case(index, r, savedmodel)
    if kind == "aot":
        return _aot_case(index, r)
    if kind == "flags":
        which = int(r.integers(3))
        graph = str(ROOT / "graphs" / "mlp.pbtxt")
        if which == 0:
            argv = ["flags", "--flags", random_flags(r, FLAG_NAMES)]
        elif which == 1:
            argv = ["flags", "--xla-flags", random_flags(r, XLA_FLAG_NAMES)]
        else:
            argv = [str(r.choice(["mark", "explain", "hlo"])), graph, "--flags", random_flags(r, FLAG_NAMES)]
        return Case(index, kind, ["flags"], argv, b"", "")
    if kind == "hlo":
        name = str(r.choice(sorted(hlo)))
        text, done = mutate_hlo(hlo[name], r) if r.random() < 0.8 else (hlo[name], [])
        argv = ["run-hlo", "{file}", "--iterations", "1"]
        if r.random() < 0.4:  # inputs from a file, maybe the wrong ones
            done.append("npz_" + str(r.choice(NPZ_DAMAGE)))
            argv += ["--inputs", "{tmp}/in.npz"]
        if r.random() < 0.3:
            argv += ["--output", str(r.choice(["{tmp}/out.npz", "{tmp}/no/such/dir/out.npz", "{tmp}"]))]
        return Case(index, kind, [name] + done, argv, text.encode(), ".hlo")
    source = GRAPHS[int(r.integers(len(GRAPHS)))]
    gd = _graph_def(source)
    done = [source.stem]
    if kind in ("graph", "pb"):
        done += mutate_graph(gd, r)
    if kind == "pb":
        data, suffix = gd.SerializeToString(), ".pb"
        if r.random() < 0.5:
            data, how = mutate_bytes(data, r)
            done.append(how)
    else:
        data, suffix = text_format.MessageToString(gd).encode(), ".pbtxt"
        if kind == "bytes":
            data, how = mutate_bytes(data, r)
            done.append(how)
    cmd = str(r.choice(GRAPH_COMMANDS))
    argv = [cmd, "{file}"]
    if cmd == "viz":
        argv += ["-o", "{tmp}/g.dot"]
    elif cmd == "tensorboard":
        argv += ["--logdir", "{tmp}/tb"]
    if cmd not in ("info", "ops") and r.random() < 0.7:  # clusters to lower: auto-clustering on
        argv += ["--flags", AUTO_FLAGS]
    if cmd != "ops" and r.random() < 0.25:
        argv.append("--grappler")
    if r.random() < 0.15:
        argv.append("--no-inline")
    return Case(index, kind, done, argv, data, suffix)


SAVEDMODEL_DAMAGE = ("pb_bytes", "no_pb", "no_index", "truncate_data", "bad_signature", "fingerprint", "none")


def make_savedmodel(where: Path) -> Path:
    """A small SavedModel (a variable, a matmul and a relu behind ``serving_default``) under ``where``."""
    tf = _tf()

    class Small(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)

        @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32)])
        def serve(self, x):
            return {"y": tf.nn.relu(tf.matmul(x, self.w)) + 1.0}
    module = Small()
    path = where / "savedmodel"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def _savedmodel_case(index: int, r: np.random.Generator, base: Path) -> Case:
    """The SavedModel at ``base`` damaged one way; ``payload`` is its (maybe mutated) saved_model.pb."""
    damage = str(r.choice(SAVEDMODEL_DAMAGE))
    data = (base / "saved_model.pb").read_bytes()
    done = [damage]
    if damage == "pb_bytes":
        data, how = mutate_bytes(data, r)
        done.append(how)
    cmd = str(r.choice(("info", "mark", "explain", "hlo")))
    argv = [cmd, "{dir}"]
    if cmd != "info":
        argv += ["--flags", AUTO_FLAGS]
    if damage == "bad_signature":
        argv += ["--signature", str(r.choice(["nope", "", "serve"]))]
    return Case(index, "savedmodel", done, argv, data, str(base))


def _damaged_savedmodel(case: Case, tmp: str) -> Path:
    import shutil
    path = Path(tmp) / "sm"
    shutil.copytree(case.suffix, path)
    (path / "saved_model.pb").write_bytes(case.payload)
    damage = case.mutations[0]
    data_files = sorted((path / "variables").glob("variables.data-*"))
    if damage == "no_pb":
        (path / "saved_model.pb").unlink()
    elif damage == "no_index":
        (path / "variables" / "variables.index").unlink()
    elif damage == "truncate_data" and data_files:
        data_files[0].write_bytes(data_files[0].read_bytes()[:7])
    elif damage == "fingerprint" and (path / "fingerprint.pb").exists():
        (path / "fingerprint.pb").write_bytes(b"\x08\xff\xff")
    return path


AOT = ROOT / "tools" / "examples" / "aot"


def _aot_case(index: int, r: np.random.Generator) -> Case:
    """``aot`` on the example model: its graph or its tf2xla.Config mutated, or odd names and targets.
    The payload is the config text; the graph, when mutated, is written beside it (``{tmp}/model.pbtxt``)."""
    from google.protobuf import text_format
    config = (AOT / "model.config.pbtxt").read_text()
    done: list[str] = []
    files: dict[str, bytes] = {}
    graph = "{aot}/model.pbtxt"
    k = int(r.integers(4))
    if k == 0:
        gd = text_format.Parse((AOT / "model.pbtxt").read_text(), _tf().compat.v1.GraphDef())
        done += ["graph"] + mutate_graph(gd, r)
        graph = "{tmp}/model.pbtxt"
        files["model.pbtxt"] = text_format.MessageToString(gd).encode()
    elif k == 1:
        data, how = mutate_bytes(config.encode(), r)
        config = data.decode("utf-8", "replace")
        done.append("config_" + how)
    elif k == 2:
        edits = [('node_name: "x"', f'node_name: "{r.choice(["nope", "x:1", "probs", ""])}"'),
                 ("size: 2", f"size: {int(r.choice([-1, 0, 2**40]))}"),
                 ('name: "probs"', 'name: "x"'), ('name: "label"', 'name: "1bad-name"'),
                 ("fetch {", "feed { id { node_name: \"x\" } }\nfetch {"), ("size: 8", "size: 9")]
        a, b = edits[int(r.integers(len(edits)))]
        config = config.replace(a, b, 1)
        done.append("config_edit")
    argv = ["aot", "--graph", graph, "--config", "{file}",
            "--out-dir", str(r.choice(["{tmp}/out", "{tmp}/out", "{tmp}/out", "{file}", "{file}/sub"])),
            "--name", str(r.choice(["mlp", "mlp", "1abc", "a-b", "", "int", "x" * 300]))]
    if k == 3:
        argv += [str(r.choice(["--target-cpu", "--target-features", "--threads"])),
                 str(r.choice(["nosuchcpu", "+avx512f,-sse2", "junk", "0", "-3", "x86-64-v2", "skylake-avx512"]))]
        done.append("target")
    return Case(index, "aot", done, argv, config.encode(), ".pbtxt", files)


def tf_importer_accepts(path: Path) -> bool:
    """Whether TF's importer takes the GraphDef in ``path`` (text or binary)."""
    from google.protobuf import message, text_format
    tf = _tf()
    gd = tf.compat.v1.GraphDef()
    try:
        if path.suffix == ".pb":
            gd.ParseFromString(path.read_bytes())
        else:
            text_format.Parse(path.read_text(encoding="utf-8"), gd)
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(gd, name="")
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError, TypeError,
            tf.errors.OpError):
        return False
    return True


class _Timeout(BaseException):
    pass


def materialize(case: Case, tmp: str) -> tuple[Path, list[str]]:
    """Write ``case``'s inputs under ``tmp``: (the input's path, the command line naming it)."""
    if case.kind == "savedmodel":
        path = _damaged_savedmodel(case, tmp)
    else:
        path = Path(tmp) / f"input{case.suffix}"
        if case.payload:
            path.write_bytes(case.payload)
        for m in case.mutations:
            if m.startswith("npz_"):
                write_inputs(case.payload.decode("utf-8", "replace"), m[4:], Path(tmp) / "in.npz")
    for name, data in case.files.items():
        (Path(tmp) / name).write_bytes(data)
    argv = [a.replace("{file}", str(path)).replace("{dir}", str(path)).replace("{tmp}", tmp)
            .replace("{aot}", str(AOT)) for a in case.argv]
    return path, argv


def run_case(case: Case, seconds: float) -> dict:
    """Run ``case``; its outcome: ``defect`` ('' when none), the exit code and stderr's lines."""
    from tfxla_cluster.cli import main
    with tempfile.TemporaryDirectory(prefix="fuzzcli") as tmp:
        path, argv = materialize(case, tmp)
        out, err = io.StringIO(), io.StringIO()

        def alarm(*_):
            raise _Timeout()
        old = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        escaped = ""
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
        except _Timeout:
            code, escaped = None, "hang"
        except SystemExit as e:  # argparse's own usage errors
            code = e.code if isinstance(e.code, int) else 2
        except BaseException as e:  # noqa: BLE001 - what the fuzzer is looking for
            code, escaped = None, f"escaped {type(e).__name__}: {str(e)[:200]}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        defect = escaped
        if not defect and any("internal error" in ln for ln in lines):
            defect = "internal error"
        elif not defect and code == 2 and len(lines) != 1:
            defect = f"exit 2 with {len(lines)} stderr lines"
        elif not defect and code == 2 and case.payload and case.argv[0] not in ("run-hlo", "aot") \
                and str(path) not in lines[0]:  # (run-hlo and aot have more than one input file)
            defect = "exit 2 without the file's name"
        elif not defect and code == 1 and case.argv[0] != "run-hlo":
            defect = "exit 1"
        elif not defect and code not in (0, 1, 2):
            defect = f"exit {code}"
        elif not defect and code == 0 and case.kind in ("graph", "bytes", "pb") and not tf_importer_accepts(path):
            defect = "exit 0 on a GraphDef TF's importer rejects"
        return {"index": case.index, "kind": case.kind, "mutations": case.mutations, "argv": case.argv,
                "code": code, "stderr": lines[:3], "defect": defect}


# ------------------------------------------------------------------------------------ worker and driver

def worker(seed: int, start: int, stop: int, seconds: float, savedmodel: Path | None) -> int:
    """Run cases [start, stop) of ``seed``, one JSON line before ("start") and after each case."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import warnings
    warnings.simplefilter("ignore")
    hlo = _hlo_texts()
    if savedmodel is not None and not (savedmodel / "savedmodel").exists():  # the first worker makes it
        make_savedmodel(savedmodel)
    base = savedmodel / "savedmodel" if savedmodel is not None else None
    for i in range(start, stop):
        case = make_case(seed, i, hlo, base)
        print(json.dumps({"start": i, "kind": case.kind, "mutations": case.mutations, "argv": case.argv,
                          "payload_b64": base64.b64encode(case.payload).decode(),
                          "files_b64": {k: base64.b64encode(v).decode() for k, v in case.files.items()}}),
              flush=True)
        result = run_case(case, seconds)
        if result["defect"]:
            result["payload"] = case.payload.decode("utf-8", "replace")
            result["payload_b64"] = base64.b64encode(case.payload).decode()
            result["files_b64"] = {k: base64.b64encode(v).decode() for k, v in case.files.items()}
        print(json.dumps(result), flush=True)
    return 0


def replay(seed: int, index: int) -> int:
    """Case ``index`` of ``seed`` run here, its input kept in a directory that is printed: internal errors
    raise with their traceback (``TFXLA_CLUSTER_DEBUG=1``), typed errors print their one line."""
    from tfxla_cluster.cli import main as cli_main
    with tempfile.TemporaryDirectory(prefix="fuzzcli-sm") as shared:
        base = make_savedmodel(Path(shared))
        case = make_case(seed, index, _hlo_texts(), base)
        tmp = tempfile.mkdtemp(prefix=f"fuzzcli-{seed}-{index}-")
        _, argv = materialize(case, tmp)
        print(f"case {index} of seed {seed} ({case.kind}: {', '.join(case.mutations)}); input in {tmp}")
        print("tfxla-cluster " + " ".join(argv), flush=True)
        os.environ["TFXLA_CLUSTER_DEBUG"] = "1"
        return cli_main(argv)


def fuzz(seed: int, count: int, seconds: float) -> dict:
    """All ``count`` cases of ``seed``, in worker processes (restarted past a case that kills one)."""
    results: list[dict] = []
    i = 0
    shared = tempfile.TemporaryDirectory(prefix="fuzzcli-sm")  # the SavedModel every worker damages copies of
    while i < count:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", "--seed", str(seed),
                                 "--start", str(i), "--count", str(count), "--case-seconds", str(seconds),
                                 "--savedmodel", shared.name],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        current = None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue  # a stray print of a library
            if "start" in msg:
                current = msg
                continue
            results.append(msg)
            current = None
            i = msg["index"] + 1
            if len(results) % 50 == 0:
                print(f"  {len(results)} cases, {sum(1 for x in results if x['defect'])} defects", flush=True)
        rc = proc.wait()
        if current is not None:  # the case that killed the worker
            results.append({"index": current["start"], "kind": current["kind"], "mutations": current["mutations"],
                            "argv": current["argv"], "code": None, "stderr": [],
                            "defect": f"process died (exit {rc})", "payload_b64": current["payload_b64"],
                            "files_b64": current["files_b64"]})
            i = current["start"] + 1
        elif rc != 0 and i < count:
            raise RuntimeError(f"worker failed before case {i} (exit {rc})")
    codes: dict[str, int] = {}
    by_kind: dict[str, dict[str, int]] = {}
    for x in results:
        codes[str(x["code"])] = codes.get(str(x["code"]), 0) + 1
        kind = by_kind.setdefault(x["kind"], {})
        kind[str(x["code"])] = kind.get(str(x["code"]), 0) + 1
    shared.cleanup()
    return {"seed": seed, "count": len(results), "exit_codes": codes, "by_kind": by_kind,
            "defects": [x for x in results if x["defect"]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--case-seconds", type=float, default=120.0, help="a case running longer is a hang")
    ap.add_argument("--json", help="write the summary and every defect (with its input) here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--savedmodel", help=argparse.SUPPRESS)
    ap.add_argument("--case", type=int, metavar="N",
                    help="run case N of --seed alone in this process, with tracebacks (TFXLA_CLUSTER_DEBUG=1)")
    a = ap.parse_args(argv)
    if a.case is not None:
        return replay(a.seed, a.case)
    if a.worker:
        return worker(a.seed, a.start, a.count, a.case_seconds, Path(a.savedmodel) if a.savedmodel else None)
    summary = fuzz(a.seed, a.count, a.case_seconds)
    print(f"seed {a.seed}: {summary['count']} cases, exit codes {summary['exit_codes']}, "
          f"{len(summary['defects'])} defects")
    for kind, codes in sorted(summary["by_kind"].items()):
        print(f"  {kind}: exit codes {codes}")
    for d in summary["defects"]:
        print(f"  case {d['index']} ({d['kind']}: {', '.join(d['mutations'])}) {' '.join(d['argv'])}: "
              f"{d['defect']} {d['stderr'][:1]}")
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return 1 if summary["defects"] else 0


if __name__ == "__main__":
    sys.exit(main())
