"""Why a node is not clustered (or two clusters not merged): one ``ReasonCode`` per reason, with TF's words.

Stage: clustering output (compilability checks, MarkForCompilation, explain, reports, pictures).
Each member's value is the stable code (``--json``, ``Decision.code``, picture colours, tests) and its
``text`` is the fixed part of the reason as TF words it (``compilability_check_util.cc``,
``mark_for_compilation_pass.cc``) — the whole text where TF's is constant, the leading phrase where the
reason goes on with names or numbers. Where TF logs nothing of its own (``device_policy``,
``min_cluster_size``, ...) the text is ours and the member says so (``ours=True``); every other text is
checked against the strings in TF's binary (tests/tfops/test_reasons.py). Reason texts are built from
``text``, never spelled again elsewhere.
"""
from __future__ import annotations

import enum


class ReasonCode(enum.StrEnum):
    """A reason code; ``str(code)`` is the stable code, ``code.text`` TF's wording (``code.ours``: our
    wording, where TF has none)."""

    text: str
    ours: bool

    def __new__(cls, code: str, text: str, ours: bool = False) -> "ReasonCode":
        member = str.__new__(cls, code)
        member._value_ = code
        member.text = text
        member.ours = ours
        return member

    # ---- IsCompilableNode / HasXLAKernel / IsCompilableCall (compilability_check_util.cc), TF's text
    SOURCE_SINK = "source_sink", "source or sink node"
    TOP_LEVEL_ARG_RETVAL = "top_level_arg_retval", "top level _Arg or _Retval"
    SCOPED_ALLOCATOR = "scoped_allocator", "_scoped_allocator or _forward_from attribute"
    UNCOMPILABLE_FUNCTION = "uncompilable_function", "unsupported function"
    UNCOMPILABLE_WHILE = "uncompilable_while", "unsupported while"
    UNCOMPILABLE_IF = "uncompilable_if", "unsupported if"
    UNCOMPILABLE_CASE = "uncompilable_case", "unsupported case"
    #: "unsupported op: <HasXLAKernel's reason>": no kernel, an unregistered op, SymbolicGradient.
    NO_XLA_KERNEL = "no_xla_kernel", "unsupported op"
    STRING_CONST = "string_const", "Const op with type DT_STRING is not supported by XLA."
    REF_IDENTITY = "ref_identity", "Identity with unsafe cast."
    STATEFUL_RANDOM = "stateful_random", "stateful random op"
    CONTROL_TRIGGER = "control_trigger", "not allowed control trigger"
    ASSERT_OR_CHECKNUMERICS = "assert_or_checknumerics", "Assert or CheckNumerics"
    COLLECTIVE = "collective", "Collective op"
    WHERE_EXCLUDED = "where_excluded", "Where op"
    UNIQUE = "unique", "Unique op"
    VARIANT = "variant", "DT_VARIANT producer/consumer"
    STACK_OP = "stack_op", "Stack op"
    TENSOR_ARRAY_OP = "tensor_array_op", "TensorArray op"
    RESOURCE_OP_IN_FUNCTION = "resource_op_in_function", "resource variable op in called function"
    INACCURATE_OP = "inaccurate_op", "operation with numerical accuracy issues"
    SLOW_OP = "slow_op", "slow operation"
    FUNCTION_DEPTH = "function_depth", "function depth limit exceeded"
    BAD_FUNCTION = "bad_function", "could not instantiate call"

    # ---- FindCompilationCandidates (mark_for_compilation_pass.cc)
    FUEL_EXHAUSTED = "fuel_exhausted", "--tf_xla_clustering_fuel exhausted", True  # TF: a VLOG of the fuel
    XLA_COMPILE_FALSE = "xla_compile_false", "disallowed by _XlaCompile attribute"
    NO_JIT_DEVICE = "no_jit_device", "could not find JIT device for"
    DEVICE_POLICY = "device_policy", "not compiled under the device's auto-clustering policy", True
    NOT_IN_OPS_TO_CLUSTER = "not_in_ops_to_cluster", "as it is not listed in --tf_xla_ops_to_cluster."
    MUST_BE_CONSTANT_STATEFUL = "must_be_constant_stateful", "must-be-constant stateful op"
    LOOP_IDENTITY_DRIVING_CONSTS = (
        "loop_identity_driving_consts", "including it can create dependencies between while loop condition "
        "and body computations with runtime overhead.")

    # ---- TryToContractEdge (why two clusters were not merged)
    DEADNESS = "deadness", "the two nodes have mismatching deadness"
    DEVICES = "devices", "the two nodes have incompatible devices"
    SCOPE = "scope", "the two nodes have mismatching XLA scopes"
    MAX_CLUSTER_SIZE = "max_cluster_size", "the new cluster will be larger than the max cluster size"
    CROSS_DEVICE = "cross_device", "the new cluster will introduce a cross device dependency"
    RESOURCE_SAFETY = "resource_safety", "the new cluster would break resource variable semantics"
    CYCLE = "cycle", "contracting the edge would create a cycle"

    # ---- CreateClusters / DeclusterNodes, and the end state: our wording
    CLUSTERED = "clustered", "clustered into", True
    MIN_CLUSTER_SIZE = "min_cluster_size", "cluster below --tf_xla_min_cluster_size", True
    DECLUSTERED_FILL = (
        "declustered_fill", "Fill whose consumers are all outside its cluster is left to TF (DeclusterNodes)", True)
    NOT_MARKED = "not_marked", "not a candidate", True
    NOT_COMPILABLE = "not_compilable", "not compilable", True   # the default of an Uncompilable
