"""Op-level knowledge shared by the clustering pass (``jit/``) and the TF→HLO lowering (``tf2hlo/``).

Stage: tables only, no logic beyond small lookups. Every table restates, in our own words, one list
that TensorFlow 2.21 keeps in its C++ sources; the comment above each table names the file. Where the
stored sources were older than 2.21, the installed TF 2.21 decided: its XLA op registry, resource-op
table, checker predicates, shipped headers and ``--tf_xla_ops_to_cluster`` log line, which
``tests/test_op_tables.py`` re-reads. ``SLOW_OPS``, ``INACCURATE_OPS`` and ``SHAPE_CONSUMER_OPS`` were
read once from the 2.21 library's machine code; ``NODE_CLASSES`` comes from graph.cc alone.

What is here:

1. ``GetAllowlistTable()`` — the ``--tf_xla_ops_to_cluster`` categories, and TF's validation of that
   flag and of ``--tf_xla_cluster_exclude_ops`` (``expand_ops_to_cluster``, ``check_cluster_exclude_ops``).
2. The op sets the compilability checker filters on (stateful RNG, Assert/CheckNumerics, slow,
   inaccurate, ...) and the ``HasXLAKernel`` special cases.
3. TF's graph node classes (``Node::IsIdentity`` and friends) that the pass asks about.
4. ``resource_operation_table.cc``: every resource op with its read/write kind and resource kind.
5. Compile-time-constant inputs of every XLA op registration, the const-analysis special cases, and
   ``const_input_indices`` to turn argument names into flat input positions.
6. Small constants of ``mark_for_compilation_pass.cc`` (shape-consumer ops, the phase-1 "i++" rule).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from tensorflow.core.framework import types_pb2

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.graph.opdefs import ARG_OP, DEVICE_ARG_OP, DEVICE_RETVAL_OP, RETVAL_OP

if TYPE_CHECKING:
    from tensorflow.core.framework import node_def_pb2, op_def_pb2


def _frozen(table: dict) -> Mapping:
    return MappingProxyType(table)


# =====================================================================================================
# 1. --tf_xla_ops_to_cluster: GetAllowlistTable() (tensorflow/compiler/jit/mark_for_compilation_pass.cc)
# =====================================================================================================

# Category name → op names, in TF's order. TF lists "Transpose" and "Const" in two categories each, and
# PWRED and REDUCEWINDOW are identical; we keep that as TF has it.
_ALLOWLIST_SOURCE: dict[str, tuple[str, ...]] = {
    # Pointwise: unary math, binary math, and cheap data-movement/identity ops.
    "PW": (
        "ComplexAbs", "Angle", "Conj", "Abs", "Acos", "Acosh", "Asin", "Atan", "Atanh", "Ceil", "Cos",
        "Cosh", "Sin", "Exp", "Expm1", "Floor", "IsFinite", "IsInf", "IsNan", "Inv", "Reciprocal", "Log",
        "Log1p", "Invert", "LogicalNot", "Ndtri", "Neg", "Rint", "Round", "Rsqrt", "Sigmoid", "Sign",
        "Sinh", "Softplus", "Softsign", "Sqrt", "Square", "Tan", "Tanh", "Real", "Imag", "Erf", "Erfc",
        "Erfinv", "Lgamma", "Digamma",
        "Add", "AddV2", "Sub", "Mul", "Div", "Atan2", "Complex", "DivNoNan", "MulNoNan", "FloorDiv",
        "Xlogy", "Xlog1py", "Xdivy", "FloorMod", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LeftShift",
        "RightShift", "LogicalAnd", "LogicalOr", "Mod", "Maximum", "Minimum", "RealDiv",
        "ReciprocalGrad", "RsqrtGrad", "SqrtGrad", "TruncateDiv", "TruncateMod", "Equal", "NotEqual",
        "Greater", "GreaterEqual", "Less", "LessEqual", "SigmoidGrad", "SoftplusGrad", "SoftsignGrad",
        "TanhGrad", "Pow", "SquaredDifference", "ApproximateEqual",
        "AddN", "Bitcast", "Cast", "ClipByValue", "Const", "Empty", "Identity", "IdentityN", "Relu",
        "Relu6", "ReluGrad", "Relu6Grad", "LeakyReluGrad", "Elu", "EluGrad", "Selu", "SeluGrad",
        "Select", "SelectV2", "Transpose", "ConjugateTranspose", "_UnaryOpsComposition",
        "CollectiveReduceV2", "CollectiveAssignGroupV2", "PlaceholderWithDefault", "PreventGradient",
        "StopGradient", "Snapshot", "_EagerConst",
    ),
    # Reductions.
    "RED": ("All", "Any", "Min", "Max", "Mean", "Prod", "Sum"),
    # Pointwise + reduction.
    "PWRED": ("ArgMax", "ArgMin", "DiagPart", "Softmax", "SparseSoftmaxCrossEntropyWithLogits",
              "LogSoftmax"),
    # Reduce-window (TF repeats the PWRED list here).
    "REDUCEWINDOW": ("ArgMax", "ArgMin", "DiagPart", "Softmax", "SparseSoftmaxCrossEntropyWithLogits",
                     "LogSoftmax"),
    # Reduce-window + pointwise.
    "REDUCEWINDOWPW": ("BiasAddGrad", "LRN", "LRNGrad"),
    # Batch norm.
    "BN": ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "_FusedBatchNormEx",
           "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"),
    "Conv": ("_FusedConv2D",),
    "SORT": ("TopKV2",),
    # Shape manipulation and other cheap ops.
    "MISC": (
        "ApproxTopK", "BroadcastTo", "ExpandDims", "Fill", "NoOp", "Range", "Rank", "Reshape", "Shape",
        "ShapeN", "Size", "Squeeze", "Transpose", "ZerosLike", "OnesLike", "BiasAdd", "BroadcastArgs",
        "BroadcastGradientArgs", "OneHot", "Concat", "ConcatV2", "ConcatOffset", "Const", "MirrorPad",
        "MirrorPadGrad", "Pack", "Pad", "PadV2", "Reverse", "ReverseV2", "ReverseSequence", "Slice",
        "Split", "SplitV", "StridedSlice", "StridedSliceGrad", "ResourceStridedSliceAssign", "Tile",
        "InvertPermutation", "Unpack", "DeviceIndex", "TensorStridedSliceUpdate", "XlaConcatND",
        "XlaSplitND",
    ),
}

#: ``GetAllowlistTable()``: category → the op names it stands for.
ALLOWLIST_TABLE: Mapping[str, frozenset[str]] = _frozen(
    {category: frozenset(ops) for category, ops in _ALLOWLIST_SOURCE.items()})
#: The category names, in TF's order.
ALLOWLIST_CATEGORIES: tuple[str, ...] = tuple(_ALLOWLIST_SOURCE)
#: The flag value that means "every category" (also what ``--tf_xla_auto_jit=fusible`` sets).
FUSIBLE = "FUSIBLE"
#: The union of all categories.
FUSIBLE_OPS: frozenset[str] = frozenset().union(*ALLOWLIST_TABLE.values())

#: ``--tf_xla_cluster_exclude_ops`` accepts only these names (FindCompilationCandidates).
CLUSTER_EXCLUDE_SUPPORTED_OPS: frozenset[str] = frozenset({"Where"})


def split_flag_list(value: str | Iterable[str]) -> list[str]:
    """A comma-separated flag value as TF splits it (``absl::StrSplit(v, ',')``): no trimming; a list
    passes through. Empty pieces are kept here; the callers skip them, as TF does."""
    return value.split(",") if isinstance(value, str) else list(value)


def ops_to_cluster_error(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"The operation '{name}' passed to --tf_xla_ops_to_cluster is not supported by XLA.")


def cluster_exclude_ops_error(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"The operation '{name}' passed to --tf_xla_cluster_exclude_ops is not supported by XLA.")


def known_ops_to_cluster_names(xla_ops: Iterable[str]) -> frozenset[str]:
    """Every entry ``--tf_xla_ops_to_cluster`` accepts: ``FUSIBLE``, a category name, or the name of any
    op with an XLA kernel (``XlaOpRegistry::GetAllRegisteredOps()``) — not only allowlisted ops.

    Matching is exact and case-sensitive (``fusible`` or ``" Add"`` are taken as op names)."""
    return frozenset(xla_ops) | frozenset(ALLOWLIST_CATEGORIES) | {FUSIBLE}


def expand_ops_to_cluster(entries: str | Iterable[str],
                          xla_ops: Iterable[str] | Callable[[], Iterable[str]]) -> frozenset[str]:
    """``GetOrCreateAllowlist`` plus its validation in ``FindCompilationCandidates``.

    ``entries`` is the flag value (a comma-separated string) or its pieces. ``FUSIBLE`` adds every
    category, a category name adds its ops, any other non-empty piece is taken as an op name. Then
    every resulting op (category members included) must be an XLA op, else TF's
    ``InvalidArgumentError``. An empty result means "no restriction". ``xla_ops`` (the XLA op names) may
    be a function returning them, called only when the flag names ops.

    When several names are unknown TF reports whichever its hash set yields first; we report the first
    in flag order, with category members in table order.
    """
    ordered: list[str] = []
    for piece in split_flag_list(entries):
        if piece == FUSIBLE:
            for category in ALLOWLIST_CATEGORIES:
                ordered.extend(_ALLOWLIST_SOURCE[category])
        elif piece in _ALLOWLIST_SOURCE:
            ordered.extend(_ALLOWLIST_SOURCE[piece])
        elif piece:
            ordered.append(piece)
    # ``xla_ops`` may be a function: TF's whole kernel list is read only when the flag names ops.
    xla = frozenset((xla_ops() if callable(xla_ops) else xla_ops) if ordered else ())
    for op in ordered:
        if op not in xla:
            raise ops_to_cluster_error(op)
    return frozenset(ordered)


def check_cluster_exclude_ops(entries: str | Iterable[str]) -> bool:
    """Validate ``--tf_xla_cluster_exclude_ops`` as TF does and return ``allow_where_op``: False when
    ``Where`` is excluded. Any other non-empty name is TF's ``InvalidArgumentError``."""
    allow_where = True
    for piece in split_flag_list(entries):
        if not piece:
            continue
        if piece in CLUSTER_EXCLUDE_SUPPORTED_OPS:
            allow_where = False
        else:
            raise cluster_exclude_ops_error(piece)
    return allow_where


# =====================================================================================================
# 2. Compilability filters (tensorflow/compiler/jit/compilability_check_util.{h,cc})
# =====================================================================================================

#: ``IsStatefulRandomOp``: XLA's RNG does not reproduce TF's seeding, so auto-clustering avoids these
#: unless the device registration allows stateful RNG.
STATEFUL_RANDOM_OPS: frozenset[str] = frozenset({
    "RandomUniform", "RandomShuffle", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "Multinomial"})

#: ``IsAssertOrCheckNumerics``: their XLA kernels are no-ops, so clustering them silently drops checks.
ASSERT_OPS: frozenset[str] = frozenset({"Assert", "CheckNumerics"})

#: ``OpIsInaccurate`` (b/127344411).
INACCURATE_OPS: frozenset[str] = frozenset({"SelfAdjointEigV2", "Svd"})

#: ``OpIsSlow`` as compiled into TF 2.21 (read from the binary). Older sources list ResizeBilinear and
#: ResizeNearestNeighbor instead of the two NonMaxSuppression ops.
SLOW_OPS: frozenset[str] = frozenset({
    "SelfAdjointEigV2", "Svd", "Qr", "MatrixInverse", "MatrixSolve", "ResizeBilinearGrad",
    "NonMaxSuppressionV3", "NonMaxSuppressionV4"})

# Single ops that have their own filter switch in IsCompilableNode.
CONTROL_TRIGGER_OP = "ControlTrigger"         # allow_control_trigger (Node::IsControlTrigger)
COLLECTIVE_REDUCE_V2_OP = "CollectiveReduceV2"  # allow_collective_reduce_v2 (off for auto-clustering)
WHERE_OP = "Where"                              # allow_where_op (off iff --tf_xla_cluster_exclude_ops=Where)
UNIQUE_OP = "Unique"                            # allow_unique_op (off for auto-clustering: bounded
#                                                 dynamic output shapes break clusters, b/209813421)
# "Resource ops inside called functions" is not an op list: at depth > 1 any node with a DT_RESOURCE
# input is rejected unless allow_resource_ops_in_called_functions.

# HasXLAKernel's special cases, checked before the kernel lookup.
#: Has an XLA kernel but is really a function call; IsCompilableCall handles it.
SYMBOLIC_GRADIENT_OP = "SymbolicGradient"
#: A ``Const`` with ``dtype=DT_STRING`` is rejected (the kernel def claims string support only for
#: tfcompile's no-op Assert), unless the filter allows string consts.
STRING_CONST_OP = "Const"

#: ``RecursiveCompilabilityChecker::kMaxRecursionDepth`` in TF 2.21 (older sources: 10). A call is
#: rejected with "function depth limit exceeded" when the stack of frames is deeper than this.
MAX_RECURSION_DEPTH = 50


# =====================================================================================================
# 3. Graph node classes (Node::GetNodeClassForOp, tensorflow/core/graph/graph.cc)
# =====================================================================================================

# Op name → TF's NodeClass. REF_CLASS(x) in TF adds both "x" and "Ref" + "x"; "Ref_SwitchN" comes from
# that macro and is not a registered op.
NODE_CLASSES: Mapping[str, str] = _frozen({
    "Switch": "SWITCH", "RefSwitch": "SWITCH", "_SwitchN": "SWITCH", "Ref_SwitchN": "SWITCH",
    "Merge": "MERGE", "RefMerge": "MERGE", "_XlaMerge": "MERGE",
    "Enter": "ENTER", "RefEnter": "ENTER",
    "Exit": "EXIT", "RefExit": "EXIT",
    "NextIteration": "NEXT_ITERATION", "RefNextIteration": "NEXT_ITERATION",
    "LoopCond": "LOOP_COND",
    "ControlTrigger": "CONTROL_TRIGGER",
    "_Send": "SEND", "_HostSend": "HOST_SEND", "_Recv": "RECV", "_HostRecv": "HOST_RECV",
    "Const": "CONSTANT", "HostConst": "CONSTANT",
    "Variable": "VARIABLE", "VariableV2": "VARIABLE",
    "Identity": "IDENTITY", "RefIdentity": "IDENTITY",
    "GetSessionHandle": "GET_SESSION_HANDLE", "GetSessionHandleV2": "GET_SESSION_HANDLE",
    "GetSessionTensor": "GET_SESSION_TENSOR", "DeleteSessionTensor": "DELETE_SESSION_TENSOR",
    "Size": "METADATA", "Shape": "METADATA", "Rank": "METADATA",
    "_ScopedAllocator": "SCOPED_ALLOCATOR",
    "CollectiveReduce": "COLLECTIVE", "CollectiveBcastSend": "COLLECTIVE",
    "CollectiveBcastRecv": "COLLECTIVE", "CollectiveGather": "COLLECTIVE",
    "FakeParam": "FAKE_PARAM",
    "PartitionedCall": "PARTITIONED_CALL", "StatefulPartitionedCall": "PARTITIONED_CALL",
    "SymbolicGradient": "SYMBOLIC_GRADIENT",
    "If": "IF", "StatelessIf": "IF",
    "While": "WHILE", "StatelessWhile": "WHILE",
    "Case": "CASE", "StatelessCase": "CASE",
    ARG_OP: "ARG", DEVICE_ARG_OP: "ARG",
    RETVAL_OP: "RETVAL", DEVICE_RETVAL_OP: "RETVAL",
})


def node_class(op: str) -> str:
    """TF's NodeClass of an op name ("OTHER" when it has none)."""
    return NODE_CLASSES.get(op, "OTHER")


def _ops_of_class(cls: str) -> frozenset[str]:
    return frozenset(op for op, c in NODE_CLASSES.items() if c == cls)


IDENTITY_OPS = _ops_of_class("IDENTITY")      # Node::IsIdentity; effective cluster size 0
CONSTANT_OPS = _ops_of_class("CONSTANT")      # Node::IsConstant; effective cluster size 0
SWITCH_OPS = _ops_of_class("SWITCH")
MERGE_OPS = _ops_of_class("MERGE")
ENTER_OPS = _ops_of_class("ENTER")
EXIT_OPS = _ops_of_class("EXIT")
NEXT_ITERATION_OPS = _ops_of_class("NEXT_ITERATION")
LOOP_COND_OPS = _ops_of_class("LOOP_COND")
WHILE_OPS = _ops_of_class("WHILE")            # Node::IsWhileNode; functional control flow
IF_OPS = _ops_of_class("IF")                  # Node::IsIfNode; functional control flow
CASE_OPS = _ops_of_class("CASE")              # Node::IsCaseNode
PARTITIONED_CALL_OPS = _ops_of_class("PARTITIONED_CALL")
ARG_OPS = _ops_of_class("ARG")
RETVAL_OPS = _ops_of_class("RETVAL")
#: ``AlwaysForwardsRefInput`` (xla_cluster_util.cc) is ``Node::IsIdentity``: such a node fed by a ref
#: tensor is rejected by HasXLAKernel ("Identity with unsafe cast.").
FORWARDS_REF_INPUT_OPS = IDENTITY_OPS


# =====================================================================================================
# 4. Resource operations (tensorflow/compiler/tf2xla/resource_operation_table.cc)
# =====================================================================================================

READ, WRITE, READ_WRITE = "Read", "Write", "ReadWrite"        # XlaResourceOpKind
VARIABLE, STACK, TENSOR_ARRAY = "variable", "stack", "tensor_array"  # XlaResourceKind

#: How TF prints a kind in messages (``XlaResourceOpKindToString``): a read-write op is a "Modify".
RESOURCE_OP_KIND_NAMES: Mapping[str, str] = _frozen({READ: "Read", WRITE: "Write", READ_WRITE: "Modify"})

# TF 2.21 also has the two Xla*ND variable ops, which older sources lack.
_RESOURCE_OPS: dict[str, tuple[str, str]] = {
    "AssignAddVariableOp": (READ_WRITE, VARIABLE),
    "AssignSubVariableOp": (READ_WRITE, VARIABLE),
    "AssignVariableOp": (WRITE, VARIABLE),
    "AssignVariableXlaConcatND": (WRITE, VARIABLE),
    "CollectiveReduceV2": (READ, VARIABLE),
    "ReadVariableOp": (READ, VARIABLE),
    "ReadVariableXlaSplitND": (READ, VARIABLE),
    "ResourceApplyAdaMax": (READ_WRITE, VARIABLE),
    "ResourceApplyAdadelta": (READ_WRITE, VARIABLE),
    "ResourceApplyAdagrad": (READ_WRITE, VARIABLE),
    "ResourceApplyAdagradV2": (READ_WRITE, VARIABLE),
    "ResourceApplyAdagradDA": (READ_WRITE, VARIABLE),
    "ResourceApplyAdam": (READ_WRITE, VARIABLE),
    "ResourceApplyAddSign": (READ_WRITE, VARIABLE),
    "ResourceApplyCenteredRMSProp": (READ_WRITE, VARIABLE),
    "ResourceApplyFtrl": (READ_WRITE, VARIABLE),
    "ResourceApplyFtrlV2": (READ_WRITE, VARIABLE),
    "ResourceApplyGradientDescent": (READ_WRITE, VARIABLE),
    "ResourceApplyMomentum": (READ_WRITE, VARIABLE),
    "ResourceApplyKerasMomentum": (READ_WRITE, VARIABLE),
    "ResourceApplyPowerSign": (READ_WRITE, VARIABLE),
    "ResourceApplyProximalAdagrad": (READ_WRITE, VARIABLE),
    "ResourceApplyProximalGradientDescent": (READ_WRITE, VARIABLE),
    "ResourceApplyRMSProp": (READ_WRITE, VARIABLE),
    "ResourceGather": (READ, VARIABLE),
    "ResourceScatterAdd": (READ_WRITE, VARIABLE),
    "ResourceScatterDiv": (READ_WRITE, VARIABLE),
    "ResourceScatterMax": (READ_WRITE, VARIABLE),
    "ResourceScatterMin": (READ_WRITE, VARIABLE),
    "ResourceScatterMul": (READ_WRITE, VARIABLE),
    "ResourceScatterNdAdd": (READ_WRITE, VARIABLE),
    "ResourceScatterNdSub": (READ_WRITE, VARIABLE),
    "ResourceScatterNdUpdate": (READ_WRITE, VARIABLE),
    "ResourceScatterSub": (READ_WRITE, VARIABLE),
    "ResourceScatterUpdate": (READ_WRITE, VARIABLE),
    "ResourceStridedSliceAssign": (READ_WRITE, VARIABLE),
    "RngReadAndSkip": (READ_WRITE, VARIABLE),
    "RngSkip": (READ_WRITE, VARIABLE),
    "StatefulStandardNormalV2": (READ_WRITE, VARIABLE),
    "StatefulTruncatedNormal": (READ_WRITE, VARIABLE),
    "StatefulUniform": (READ_WRITE, VARIABLE),
    "StatefulUniformFullInt": (READ_WRITE, VARIABLE),
    "StatefulUniformInt": (READ_WRITE, VARIABLE),
    "VarIsInitializedOp": (READ, VARIABLE),
    "VariableShape": (READ, VARIABLE),

    "StackV2": (WRITE, STACK),
    "StackCloseV2": (READ, STACK),
    "StackPopV2": (READ_WRITE, STACK),
    "StackPushV2": (READ_WRITE, STACK),

    "TensorArrayV3": (WRITE, TENSOR_ARRAY),
    "TensorArrayConcatV3": (READ, TENSOR_ARRAY),
    "TensorArrayGatherV3": (READ, TENSOR_ARRAY),
    "TensorArrayScatterV3": (WRITE, TENSOR_ARRAY),
    "TensorArrayGradV3": (READ, TENSOR_ARRAY),
    "TensorArrayCloseV3": (READ, TENSOR_ARRAY),
    "TensorArrayReadV3": (READ, TENSOR_ARRAY),
    "TensorArraySizeV3": (READ, TENSOR_ARRAY),
    "TensorArraySplitV3": (WRITE, TENSOR_ARRAY),
    "TensorArrayWriteV3": (WRITE, TENSOR_ARRAY),
}

#: ``GetResourceOpInfoForOp``: op → (op kind, resource kind). Ops not listed are not resource ops to
#: tf2xla (function calls are treated as read-write by the safety analysis, not here).
RESOURCE_OP_TABLE: Mapping[str, tuple[str, str]] = _frozen(dict(_RESOURCE_OPS))
#: op → its XlaResourceOpKind ("Read", "Write" or "ReadWrite").
RESOURCE_OP_KINDS: Mapping[str, str] = _frozen({op: kind for op, (kind, _) in _RESOURCE_OPS.items()})
#: ``IsStackOp`` / ``IsTensorArrayOp`` (compilability_check_util.h): resource ops of those kinds.
STACK_OPS = frozenset(op for op, (_, res) in _RESOURCE_OPS.items() if res == STACK)
TENSOR_ARRAY_OPS = frozenset(op for op, (_, res) in _RESOURCE_OPS.items() if res == TENSOR_ARRAY)


def resource_op_info(op: str) -> tuple[str, str] | None:
    """``GetResourceOpInfoForOp``: (op kind, resource kind), or None for a non-resource op."""
    return _RESOURCE_OPS.get(op)


def resource_op_kind(op: str) -> str | None:
    """The op's XlaResourceOpKind ("Read", "Write", "ReadWrite"), or None."""
    info = _RESOURCE_OPS.get(op)
    return info[0] if info else None


def is_non_variable_resource_op(op: str) -> bool:
    """A Stack or TensorArray op. The pass keeps such ops as candidates even when they must be
    compile-time constants and are stateful (FindCompilationCandidates)."""
    info = _RESOURCE_OPS.get(op)
    return info is not None and info[1] != VARIABLE


# =====================================================================================================
# 5. Compile-time-constant inputs
#    (REGISTER_XLA_OP(...).CompileTimeConstantInput("name") in tensorflow/compiler/tf2xla/kernels/*.cc,
#     read through XlaOpRegistry::CompileTimeConstantInputArgNames in TF 2.21)
# =====================================================================================================

# op → OpDef input-argument names whose values must be known when the cluster is compiled. Names are in
# OpDef order; grouped by the tf2xla kernel file that registers them. A list argument (DynamicStitch's
# ``indices``, _FusedConv2D's ``host_args``) makes every element constant.
_CTC: dict[str, tuple[str, ...]] = {
    # all_reduce_op.cc
    "CollectiveAssignGroupV2": ("group_assignment",),
    "CollectiveReduceV2": ("group_size", "group_key"),
    "XlaAllReduce": ("group_assignment",),
    "XlaReduceScatter": ("group_assignment", "scatter_dimension"),
    # batchtospace_op.cc
    "BatchToSpace": ("crops",),
    "BatchToSpaceND": ("block_shape", "crops"),
    # bcast_ops.cc
    "BroadcastArgs": ("s0", "s1"),
    "BroadcastGradientArgs": ("s0", "s1"),
    # bincount_op.cc
    "Bincount": ("size",),
    "DenseBincount": ("size",),
    # broadcast_to_op.cc
    "BroadcastTo": ("shape",),
    # categorical_op.cc
    "Multinomial": ("num_samples",),
    "StatelessMultinomial": ("num_samples",),
    # concat_op.cc
    "Concat": ("concat_dim",),
    "ConcatOffset": ("concat_dim", "shape"),
    "ConcatV2": ("axis",),
    # conv_ops.cc
    "Conv2DBackpropFilter": ("filter_sizes",),
    "Conv2DBackpropInput": ("input_sizes",),
    "Conv3DBackpropFilterV2": ("filter_sizes",),
    "Conv3DBackpropInputV2": ("input_sizes",),
    "DepthwiseConv2dNativeBackpropFilter": ("filter_sizes",),
    "DepthwiseConv2dNativeBackpropInput": ("input_sizes",),
    # dynamic_slice_ops.cc
    "XlaDynamicSlice": ("size_indices",),
    # dynamic_stitch_op.cc
    "DynamicStitch": ("indices",),
    "ParallelDynamicStitch": ("indices",),
    # empty_op.cc
    "Empty": ("shape",),
    # fft_ops.cc
    "IRFFT": ("fft_length",),
    "IRFFT2D": ("fft_length",),
    "IRFFT3D": ("fft_length",),
    "RFFT": ("fft_length",),
    "RFFT2D": ("fft_length",),
    "RFFT3D": ("fft_length",),
    # fill_op.cc
    "Fill": ("dims",),
    # fused_conv_ops.cc
    "_FusedConv2D": ("host_args",),
    # gather_op.cc
    "GatherV2": ("axis",),
    # gather_scatter_ops.cc
    "XlaGather": ("slice_sizes",),
    # image_ops.cc
    "NonMaxSuppressionV3": ("max_output_size",),
    "NonMaxSuppressionV4": ("max_output_size",),
    # image_resize_ops.cc
    "ResizeBilinear": ("size",),
    "ResizeNearestNeighbor": ("size",),
    # in_topk_op.cc
    "InTopKV2": ("k",),
    # index_ops.cc
    "ArgMax": ("dimension",),
    "ArgMin": ("dimension",),
    # listdiff_op.cc
    "ListDiff": ("x", "y"),
    # matrix_diag_ops.cc
    "MatrixDiagPartV2": ("k", "padding_value"),
    "MatrixDiagPartV3": ("k", "padding_value"),
    "MatrixDiagV2": ("k", "num_rows", "num_cols", "padding_value"),
    "MatrixDiagV3": ("k", "num_rows", "num_cols", "padding_value"),
    "MatrixSetDiagV2": ("k",),
    "MatrixSetDiagV3": ("k",),
    # mirror_pad_op.cc
    "MirrorPad": ("paddings",),
    "MirrorPadGrad": ("paddings",),
    # one_hot_op.cc
    "OneHot": ("depth",),
    # pad_op.cc
    "Pad": ("paddings",),
    "PadV2": ("paddings",),
    # pooling_ops.cc
    "AvgPool3DGrad": ("orig_input_shape",),
    "AvgPoolGrad": ("orig_input_shape",),
    "MaxPoolGradGradV2": ("ksize", "strides"),
    "MaxPoolGradV2": ("ksize", "strides"),
    "MaxPoolV2": ("ksize", "strides"),
    # random_ops.cc
    "ParameterizedTruncatedNormal": ("shape",),
    "RandomStandardNormal": ("shape",),
    "RandomUniform": ("shape",),
    "RandomUniformInt": ("shape",),
    "TruncatedNormal": ("shape",),
    # reduce_window_op.cc
    "XlaReduceWindow": ("window_dimensions", "window_strides", "base_dilations", "window_dilations",
                        "padding"),
    # reduction_ops.cc
    "All": ("reduction_indices",),
    "Any": ("reduction_indices",),
    "Max": ("reduction_indices",),
    "Mean": ("reduction_indices",),
    "Min": ("reduction_indices",),
    "Prod": ("reduction_indices",),
    "Sum": ("reduction_indices",),
    # reshape_op.cc
    "Reshape": ("shape",),
    # reverse_op.cc
    "Reverse": ("dims",),
    "ReverseV2": ("axis",),
    # roll_op.cc
    "Roll": ("axis",),
    # scan_ops.cc
    "Cumprod": ("axis",),
    "Cumsum": ("axis",),
    "CumulativeLogsumexp": ("axis",),
    # scatter_nd_op.cc
    "ScatterNd": ("shape",),
    # segment_reduction_ops.cc
    "SegmentMaxV2": ("num_segments",),
    "SegmentMinV2": ("num_segments",),
    "SegmentProdV2": ("num_segments",),
    "SegmentSumV2": ("num_segments",),
    "UnsortedSegmentMax": ("num_segments",),
    "UnsortedSegmentMin": ("num_segments",),
    "UnsortedSegmentProd": ("num_segments",),
    "UnsortedSegmentSum": ("num_segments",),
    # sequence_ops.cc
    "LinSpace": ("num",),
    "Range": ("start", "limit", "delta"),
    # shape_op.cc
    "ExpandDims": ("dim",),
    "XlaRemoveDynamicDimensionSize": ("dim_index",),
    "XlaSetBound": ("bound",),
    "XlaSetDynamicDimensionSize": ("dim_index",),
    # slice_op.cc
    "Slice": ("begin", "size"),
    # sort_ops.cc
    "XlaVariadicSort": ("dimension",),
    # spacetobatch_op.cc
    "SpaceToBatch": ("paddings",),
    "SpaceToBatchND": ("block_shape", "paddings"),
    # sparse_to_dense_op.cc
    "SparseToDense": ("output_shape",),
    # split_op.cc
    "Split": ("split_dim",),
    "SplitV": ("size_splits", "split_dim"),
    # stack_ops.cc
    "StackV2": ("max_size",),
    # stateful_random_ops.cc
    "RngReadAndSkip": ("alg",),
    "RngSkip": ("algorithm",),
    "StatefulStandardNormalV2": ("algorithm", "shape"),
    "StatefulTruncatedNormal": ("algorithm", "shape"),
    "StatefulUniform": ("algorithm", "shape"),
    "StatefulUniformFullInt": ("algorithm", "shape"),
    "StatefulUniformInt": ("algorithm", "shape"),
    # stateless_random_ops.cc
    "StatelessParameterizedTruncatedNormal": ("shape",),
    "StatelessRandomNormal": ("shape",),
    "StatelessRandomUniform": ("shape",),
    "StatelessRandomUniformFullInt": ("shape",),
    "StatelessRandomUniformInt": ("shape",),
    "StatelessTruncatedNormal": ("shape",),
    # stateless_random_ops_v2.cc
    "StatelessRandomNormalV2": ("shape", "alg"),
    "StatelessRandomUniformFullIntV2": ("shape", "alg"),
    "StatelessRandomUniformIntV2": ("shape", "alg"),
    "StatelessRandomUniformV2": ("shape", "alg"),
    "StatelessTruncatedNormalV2": ("shape", "alg"),
    "XlaRngBitGenerator": ("algorithm", "shape"),
    # stochastic_cast_op.cc
    "StochasticCastToInt": ("alg",),
    # strided_slice_op.cc
    "ResourceStridedSliceAssign": ("begin", "end", "strides"),
    "StridedSlice": ("begin", "end", "strides"),
    "StridedSliceGrad": ("shape", "begin", "end", "strides"),
    "TensorStridedSliceUpdate": ("begin", "end", "strides"),
    # tensor_array_ops.cc
    "TensorArraySplitV3": ("lengths",),
    "TensorArrayV3": ("size",),
    # tensor_list_ops.cc
    "EmptyTensorList": ("element_shape", "max_num_elements"),
    "TensorListFromTensor": ("element_shape",),
    "TensorListReserve": ("element_shape", "num_elements"),
    "TensorListSplit": ("element_shape", "lengths"),
    # tile_ops.cc
    "Tile": ("multiples",),
    # topk_op.cc
    "TopKV2": ("k",),
    # transpose_op.cc
    "ConjugateTranspose": ("perm",),
    "Transpose": ("perm",),
    # unique_op.cc
    "UniqueV2": ("axis",),
    # xla_broadcast_helper_op.cc
    "XlaBroadcastHelper": ("broadcast_dims",),
    # xla_conv_op.cc
    "XlaConv": ("window_strides", "padding", "lhs_dilation", "rhs_dilation", "feature_group_count"),
    "XlaConvV2": ("window_strides", "padding", "lhs_dilation", "rhs_dilation", "feature_group_count"),
    # xla_pad_op.cc
    "XlaPad": ("padding_low", "padding_high", "padding_interior"),
    # xla_select_and_scatter_op.cc
    "XlaSelectAndScatter": ("window_dimensions", "window_strides", "padding"),
    # UniformQuantized* ops (an MlirXlaOpKernel registration file in tf2xla/kernels, 2023)
    "UniformDequantize": ("scales", "zero_points"),
    "UniformQuantize": ("scales", "zero_points"),
    "UniformQuantizedAdd": ("lhs_scales", "lhs_zero_points", "rhs_scales", "rhs_zero_points",
                            "output_scales", "output_zero_points"),
    "UniformQuantizedClipByValue": ("scales", "zero_points"),
    "UniformQuantizedConvolution": ("lhs_scales", "lhs_zero_points", "rhs_scales", "rhs_zero_points",
                                    "output_scales", "output_zero_points"),
    "UniformQuantizedDot": ("lhs_scales", "lhs_zero_points", "rhs_scales", "rhs_zero_points",
                            "output_scales", "output_zero_points"),
    "UniformRequantize": ("input_scales", "input_zero_points", "output_scales", "output_zero_points"),
}

#: op → the input-argument names that must be compile-time constants (``CompileTimeConstantInput``).
COMPILE_TIME_CONSTANT_INPUTS: Mapping[str, tuple[str, ...]] = _frozen(_CTC)

#: Node attr that overrides the registration's list for one node (xla_cluster_util.cc
#: ``kXlaCompileTimeConstantInputsAttr``): a list of input-argument names; an empty list means none.
XLA_COMPILE_TIME_CONSTANT_INPUTS_ATTR = "_XlaCompileTimeConstantInputs"

#: ``XlaOpRegistry::IsMetadataOp`` (registrations marked ``.IsMetadataOp()``): they read only their
#: input's shape, so BackwardsConstAnalysis does not propagate a must-be-constant requirement through
#: them (their inputs need not be constant).
METADATA_OPS: frozenset[str] = frozenset({
    "Shape", "ShapeN", "Rank", "Size", "VariableShape", "TensorListElementShape", "TensorListLength"})

#: ``IsConstTraversableOpType`` (tf2xla_util.h): const analysis marks the producer *behind* these nodes
#: (following the same output index through them) instead of the node itself. Plain "Identity" only,
#: not RefIdentity; While nodes forward input i to output i.
CONST_TRAVERSABLE_OPS: frozenset[str] = frozenset({"Identity", "IdentityN"}) | WHILE_OPS

# GetCompileTimeConstInputs (tensorflow/compiler/tf2xla/const_analysis.cc) computes the constant inputs
# of these ops from their function bodies instead of the registry (and ignores the override attr):
#   While/StatelessWhile: args constant in cond or body, kept only if loop-invariant (the body returns
#     the arg unchanged);
#   If/StatelessIf ("then_branch", "else_branch") and Case/StatelessCase ("branches"): args constant in
#     any branch, shifted by one (input 0 is the predicate / branch index);
#   PartitionedCall/StatefulPartitionedCall ("f"): args constant in the body.
#: op → the function-valued attrs const analysis recurses into.
CONST_ANALYSIS_FUNCTION_ATTRS: Mapping[str, tuple[str, ...]] = _frozen({
    "While": ("cond", "body"), "StatelessWhile": ("cond", "body"),
    "If": ("then_branch", "else_branch"), "StatelessIf": ("then_branch", "else_branch"),
    "Case": ("branches",), "StatelessCase": ("branches",),
    "PartitionedCall": ("f",), "StatefulPartitionedCall": ("f",),
})

#: Set by TF's Python cond_v2/while_v2 on If/While/Case built inside an XLA context; the tf2xla
#: compiler then propagates constants into the bodies (PropagateConstIntoFunctionalNodes).
XLA_PROPAGATE_COMPILE_TIME_CONSTS_ATTR = "_xla_propagate_compile_time_consts"


def compile_time_constant_arg_names(node_def: node_def_pb2.NodeDef) -> tuple[str, ...]:
    """The input-argument names of ``node_def`` that must be constant: the override attr if the node
    carries a list-valued one, else the op's registration."""
    if XLA_COMPILE_TIME_CONSTANT_INPUTS_ATTR in node_def.attr:
        attr = node_def.attr[XLA_COMPILE_TIME_CONSTANT_INPUTS_ATTR]
        if attr.WhichOneof("value") == "list" and not _list_has_non_strings(attr.list):
            return tuple(s.decode() for s in attr.list.s)
    return COMPILE_TIME_CONSTANT_INPUTS.get(node_def.op, ())


def _list_has_non_strings(lst) -> bool:
    # TF reads the attr as list(string); a list of another type fails that read and TF falls back to the
    # registration.
    return any(len(getattr(lst, f)) for f in ("i", "f", "b", "type", "shape", "tensor", "func"))


def const_input_indices(node_def: node_def_pb2.NodeDef, op_def: op_def_pb2.OpDef) -> list[int]:
    """``XlaOpRegistry::CompileTimeConstantInputs(node_def, op_def)``: the sorted flat input indices
    that must be compile-time constants. Every slot of a list argument counts; a name the OpDef does
    not have is skipped, as in TF. Function-valued ops (``CONST_ANALYSIS_FUNCTION_ATTRS``) are the
    caller's business."""
    names = compile_time_constant_arg_names(node_def)
    if not names:
        return []
    from tfxla_cluster.graph.opdefs import input_arg_ranges

    ranges = input_arg_ranges(node_def, op_def)
    result: list[int] = []
    for name in dict.fromkeys(names):  # the override attr may repeat a name; TF keeps a set
        if name in ranges:
            result.extend(range(*ranges[name]))
    return sorted(result)


# =====================================================================================================
# 6. MarkForCompilationPass constants (tensorflow/compiler/jit/mark_for_compilation_pass.cc and
#    xla_cluster_util.cc)
# =====================================================================================================

#: ``IsShapeConsumerOp`` (xla_cluster_util.cc): phase 0 of the edge contraction contracts only edges
#: into a singleton cluster holding one of these.
SHAPE_CONSUMER_OPS: frozenset[str] = frozenset({"Shape", "Rank", "Size"})

#: ``IsSinkLike``: a singleton NoOp whose only out-edge goes to SINK is not a phase-1 contraction target.
SINK_LIKE_OP = "NoOp"

#: ``IsScalarIntegerResourceOperation`` (the phase-1 "i++" rule): a singleton cluster holding one of
#: these, with an integer ``dtype`` attr and a data input from a Const whose ``value`` is a scalar, is
#: not contracted into its successors in phase 1 (phase 2 may still merge it).
SCALAR_INTEGER_RESOURCE_OPS: frozenset[str] = frozenset({"AssignAddVariableOp", "AssignSubVariableOp"})

#: ``DataTypeIsInteger`` (tensorflow/core/framework/types.h, kDataTypeIsInteger), as types_pb2 values.
INTEGER_DTYPES: frozenset[int] = frozenset({
    types_pb2.DT_INT2, types_pb2.DT_UINT2, types_pb2.DT_INT4, types_pb2.DT_UINT4,
    types_pb2.DT_INT8, types_pb2.DT_UINT8, types_pb2.DT_INT16, types_pb2.DT_UINT16,
    types_pb2.DT_INT32, types_pb2.DT_UINT32, types_pb2.DT_INT64, types_pb2.DT_UINT64})

#: ``DeclusterNodes``: a clustered node of one of these ops whose consumers are all outside its cluster
#: (and which has at least one consumer) is left unmarked (it still counted toward the cluster's size).
DECLUSTER_IF_ALL_CONSUMERS_OUTSIDE_OPS: frozenset[str] = frozenset({"Fill"})

#: ``MarkForCompilation``: a graph containing any of these is left alone (TPU-rewritten graphs).
TPU_EXECUTE_OPS: frozenset[str] = frozenset({"TPUExecute", "TPUExecuteAndUpdateVariables"})

#: ``DumpPostClusteringGraphs``: unclustered nodes of this op are renamed "varhandle/<name>" in the
#: annotated dump (others "unclustered/<name>").
VAR_HANDLE_OP = "VarHandleOp"
