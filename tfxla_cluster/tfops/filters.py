"""The operation filters: which kinds of ops a compilability check lets through.

Stage: clustering (step A) and must-compile checking. ``RecursiveCompilabilityChecker::OperationFilter``
and the three filters TF builds: from a device registration (``CreateOperationFilter``), the
auto-clustering candidates' filter (mark_for_compilation_pass.cc), and the permissive one for
``jit_compile=True`` functions.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tfxla_cluster.tfops.xla_kernels import DeviceRegistration


@dataclass(frozen=True, slots=True)
class OperationFilter:
    """``RecursiveCompilabilityChecker::OperationFilter``."""

    allow_resource_ops_in_called_functions: bool = False
    allow_stack_ops: bool = False
    allow_tensor_array_ops: bool = False
    allow_stateful_rng_ops: bool = False
    allow_control_trigger: bool = False
    allow_eliding_assert_and_checknumerics_ops: bool = False
    allow_ops_producing_or_consuming_variant: bool = False
    allow_slow_ops: bool = False
    allow_inaccurate_ops: bool = False
    require_always_compilable: bool = False
    allow_string_consts: bool = True
    allow_collective_reduce_v2: bool = True
    allow_where_op: bool = True
    allow_unique_op: bool = True


def create_operation_filter(reg: DeviceRegistration) -> OperationFilter:
    """TF's ``CreateOperationFilter``: what the device registration lets auto-clustering include."""
    return OperationFilter(
        allow_resource_ops_in_called_functions=reg.cluster_resource_variable_ops_unsafely,
        allow_stack_ops=reg.cluster_stack_ops,
        allow_tensor_array_ops=reg.cluster_tensor_array_ops,
        allow_stateful_rng_ops=reg.cluster_stateful_rng_ops,
        allow_control_trigger=reg.cluster_control_trigger,
        allow_eliding_assert_and_checknumerics_ops=reg.elide_assert_and_checknumerics,
        allow_ops_producing_or_consuming_variant=reg.cluster_variant_ops,
        allow_slow_ops=reg.cluster_slow_ops,
        allow_inaccurate_ops=reg.cluster_inaccurate_ops)


# What a jit_compile=True function may contain (xla_kernel_creator.cc / IsCompilable): everything XLA can
# compile, even ops auto-clustering avoids.
MUST_COMPILE_FILTER = OperationFilter(
    allow_resource_ops_in_called_functions=True, allow_stack_ops=True, allow_tensor_array_ops=True,
    allow_stateful_rng_ops=True, allow_control_trigger=True, allow_eliding_assert_and_checknumerics_ops=True,
    allow_ops_producing_or_consuming_variant=True, allow_slow_ops=True, allow_inaccurate_ops=True)


def auto_clustering_filter(reg: DeviceRegistration, allow_where: bool) -> OperationFilter:
    """The filter MarkForCompilation uses for candidates (always-compilable, no string consts, ...)."""
    return replace(create_operation_filter(reg), require_always_compilable=True, allow_string_consts=False,
                   allow_collective_reduce_v2=False, allow_unique_op=False, allow_where_op=allow_where)
