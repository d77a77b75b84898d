"""Plugin mode: every ``tf.function`` of an unmodified TF program goes through our pipeline.

Stage: user API. :func:`install` replaces ``tf.function`` with :func:`tfxla_cluster.function` (same
arguments: ``jit_compile``, ``input_signature``, ``reduce_retracing``; others are accepted and
ignored), so auto-clustering follows ``TF_XLA_FLAGS`` and ``tf.config.optimizer.set_jit`` exactly as TF
would decide, and ``jit_compile=True`` functions are compiled by us. :func:`uninstall` restores TF's. :func:`summary` reports, per function
and cluster, what was compiled, how often, why, and what fell back to TF.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

from tfxla_cluster.tf_compat import replace_tf_function, restore_tf_function, tf_function_replaced

_functions: "weakref.WeakSet[Any]" = weakref.WeakSet()


def installed() -> bool:
    return tf_function_replaced()


def install(flags=None, backend: str = "llvm") -> None:
    """Route ``tf.function`` through tfxla_cluster (idempotent). The swap itself is
    :func:`tfxla_cluster.tf_compat.replace_tf_function`; the policy (which arguments, which pipeline)
    is here."""
    from tfxla_cluster.runtime.function import Function

    def make() -> Callable:
        def function(func=None, input_signature=None, autograph=True, jit_compile=None,
                     reduce_retracing=False, **_ignored: Any):
            def wrap(f: Callable) -> Function:
                wrapped = Function(f, jit_compile=jit_compile, input_signature=input_signature,
                                   reduce_retracing=reduce_retracing, flags=flags, grappler=True, backend=backend)
                _functions.add(wrapped)
                return wrapped
            return wrap(func) if func is not None else wrap
        return function

    replace_tf_function(make)


def uninstall() -> None:
    restore_tf_function()


def profile():
    """The compile profiles of every function the plugin made, merged (clusters named ``fn/cluster``)."""
    from tfxla_cluster.compile_profile import CompileProfile

    merged = CompileProfile()
    for fn in list(_functions):
        merged.extend(fn.compile_stats(), prefix=getattr(fn.python_function, "__name__", "function") + "/")
    return merged


def summary() -> str:
    """What the plugin did: functions, clusters, compiles (with causes; entries loaded from the
    persistent cache counted apart), executions, fallbacks."""
    lines = ["tfxla_cluster summary:"]
    count = 0
    for fn in list(_functions):
        for compiled in list(fn._compiled.values()):
            count += 1
            name = getattr(fn.python_function, "__name__", "function")
            lines.append(f"  {name} [{compiled.concrete.name.decode() if isinstance(compiled.concrete.name, bytes) else compiled.concrete.name}]: "
                         f"{len(compiled.clusters)} cluster(s)")
            for cname, launcher in compiled.launchers.items():
                st = launcher.stats
                state = f"fell back to TF ({st.fallback_reason})" if st.fallback_reason else (
                    f"{st.compiles - st.persistent_hits} compile(s)"
                    + (f" + {st.persistent_hits} loaded from the persistent cache" if st.persistent_hits else "")
                    + f" in {st.compile_seconds:.2f} s, {st.executions} execution(s)")
                lines.append(f"    {cname}: {len(launcher.sig.members)} nodes; {state}"
                             + (f"; causes: {', '.join(st.causes)}" if st.causes else ""))
    if not count:
        lines.append("  no tf.function was traced")
    return "\n".join(lines)
