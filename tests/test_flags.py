"""Tests for tfxla_cluster.flags: the flag table, TF's tokenizer and value syntax, tf_xla_auto_jit,
errors and hints, the Flags object, and a differential comparison with TensorFlow 2.21 itself.

The TF oracle loads TF's C++ libraries with ctypes, once, in one subprocess. For each case it forks, sets
TF_XLA_FLAGS / XLA_FLAGS, and calls TF's own getters (GetMarkForCompilationPassFlags, ...,
xla::GetDebugOptionsFromFlags), which run the real parser. It then reads the parsed structs, or captures
what TF logs before it aborts. A few hundred cases take about two seconds.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import os
import pickle
import random
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfxla_cluster import flags as F
from tfxla_cluster.errors import FlagError, InvalidArgumentError
from tfxla_cluster.flags import GlobalJitLevel as L

# --------------------------------------------------------------------------------------------------------
# What TF 2.21 prints in its usage text for TF_XLA_FLAGS (name, type, default), recorded from the binary
# with TF_XLA_FLAGS=--tf_xla_min_cluster_size=x. test_table_matches_tf_usage re-reads it from TF.
# --------------------------------------------------------------------------------------------------------
TF_USAGE_2_21 = """
tf_xla_enable_lazy_compilation bool true
tf_xla_print_cluster_outputs bool false
tf_xla_check_cluster_input_numerics bool false
tf_xla_check_cluster_output_numerics bool false
tf_xla_disable_constant_folding bool false
tf_xla_disable_full_embedding_pipelining bool false
tf_xla_disable_full_embedding_pipelining_with_summaries bool true
tf_xla_embedding_parallel_iterations int32 0
tf_xla_compile_on_demand bool false
tf_xla_enable_xla_devices bool false
tf_xla_always_defer_compilation bool false
tf_xla_async_compilation bool false
tf_xla_use_device_api_for_xla_launch bool true
tf_xla_use_device_api_for_compile_on_demand bool true
tf_xla_use_device_api_for_auto_jit bool true
tf_xla_use_device_api bool false
tf_xla_enable_device_api_for_gpu bool true
tf_xla_call_module_disabled_checks string ""
tf_mlir_enable_mlir_bridge bool false
tf_mlir_enable_merge_control_flow_pass bool true
tf_mlir_enable_convert_control_to_data_outputs_pass bool false
tf_mlir_composite_tpuexecute_side_effects bool false
tf_mlir_enable_strict_clusters bool false
tf_mlir_enable_multiple_local_cpu_devices bool false
tf_mlir_enable_debug_info_serialization bool true
tf_dump_graphs_in_tfg bool false
tf_mlir_enable_tpu_variable_runtime_reformatting_pass bool true
tf_serialize_mlir_to_compressed_bytecode bool false
tf_xla_auto_jit string "0"
tf_xla_min_cluster_size int32 4
tf_xla_max_cluster_size int32 2147483647
tf_xla_ops_to_cluster string ""
tf_xla_cluster_exclude_ops string ""
tf_xla_clustering_debug bool false
tf_xla_cpu_global_jit bool false
tf_xla_clustering_fuel int64 9223372036854775807
tf_xla_disable_deadness_safety_checks_for_debugging bool false
tf_xla_disable_resource_variable_safety_checks_for_debugging bool false
tf_xla_deterministic_cluster_names bool false
tf_xla_persistent_cache_directory string ""
tf_xla_persistent_cache_device_types string ""
tf_xla_persistent_cache_read_only bool false
tf_xla_disable_strict_signature_checks bool false
tf_xla_persistent_cache_prefix string "xla_compile_cache"
tf_xla_sparse_core_disable_table_stacking bool false
tf_xla_sparse_core_minibatch_max_division_level int32 6
tf_xla_sparse_core_stacking_mem_limit_bytes int64 2097152
tf_xla_sparse_core_stacking_table_shard_limit_bytes int64 2147483648
"""
XLA_USAGE_2_21 = """
xla_dump_to string ""
xla_dump_hlo_as_text bool false
xla_dump_hlo_as_long_text bool true
xla_dump_large_constants bool false
xla_dump_hlo_as_proto bool false
xla_dump_hlo_as_dot bool false
xla_dump_hlo_as_html bool false
xla_dump_hlo_module_re string ""
xla_dump_hlo_pass_re string ""
xla_dump_include_timestamp bool false
xla_dump_max_hlo_modules int32 -1
xla_disable_hlo_passes string ""
xla_enable_hlo_passes_only string ""
xla_disable_all_hlo_passes bool false
xla_backend_optimization_level int32 3
xla_embed_ir_in_executable bool false
xla_eliminate_hlo_implicit_broadcast bool true
xla_hlo_profile bool false
xla_cpu_multi_thread_eigen bool true
xla_cpu_enable_fast_math bool false
xla_cpu_fast_math_honor_nans bool true
xla_cpu_fast_math_honor_infs bool true
xla_cpu_fast_math_honor_division bool true
xla_cpu_fast_math_honor_functions bool true
xla_cpu_enable_fast_min_max bool true
xla_llvm_disable_expensive_passes bool false
xla_cpu_prefer_vector_width int32 256
xla_cpu_max_isa string ""
xla_force_host_platform_device_count int32 1
xla_cpu_parallel_codegen_split_count int32 32
"""


def _usage_rows(text: str) -> list[tuple[str, str, str]]:
    return [tuple(line.split(" ", 2)) for line in text.strip().splitlines()]  # type: ignore[misc]


def parse(tf: str = "", xla: str = "", own: str = "") -> F.Flags:
    return F.Flags.parse(tf, xla, own)


def error(tf: str = "", xla: str = "", own: str = "") -> FlagError:
    with pytest.raises(FlagError) as info:
        F.Flags.parse(tf, xla, own)
    return info.value


def first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


# ========================================================================================================
# The table
# ========================================================================================================

def test_tf_xla_flags_table_is_tf_2_21s_list_in_tf_order():
    rows = [(s.name, s.ctype, s.display()) for s in F.flags_for(F.TF_XLA_FLAGS)]
    assert rows == _usage_rows(TF_USAGE_2_21)
    assert len(rows) == 48


def test_xla_subset_defaults_are_xlas():
    rows = [(s.name, s.ctype, s.display()) for s in F.flags_for(F.XLA_FLAGS)]
    assert rows == _usage_rows(XLA_USAGE_2_21)


def test_table_entries_are_consistent():
    names = [s.name for s in F.FLAG_TABLE]
    assert len(names) == len(set(names))
    assert set(F.FLAGS_BY_NAME) == set(names)
    assert not set(names) & set(F.XLA_UNMODELLED_FLAGS)
    assert F.XLA_SETTER_CHECKED_FLAGS <= {n for n, t in F.XLA_UNMODELLED_FLAGS.items() if t == "string"}
    for s in F.FLAG_TABLE:
        assert s.help and s.help[-1] in ".)", s.name
        assert isinstance(s.default, s.type) and type(s.default) is s.type
        assert s.name.startswith({"TF_XLA_FLAGS": "tf_", "XLA_FLAGS": "xla_", "TFXLA_CLUSTER_FLAGS": "tfxla_"}[s.env])
        assert s.project_specific == (s.env == F.TFXLA_CLUSTER_FLAGS)
        if s.project_specific:
            assert s.help.startswith("[tfxla_cluster only]")
    assert set(F.XLA_UNMODELLED_FLAGS.values()) == {"bool", "int32", "int64", "float", "string"}


def test_key_defaults():
    d = F.Flags.default()
    assert d.tf_xla_auto_jit == "0" and d.auto_jit_level is L.DEFAULT and d.auto_jit_single_gpu_level is L.DEFAULT
    assert d.tf_xla_min_cluster_size == 4
    assert d.tf_xla_max_cluster_size == 2**31 - 1
    assert d.tf_xla_clustering_fuel == 2**63 - 1
    assert d.tf_xla_persistent_cache_prefix == "xla_compile_cache"
    assert d.tf_xla_enable_lazy_compilation is True
    assert d.tf_xla_cpu_global_jit is False
    assert d.xla_backend_optimization_level == 3
    assert d.xla_cpu_enable_fast_math is False and d.xla_cpu_multi_thread_eigen is True
    assert d.tfxla_cpu_threads == 0
    assert d.non_default() == {} and d.explicit == () and d.xla_passthrough == {}


def test_flagspec_validates_itself():
    with pytest.raises(TypeError):
        F.FlagSpec("x", int, True, "h.", F.TF_XLA_FLAGS)          # bool is not an int flag default
    with pytest.raises(TypeError):
        F.FlagSpec("x", int, 1, "h.", F.TF_XLA_FLAGS, "string")
    with pytest.raises(ValueError):
        F.FlagSpec("x", int, 1, "h.", "OTHER_FLAGS")
    assert F.FlagSpec("x", int, 1, "h.", F.XLA_FLAGS).ctype == "int32"
    assert F.lookup("tf_xla_clustering_fuel").range == (-(2**63), 2**63 - 1)
    assert F.lookup("tf_xla_auto_jit").range is None


def test_lookup_and_flags_for():
    assert F.lookup("--tf_xla_auto_jit") is F.FLAGS_BY_NAME["tf_xla_auto_jit"]
    with pytest.raises(FlagError, match=r"(?s)^Unknown flag: tf_xla_auto_jitt\n  Did you mean --tf_xla_auto_jit\?"):
        F.lookup("tf_xla_auto_jitt")
    assert [s.name for s in F.flags_for(F.TFXLA_CLUSTER_FLAGS)] == ["tfxla_cpu_threads", "tfxla_cpu_target",
                                                                 "tfxla_cpu_target_features", "tfxla_hlo_verifier"]
    with pytest.raises(FlagError, match="Unknown flag variable"):
        F.flags_for("JAX_FLAGS")


# ========================================================================================================
# Tokenizer (parse_flags_from_env.cc ParseArgvFromString)
# ========================================================================================================

@pytest.mark.parametrize("text,argv,rest", [
    ("", [], ""),
    ("--a=1 --b", ["--a=1", "--b"], ""),
    (" \t\r\n--a=1\n\n--b\t", ["--a=1", "--b"], ""),
    ('--a="x y"  --b=2', ["--a=x y", "--b=2"], ""),
    ("--a='x y'", ["--a=x y"], ""),
    (r'--a="q\"u\\o"', ['--a=q"u\\o'], ""),               # backslash escapes inside double quotes
    (r"--a='q\'", ["--a=q\\"], ""),                        # ...but not inside single quotes
    ('--a="unterminated value', ["--a=unterminated value"], ""),
    ('--a="x"--b=1', ["--a=x", "--b=1"], ""),              # a word may start right after a closing quote
    ('--a="x"junk --b', ["--a=x"], "junk --b"),
    ("--a=x\"y z\"", ['--a=x"y'], 'z"'),                    # a quote not right after '=' is literal
    ('--a.b="x y"', ['--a.b="x'], 'y"'),                    # name chars are [-_A-Za-z0-9] only
    ("--a=1 b=2 --c", ["--a=1"], "b=2 --c"),                # TF stops at the first word without '-'
    ("-x --", ["-x", "--"], ""),
    ('--a="', ["--a="], ""),
    ("--a=\v1", ["--a=\v1"], ""),                           # \v is not a separator for the tokenizer
    ('--é="x y"', ['--é="x'], 'y"'),
])
def test_tokenize(text, argv, rest):
    assert F.tokenize(text) == (argv, rest)


# ========================================================================================================
# Values (tsl/util/command_line_flags.cc with absl::SimpleAtoi / SimpleAtof)
# ========================================================================================================

@pytest.mark.parametrize("word,value", [
    ("--tf_xla_cpu_global_jit", True),
    ("--tf_xla_cpu_global_jit=true", True),
    ("--tf_xla_cpu_global_jit=TRUE", True),
    ("--tf_xla_cpu_global_jit=True", True),
    ("--tf_xla_cpu_global_jit=tRuE", True),
    ("--tf_xla_cpu_global_jit=1", True),
    ('--tf_xla_cpu_global_jit="true"', True),
    ("--tf_xla_cpu_global_jit=false", False),
    ("--tf_xla_cpu_global_jit=FALSE", False),
    ("--tf_xla_cpu_global_jit=False", False),
    ("--tf_xla_cpu_global_jit=0", False),
])
def test_bool_spellings(word, value):
    assert parse(word).tf_xla_cpu_global_jit is value


@pytest.mark.parametrize("value", ["", "yes", "no", "on", "off", "t", "f", "2", "01", "00", "true ", " 1",
                                   "tru", "truee", "\u0130rue"])
def test_bool_rejects(value):
    err = error(f'--tf_xla_cpu_global_jit="{value}"')
    assert first_line(err) == f"Couldn't interpret value {value} for flag tf_xla_cpu_global_jit."
    assert "is a bool flag" in str(err).splitlines()[1]


def test_bool_prefix_of_another_flag_is_not_that_flag():
    # --tf_xla_use_device_api is a prefix of --tf_xla_use_device_api_for_auto_jit
    f = parse("--tf_xla_use_device_api_for_auto_jit=false")
    assert f.tf_xla_use_device_api is False and f.tf_xla_use_device_api_for_auto_jit is False
    assert parse("--tf_xla_use_device_api").tf_xla_use_device_api is True


@pytest.mark.parametrize("text,value", [
    ("5", 5), ("+5", 5), ("-5", -5), ("007", 7), ("0", 0), (" 5", 5), ("5 ", 5), ("\t5\n", 5), ("\v5\f", 5),
    ("2147483647", 2**31 - 1), ("-2147483648", -(2**31)),
])
def test_int32_accepts(text, value):
    assert parse(f'--tf_xla_min_cluster_size="{text}"').tf_xla_min_cluster_size == value


@pytest.mark.parametrize("text", ["", " ", "x", "5x", "x5", "0x10", "1.5", "1e3", "2147483648", "-2147483649",
                                  "+-5", "--5", "5 5", "1_0", "\u0663", "+", "-", "５"])
def test_int32_rejects(text):
    err = error(f'--tf_xla_min_cluster_size="{text}"')
    assert first_line(err) == f"Couldn't interpret value {text} for flag tf_xla_min_cluster_size."
    assert str(err).splitlines()[1] == ("  tf_xla_min_cluster_size is an int32 flag: expected a base-10 integer "
                                        "from -2147483648 to 2147483647, e.g. --tf_xla_min_cluster_size=4")


def test_int64_range():
    assert parse("--tf_xla_clustering_fuel=-9223372036854775808").tf_xla_clustering_fuel == -(2**63)
    assert parse("--tf_xla_clustering_fuel=9223372036854775807").tf_xla_clustering_fuel == 2**63 - 1
    assert parse("--tf_xla_clustering_fuel=3000000000").tf_xla_clustering_fuel == 3000000000
    assert first_line(error("--tf_xla_clustering_fuel=9223372036854775808")) == \
        "Couldn't interpret value 9223372036854775808 for flag tf_xla_clustering_fuel."


RTOL = "xla_gpu_autotune_gemm_rtol"      # a float flag XLA accepts (passed through)


@pytest.mark.parametrize("text,value", [
    ("1.5", 1.5), ("+1.5", 1.5), ("-2", -2.0), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0), ("1E-3", 0.001),
    ("1.e2", 100.0), (" 0.25 ", 0.25), ("inf", math.inf), ("-Infinity", -math.inf), ("INF", math.inf),
    ("1e39", math.inf), ("-1e39", -math.inf), ("1e-50", 0.0), ("0.1", 0.10000000149011612),
    ("0x1p3", 8.0), ("-0X1.8P1", -3.0), ("0x.8", 0.5), ("0x1e3", 483.0), ("+0x1.", 1.0),
])
def test_float_accepts(text, value):
    f32 = struct.unpack("f", struct.pack("f", value))[0] if math.isfinite(value) else value   # XLA stores a float
    assert parse(xla=f'--{RTOL}="{text}"')[RTOL] == f32


@pytest.mark.parametrize("text", ["nan", "NaN", "-nan", "nan(abc_1)"])
def test_float_nan(text):
    assert math.isnan(parse(xla=f"--{RTOL}={text}")[RTOL])


@pytest.mark.parametrize("text", ["", "abc", "1e", "1e+", "0x", "0x1p", "0x.p1", "0xg", "+-1", "1_0", "infinit",
                                  "1.5x", "--1", ".", "e5", "nan(", "nan(a-b)", "1,5", "1f", "0b1"])
def test_float_rejects(text):
    err = error(xla=f'--{RTOL}="{text}"')
    assert first_line(err) == f"Couldn't interpret value {text} for flag {RTOL}."
    assert "float flag" in str(err)


def test_strings_are_taken_verbatim():
    f = parse('--tf_xla_ops_to_cluster="PW, RED" --tf_xla_persistent_cache_directory= '
              "--tf_xla_cluster_exclude_ops=Where --tf_xla_persistent_cache_prefix=a=b")
    assert f.tf_xla_ops_to_cluster == "PW, RED"
    assert f.tf_xla_persistent_cache_directory == ""
    assert f.tf_xla_cluster_exclude_ops == "Where"
    assert f.tf_xla_persistent_cache_prefix == "a=b"


def test_later_words_win():
    f = parse("--tf_xla_min_cluster_size=3 --tf_xla_min_cluster_size=5 --tf_xla_cpu_global_jit "
              "--tf_xla_cpu_global_jit=false")
    assert f.tf_xla_min_cluster_size == 5 and f.tf_xla_cpu_global_jit is False
    assert f.explicit == ("tf_xla_min_cluster_size", "tf_xla_cpu_global_jit")


# ========================================================================================================
# tf_xla_auto_jit (flags.cc SetterForXlaAutoJitFlag) and GetGlobalJitLevelForGraph
# ========================================================================================================

@pytest.mark.parametrize("value,general,single,ops", [
    ("0", L.DEFAULT, L.DEFAULT, ""),
    ("-1", L.OFF, L.OFF, ""),
    ("1", L.ON_1, L.ON_1, ""),
    ("2", L.ON_2, L.ON_2, ""),
    ("+2", L.ON_2, L.ON_2, ""),
    (" 2 ", L.ON_2, L.ON_2, ""),
    ("5", 5, 5, ""),
    ("-7", -7, -7, ""),
    ("fusible", L.ON_1, L.ON_1, "FUSIBLE"),
    ("single-gpu(2)", L.DEFAULT, L.ON_2, ""),
    ("single-gpu(-1)", L.DEFAULT, L.OFF, ""),
    ("single-gpu( 1 )", L.DEFAULT, L.ON_1, ""),
])
def test_auto_jit_forms(value, general, single, ops):
    f = parse(f'--tf_xla_auto_jit="{value}"')
    assert f.tf_xla_auto_jit == value
    assert f.auto_jit_level == general and f.auto_jit_single_gpu_level == single
    assert isinstance(f.auto_jit_level, L) and isinstance(f.auto_jit_single_gpu_level, L)
    assert f.tf_xla_ops_to_cluster == ops


def test_auto_jit_settings_apply_in_order():
    f = parse("--tf_xla_auto_jit=2 --tf_xla_auto_jit=single-gpu(1)")
    assert (f.auto_jit_level, f.auto_jit_single_gpu_level) == (L.ON_2, L.ON_1)
    f = parse("--tf_xla_auto_jit=single-gpu(1) --tf_xla_auto_jit=2")
    assert (f.auto_jit_level, f.auto_jit_single_gpu_level) == (L.ON_2, L.ON_2)
    assert parse("--tf_xla_auto_jit=fusible --tf_xla_ops_to_cluster=MatMul").tf_xla_ops_to_cluster == "MatMul"
    assert parse("--tf_xla_ops_to_cluster=MatMul --tf_xla_auto_jit=fusible").tf_xla_ops_to_cluster == "FUSIBLE"


@pytest.mark.parametrize("value", ["", "foo", "FUSIBLE", "fusible ", "2.0", "0x2", "99999999999",
                                   "single-gpu(x)", "single-gpu(2", "single-gpu()", "single-gpu(2)x",
                                   "Single-gpu(2)", "single_gpu(2)", "on"])
def test_auto_jit_rejects(value):
    err = error(f'--tf_xla_auto_jit="{value}"')
    # TF's setter fails silently; all TF prints is "Check failed: ... Flag parsing failed."
    assert first_line(err) == f"Flag parsing failed. Invalid value {value} for flag tf_xla_auto_jit."
    assert err.tf_message == "Flag parsing failed."
    assert "'fusible' or 'single-gpu(N)'" in str(err).splitlines()[1]


def test_global_jit_level_enum():
    assert [int(x) for x in (L.DEFAULT, L.OFF, L.ON_1, L.ON_2)] == [0, -1, 1, 2]
    assert L(5).name == "LEVEL_5" and L(5) is L(5) and L(-3).name == "LEVEL_MINUS_3"
    with pytest.raises(ValueError):
        L(2**31)
    with pytest.raises(ValueError):
        L("1")


@pytest.mark.parametrize("flag,config,single_gpu,expected", [
    ("0", L.DEFAULT, False, L.OFF),            # DEFAULT everywhere means off
    ("0", L.DEFAULT, True, L.OFF),
    ("0", L.ON_1, False, L.ON_1),              # the flag at 0 defers to ConfigProto
    ("0", L.ON_2, True, L.ON_2),
    ("0", L.OFF, False, L.OFF),
    ("2", L.DEFAULT, False, L.ON_2),           # a non-DEFAULT flag overrides ConfigProto
    ("2", L.OFF, False, L.ON_2),
    ("-1", L.ON_2, False, L.OFF),
    ("1", L.ON_2, True, L.ON_1),
    ("fusible", L.DEFAULT, False, L.ON_1),
    ("single-gpu(2)", L.DEFAULT, True, L.ON_2),     # only single-GPU graphs get N ...
    ("single-gpu(2)", L.DEFAULT, False, L.OFF),     # ... others keep ConfigProto's level
    ("single-gpu(2)", L.ON_1, False, L.ON_1),
    ("single-gpu(-1)", L.ON_1, True, L.OFF),
    ("5", L.DEFAULT, False, 5),
])
def test_global_jit_level_for_graph(flag, config, single_gpu, expected):
    f = parse(f"--tf_xla_auto_jit={flag}")
    got = F.global_jit_level_for_graph(f, single_gpu, config)
    assert got == expected and isinstance(got, L)
    assert F.global_jit_level_for_graph(f, single_gpu, int(config)) == expected   # plain ints work too


def test_global_jit_level_general_and_single_both_set():
    f = parse("--tf_xla_auto_jit=1 --tf_xla_auto_jit=single-gpu(2)")
    assert F.global_jit_level_for_graph(f, True) == L.ON_2
    assert F.global_jit_level_for_graph(f, False) == L.ON_1


# ========================================================================================================
# Errors
# ========================================================================================================

def test_flag_error_is_invalid_argument():
    err = error("--tf_xla_auto_jitt=2")
    assert isinstance(err, InvalidArgumentError)
    assert err.status.startswith("INVALID_ARGUMENT: Unknown flag in TF_XLA_FLAGS: ")
    assert err.env_var == "TF_XLA_FLAGS"


def test_unknown_flag_typo_did_you_mean():
    err = error("--tf_xla_auto_jitt=2")
    assert str(err) == ("Unknown flag in TF_XLA_FLAGS: --tf_xla_auto_jitt=2\n"
                        "  --tf_xla_auto_jitt=2: did you mean --tf_xla_auto_jit=2?")
    assert err.tf_message == "Unknown flag in TF_XLA_FLAGS: --tf_xla_auto_jitt=2"


def test_unknown_flags_plural_in_order():
    err = error("--tf_xla_auto_jit=2 --tf_xla_foo --tf_xla_min_clustr_size=3")
    lines = str(err).splitlines()
    assert lines[0] == "Unknown flags in TF_XLA_FLAGS: --tf_xla_foo --tf_xla_min_clustr_size=3"
    assert lines[1] == "  --tf_xla_foo: TF 2.21 has no such flag. To list the flags, run `tfxla-cluster flags`."
    assert lines[2] == "  --tf_xla_min_clustr_size=3: did you mean --tf_xla_min_cluster_size=3?"


@pytest.mark.parametrize("tf,xla,own,head,hint", [
    ("--xla_dump_to=/tmp/x", "", "", "Unknown flag in TF_XLA_FLAGS: --xla_dump_to=/tmp/x",
     "  (--xla_dump_to belongs in XLA_FLAGS, not TF_XLA_FLAGS)"),
    ("--xla_gpu_autotune_level=2", "", "", "Unknown flag in TF_XLA_FLAGS: --xla_gpu_autotune_level=2",
     "  (--xla_gpu_autotune_level belongs in XLA_FLAGS, not TF_XLA_FLAGS)"),
    ("", "--tf_xla_auto_jit=2", "", "Unknown flag in XLA_FLAGS: --tf_xla_auto_jit=2",
     "  (--tf_xla_auto_jit belongs in TF_XLA_FLAGS, not XLA_FLAGS)"),
    ("", "--tf_xla_cpu_global_jit", "", "Unknown flag in XLA_FLAGS: --tf_xla_cpu_global_jit",
     "  (--tf_xla_cpu_global_jit belongs in TF_XLA_FLAGS, not XLA_FLAGS)"),
    ("--tfxla_cpu_threads=2", "", "", "Unknown flag in TF_XLA_FLAGS: --tfxla_cpu_threads=2",
     "  (--tfxla_cpu_threads belongs in TFXLA_CLUSTER_FLAGS, not TF_XLA_FLAGS)"),
    ("", "", "--xla_dump_to=x", "Unknown flag in TFXLA_CLUSTER_FLAGS: --xla_dump_to=x",
     "  (--xla_dump_to belongs in XLA_FLAGS, not TFXLA_CLUSTER_FLAGS)"),
    ("--xla_dump_too=/x", "", "", "Unknown flag in TF_XLA_FLAGS: --xla_dump_too=/x",
     "  --xla_dump_too=/x: did you mean --xla_dump_to=/x? (it belongs in XLA_FLAGS, not TF_XLA_FLAGS)"),
])
def test_flag_in_the_wrong_variable(tf, xla, own, head, hint):
    err = error(tf, xla, own)
    assert str(err).splitlines() == [head, hint]


@pytest.mark.parametrize("word,hint", [
    ("-tf_xla_auto_jit=2", "  -tf_xla_auto_jit=2: flags need two dashes: --tf_xla_auto_jit=2"),
    ("--TF_XLA_AUTO_JIT=2", "  --TF_XLA_AUTO_JIT=2: did you mean --tf_xla_auto_jit=2?"),
    ("--tf-xla-auto-jit=2", "  --tf-xla-auto-jit=2: did you mean --tf_xla_auto_jit=2?"),
    ("--tf_xla_min_cluster_size", "  --tf_xla_min_cluster_size needs a value, e.g. --tf_xla_min_cluster_size=4"),
    ("--tf_xla_auto_jit", "  --tf_xla_auto_jit needs a value, e.g. --tf_xla_auto_jit=0"),
    ("--tf_xla_ops_to_cluster", "  --tf_xla_ops_to_cluster needs a value, e.g. --tf_xla_ops_to_cluster=<value>"),
    ("--", "  '--' ends the flag list: TF reports it and every word after it as unknown. Remove it."),
])
def test_unknown_word_hints(word, hint):
    err = error(word)
    assert str(err).splitlines() == [f"Unknown flag in TF_XLA_FLAGS: {word}", hint]


def test_words_after_double_dash_are_unknown():
    err = error("--tf_xla_auto_jit=2 -- --tf_xla_min_cluster_size=2 --foo")
    assert str(err).splitlines() == [
        "Unknown flags in TF_XLA_FLAGS: -- --tf_xla_min_cluster_size=2 --foo",
        "  '--' ends the flag list: TF reports it and every word after it as unknown. Remove it.",
        "  --tf_xla_min_cluster_size=2: TF does not read it because it comes after '--'",
        "  --foo: TF 2.21 has no such flag. To list the flags, run `tfxla-cluster flags`.",
    ]


def test_help_word():
    err = error("--tf_xla_auto_jit=2 --help --foo")
    assert first_line(err) == "Flag parsing failed. (TF_XLA_FLAGS contains --help: TF prints its flag list and aborts.)"
    assert err.tf_message == "Flag parsing failed."
    # --help only counts as the first unknown word
    assert first_line(error("--foo --help")) == "Unknown flags in TF_XLA_FLAGS: --foo --help"


def test_unknown_word_keeps_quoted_value_without_quotes():
    assert first_line(error('--foo="a b"')) == "Unknown flag in TF_XLA_FLAGS: --foo=a b"


def test_bad_values_come_before_unknown_flags_and_are_all_listed():
    err = error("--tf_xla_bogus=1 --tf_xla_auto_jit=nope --tf_xla_min_cluster_size=x --tf_xla_cpu_global_jit=yes")
    lines = str(err).splitlines()
    assert lines[0] == "Couldn't interpret value x for flag tf_xla_min_cluster_size."
    assert lines[2] == "Couldn't interpret value yes for flag tf_xla_cpu_global_jit."
    assert lines[3].startswith("  tf_xla_cpu_global_jit is a bool flag: write --tf_xla_cpu_global_jit,")
    assert lines[4] == "  Invalid value nope for flag tf_xla_auto_jit. (TF logs no message for this one)"
    assert err.tf_message == ("Couldn't interpret value x for flag tf_xla_min_cluster_size.\n"
                              "Couldn't interpret value yes for flag tf_xla_cpu_global_jit.\n"
                              "Flag parsing failed.")


def test_tf_xla_flags_errors_come_before_xla_flags_errors():
    err = error("--tf_xla_foo", "--xla_foo")
    assert err.env_var == "TF_XLA_FLAGS"
    assert first_line(error("", "--xla_foo")) == "Unknown flag in XLA_FLAGS: --xla_foo"


def _file_error(env: str, value: str) -> str:
    return (f'Could not open file "{value}" to read flags for environment variable "{env}". '
            f'(We assumed "{value}" was a file name because it did not start with a "--".)')


def test_missing_dashes_is_taken_as_a_file_name():
    err = error("tf_xla_auto_jit=2")
    assert str(err).splitlines() == [
        _file_error("TF_XLA_FLAGS", "tf_xla_auto_jit=2"),
        "  TF_XLA_FLAGS must hold --name=value flags, or the name of a file that holds them.",
        "  Each flag needs a leading '--': TF_XLA_FLAGS=\"--tf_xla_auto_jit=2\"",
    ]
    assert err.tf_message == _file_error("TF_XLA_FLAGS", "tf_xla_auto_jit=2")
    err = error("", "xla_dump_to=/tmp/d xla_dump_hlo_as_text")
    assert str(err).splitlines()[2] == \
        "  Each flag needs a leading '--': XLA_FLAGS=\"--xla_dump_to=/tmp/d --xla_dump_hlo_as_text\""


def test_missing_file_and_whitespace_only_value(tmp_path):
    missing = str(tmp_path / "nope.txt")
    err = error(missing)
    assert str(err).splitlines() == [
        _file_error("TF_XLA_FLAGS", missing),
        "  TF_XLA_FLAGS must hold --name=value flags, or the name of a file that holds them."]
    # TF tests only env[0] for emptiness: whitespace alone is a (missing) file name
    assert first_line(error("   ")) == _file_error("TF_XLA_FLAGS", "   ")
    assert first_line(error(" " + missing)) == _file_error("TF_XLA_FLAGS", " " + missing)


def test_flags_from_a_file(tmp_path):
    path = tmp_path / "flags.txt"
    path.write_text("--tf_xla_auto_jit=2\n--tf_xla_min_cluster_size=3\n\t--tf_xla_ops_to_cluster=\"A B\"\n")
    f = parse(str(path))
    assert (f.auto_jit_level, f.tf_xla_min_cluster_size, f.tf_xla_ops_to_cluster) == (L.ON_2, 3, "A B")
    path.write_text("--tf_xla_auto_jitt=2\n")
    assert first_line(error(str(path))) == "Unknown flag in TF_XLA_FLAGS: --tf_xla_auto_jitt=2"
    path.write_text("# my flags\n--tf_xla_auto_jit=2\n")        # TF reads nothing from this file
    err = error(str(path))
    assert first_line(err) == ("TF_XLA_FLAGS: '#' does not start with '-'. TF stops reading flags there and "
                               "silently ignores it and everything after it.")
    assert err.tf_message is None
    assert parse(str(tmp_path)) == F.Flags.default()             # a directory reads as empty, like fopen()


def test_word_without_dashes_after_flags_is_an_error():
    # TF silently drops everything from the first word without '-': min cluster size stays 4 in TF.
    err = error("--tf_xla_auto_jit=2 tf_xla_min_cluster_size=3 --tf_xla_cpu_global_jit")
    assert str(err).splitlines() == [
        "TF_XLA_FLAGS: 'tf_xla_min_cluster_size=3' does not start with '-'. TF stops reading flags there and "
        "silently ignores it and everything after it.",
        "  TF ignores this part of TF_XLA_FLAGS: 'tf_xla_min_cluster_size=3 --tf_xla_cpu_global_jit'. "
        "Give each flag a leading '--': --tf_xla_min_cluster_size=3 --tf_xla_cpu_global_jit",
    ]


def test_parse_rejects_non_strings():
    with pytest.raises(FlagError, match="TF_XLA_FLAGS must be a string"):
        F.Flags.parse(None)  # type: ignore[arg-type]


# ========================================================================================================
# XLA_FLAGS pass-through
# ========================================================================================================

def test_unmodelled_xla_flags_are_accepted_and_typed():
    f = parse(xla="--xla_gpu_autotune_level=2 --xla_gpu_ftz --xla_fuel=x=1 --xla_dump_to=/d")
    assert f.xla_passthrough == {"xla_gpu_autotune_level": 2, "xla_gpu_ftz": True, "xla_fuel": "x=1"}
    assert f["xla_gpu_autotune_level"] == 2 and f["xla_dump_to"] == "/d" and f["xla_gpu_deterministic_ops"] is None
    with pytest.raises(KeyError):
        f["nope"]
    assert first_line(error(xla="--xla_gpu_autotune_level=high")) == \
        "Couldn't interpret value high for flag xla_gpu_autotune_level."
    assert first_line(error(xla="--xla_gpu_ftz=yes")) == "Couldn't interpret value yes for flag xla_gpu_ftz."


# ========================================================================================================
# Flags object
# ========================================================================================================

def test_from_env_reads_the_three_variables():
    environ = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=1", "XLA_FLAGS": "--xla_dump_to=/tmp/d",
               "TFXLA_CLUSTER_FLAGS": "--tfxla_cpu_threads=3", "OTHER": "x"}
    f = F.Flags.from_env(environ)
    assert (f.auto_jit_level, f.xla_dump_to, f.tfxla_cpu_threads) == (L.ON_1, "/tmp/d", 3)
    assert F.Flags.from_env({}) == F.Flags.default()
    assert F.Flags.from_env({"TF_XLA_FLAGS": ""}) == F.Flags.default()
    with pytest.raises(FlagError):
        F.Flags.from_env({"XLA_FLAGS": "--xla_nope"})


def test_from_env_and_get_flags_use_os_environ(monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_min_cluster_size=9")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("TFXLA_CLUSTER_FLAGS", raising=False)
    assert F.Flags.from_env().tf_xla_min_cluster_size == 9
    F.get_flags.cache_clear()
    try:
        assert F.get_flags().tf_xla_min_cluster_size == 9
        monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_min_cluster_size=2")
        assert F.get_flags().tf_xla_min_cluster_size == 9            # parsed once, like TF
        F.get_flags.cache_clear()
        assert F.get_flags().tf_xla_min_cluster_size == 2
    finally:
        F.get_flags.cache_clear()


def test_flags_are_immutable_and_attribute_errors_help():
    f = F.Flags.default()
    with pytest.raises(AttributeError, match="immutable"):
        f.tf_xla_min_cluster_size = 3
    with pytest.raises(AttributeError, match="immutable"):
        del f.tf_xla_min_cluster_size
    with pytest.raises(AttributeError, match="did you mean 'tf_xla_min_cluster_size'"):
        f.tf_xla_min_clustersize
    with pytest.raises(TypeError):
        F.Flags()
    assert "tf_xla_auto_jit" in dir(f)
    with pytest.raises(TypeError):
        f._values["x"] = 1                       # the mapping inside is read-only
    d = f.as_dict()
    d["tf_xla_min_cluster_size"] = 1             # as_dict() is a copy
    assert f.tf_xla_min_cluster_size == 4


def test_replace():
    base = parse("--tf_xla_min_cluster_size=3")
    f = base.replace(tf_xla_cpu_global_jit=True, tf_xla_max_cluster_size="100", xla_dump_to="/d",
                     tf_xla_clustering_fuel=5, xla_gpu_autotune_level=1, xla_gpu_autotune_gemm_rtol=0.1)
    assert base.tf_xla_cpu_global_jit is False                  # the original is unchanged
    assert (f.tf_xla_min_cluster_size, f.tf_xla_cpu_global_jit, f.tf_xla_max_cluster_size) == (3, True, 100)
    assert f.xla_passthrough == {"xla_gpu_autotune_level": 1, "xla_gpu_autotune_gemm_rtol": 0.10000000149011612}
    assert f.explicit == ("tf_xla_min_cluster_size", "tf_xla_cpu_global_jit", "tf_xla_max_cluster_size",
                          "xla_dump_to", "tf_xla_clustering_fuel", "xla_gpu_autotune_level",
                          "xla_gpu_autotune_gemm_rtol")
    assert base.replace(tf_xla_cpu_global_jit="TRUE").tf_xla_cpu_global_jit is True


def test_replace_auto_jit_uses_tfs_setter():
    f = F.Flags.default().replace(tf_xla_auto_jit=2)
    assert f.tf_xla_auto_jit == "2" and f.auto_jit_level == L.ON_2
    f = f.replace(tf_xla_auto_jit="single-gpu(1)")
    assert (f.auto_jit_level, f.auto_jit_single_gpu_level) == (L.ON_2, L.ON_1)
    d = F.Flags.default()
    assert d.replace(tf_xla_auto_jit="fusible", tf_xla_ops_to_cluster="PW").tf_xla_ops_to_cluster == "PW"
    assert d.replace(tf_xla_ops_to_cluster="PW", tf_xla_auto_jit="fusible").tf_xla_ops_to_cluster == "FUSIBLE"
    with pytest.raises(FlagError, match=r"^Invalid value 'x' for flag tf_xla_auto_jit"):
        F.Flags.default().replace(tf_xla_auto_jit="x")
    with pytest.raises(FlagError):
        F.Flags.default().replace(tf_xla_auto_jit=True)


@pytest.mark.parametrize("name,value,message", [
    ("tf_xla_auto_jitt", 2, r"^Unknown flag: tf_xla_auto_jitt\n  Did you mean --tf_xla_auto_jit\?"),
    ("tf_xla_cpu_global_jit", 1, r"^Flag tf_xla_cpu_global_jit is a bool flag; got int 1"),
    ("tf_xla_min_cluster_size", True, r"^Flag tf_xla_min_cluster_size is an int32 flag; got bool True"),
    ("tf_xla_min_cluster_size", 2.0, r"^Flag tf_xla_min_cluster_size is an int32 flag; got float"),
    ("tf_xla_min_cluster_size", 2**31, r"^Value 2147483648 for flag tf_xla_min_cluster_size is out of range"),
    ("tf_xla_min_cluster_size", "x", r"^Couldn't interpret value x for flag tf_xla_min_cluster_size\."),
    ("tf_xla_ops_to_cluster", 3, r"^Flag tf_xla_ops_to_cluster is a string flag; got int 3"),
    ("xla_gpu_autotune_level", "high", r"^Couldn't interpret value high for flag xla_gpu_autotune_level\."),
])
def test_replace_validates(name, value, message):
    with pytest.raises(FlagError, match=message):
        F.Flags.default().replace(**{name: value})


def test_as_dict_non_default_explicit_and_mlir_rollout():
    f = parse("--tf_xla_min_cluster_size=4 --tf_xla_cpu_global_jit --tf_mlir_enable_mlir_bridge=false")
    d = f.as_dict()
    assert list(d) == [s.name for s in F.FLAG_TABLE] and d["tf_xla_cpu_global_jit"] is True
    assert f.non_default() == {"tf_xla_cpu_global_jit": True}           # min size 4 is the default
    assert f.explicit == ("tf_xla_min_cluster_size", "tf_xla_cpu_global_jit", "tf_mlir_enable_mlir_bridge")
    assert f.mlir_bridge_rollout == "MLIR_BRIDGE_ROLLOUT_DISABLED"
    assert F.Flags.default().mlir_bridge_rollout == "MLIR_BRIDGE_ROLLOUT_UNSPECIFIED"
    assert parse("--tf_mlir_enable_mlir_bridge").mlir_bridge_rollout == "MLIR_BRIDGE_ROLLOUT_ENABLED"
    # giving the flag at all matters, so it is part of equality
    assert parse("--tf_mlir_enable_mlir_bridge=false") != F.Flags.default()


def test_equality_hash_pickle_repr():
    a = parse("--tf_xla_auto_jit=2", "--xla_gpu_autotune_level=1 --xla_gpu_autotune_gemm_rtol=nan")
    b = parse("--tf_xla_auto_jit=2", "--xla_gpu_autotune_gemm_rtol=nan --xla_gpu_autotune_level=1")
    assert a == b and hash(a) == hash(b) and a == a
    assert a != parse("--tf_xla_auto_jit=1") and a != "x"
    c = pickle.loads(pickle.dumps(a))
    assert c == a and c.explicit == a.explicit
    assert repr(parse("--tf_xla_auto_jit=2")) == "Flags(tf_xla_auto_jit='2')"
    # same value, different history: the levels decide
    assert parse("--tf_xla_auto_jit=single-gpu(2)") != parse("--tf_xla_auto_jit=2 --tf_xla_auto_jit=single-gpu(2)")


@pytest.mark.parametrize("tf,xla,own", [
    ("", "", ""),
    ("--tf_xla_auto_jit=fusible --tf_xla_ops_to_cluster=MatMul", "", ""),
    ("--tf_xla_ops_to_cluster=MatMul --tf_xla_auto_jit=fusible", "", ""),
    ("--tf_xla_auto_jit=2 --tf_xla_auto_jit=single-gpu(1)", "", ""),
    ("--tf_xla_auto_jit=single-gpu(1)", "", ""),
    ("--tf_xla_auto_jit=-1 --tf_xla_enable_lazy_compilation=false", "", ""),
    ('--tf_xla_ops_to_cluster="a b" --tf_xla_persistent_cache_directory="/x/\\"q\\" \\\\z"', "", ""),
    ("--tf_xla_persistent_cache_prefix=\"'lead\"", "--xla_dump_to=\"\\\"x\"", "--tfxla_cpu_threads=4"),
    ("", "--xla_gpu_autotune_gemm_rtol=inf --xla_gpu_ftz --xla_backend_extra_options=\"a b\"", ""),
    ("", "--xla_gpu_autotune_gemm_rtol=-nan", ""),
    ("--tf_mlir_enable_mlir_bridge=false", "", ""),
])
def test_env_strings_round_trip(tf, xla, own):
    f = parse(tf, xla, own)
    env = f.env_strings()
    assert set(env) <= set(F.ENV_VARS)
    assert F.Flags.from_env(env) == f


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))),
       st.text(alphabet=" \t\n\r\"'\\=-ab"), st.integers(-(2**31), 2**31 - 1), st.booleans())
def test_env_strings_round_trip_any_values(text, tricky, size, flag):
    f = F.Flags.default().replace(tf_xla_ops_to_cluster=text, tf_xla_persistent_cache_prefix=tricky,
                                  tf_xla_min_cluster_size=size, tf_xla_cpu_global_jit=flag, xla_dump_to=tricky)
    assert F.Flags.from_env(f.env_strings()) == f


def test_describe():
    f = parse("--tf_xla_auto_jit=single-gpu(2) --tf_xla_min_cluster_size=7", "--xla_gpu_autotune_level=2",
              "--tfxla_cpu_threads=3")
    text = F.describe(f)
    assert "TF_XLA_FLAGS: TensorFlow auto-clustering" in text and "TFXLA_CLUSTER_FLAGS:" in text
    assert "  * tf_xla_min_cluster_size = 7   (default 4)" in text
    assert "    tf_xla_max_cluster_size = 2147483647" in text
    assert "-> general level DEFAULT, single-GPU level ON_2" in text
    assert "  * xla_gpu_autotune_level = 2" in text
    assert all(s.name in text for s in F.FLAG_TABLE)
    short = F.describe(f, only_non_default=True)
    assert "tf_xla_max_cluster_size" not in short and "tf_xla_min_cluster_size = 7" in short
    assert F.describe(F.Flags.default(), only_non_default=True).count("\n") == 0
    assert max(len(line) for line in text.splitlines() if line.startswith("        ")) <= 100


# ========================================================================================================
# Differential tests against TensorFlow 2.21
# ========================================================================================================

_ORACLE = r'''
import ctypes, importlib.util, json, os, sys, tempfile
cases = json.loads(sys.stdin.read())
tfdir = os.path.dirname(importlib.util.find_spec("tensorflow").origin)
ctypes.CDLL(os.path.join(tfdir, "libtensorflow_framework.so.2"), mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(os.path.join(tfdir, "libtensorflow_cc.so.2"), mode=ctypes.RTLD_GLOBAL)
def getter(sym):
    f = getattr(lib, sym); f.restype = ctypes.c_void_p; return f
mark = getter("_ZN10tensorflow30GetMarkForCompilationPassFlagsEv")
build = getter("_ZN10tensorflow23GetBuildXlaOpsPassFlagsEv")
device = getter("_ZN10tensorflow17GetXlaDeviceFlagsEv")
debug_options = lib._ZN3xla24GetDebugOptionsFromFlagsEv
debug_options.restype = None; debug_options.argtypes = [ctypes.c_void_p]
def read(p, layout):
    out = {}
    for name, kind, off in layout:
        a = p + off
        if kind == "i32": out[name] = ctypes.c_int32.from_address(a).value
        elif kind == "i64": out[name] = ctypes.c_int64.from_address(a).value
        elif kind == "bool": out[name] = bool(ctypes.c_bool.from_address(a).value)
        else:  # libstdc++ std::string: data pointer, then length
            ptr = ctypes.c_void_p.from_address(a).value; n = ctypes.c_size_t.from_address(a + 8).value
            out[name] = ctypes.string_at(ptr, n).decode("utf-8", "surrogateescape")
    return out
MARK = [("single", "i32", 0), ("general", "i32", 4), ("tf_xla_min_cluster_size", "i32", 8),
        ("tf_xla_max_cluster_size", "i32", 12), ("tf_xla_ops_to_cluster", "str", 16),
        ("tf_xla_cluster_exclude_ops", "str", 48), ("tf_xla_clustering_debug", "bool", 80),
        ("tf_xla_cpu_global_jit", "bool", 81), ("tf_xla_clustering_fuel", "i64", 88),
        ("tf_xla_disable_deadness_safety_checks_for_debugging", "bool", 96),
        ("tf_xla_disable_resource_variable_safety_checks_for_debugging", "bool", 97),
        ("tf_xla_deterministic_cluster_names", "bool", 98), ("tf_xla_persistent_cache_directory", "str", 104),
        ("tf_xla_persistent_cache_device_types", "str", 136), ("tf_xla_persistent_cache_read_only", "bool", 168),
        ("tf_xla_disable_strict_signature_checks", "bool", 169), ("tf_xla_persistent_cache_prefix", "str", 176)]
BUILD = [("tf_xla_enable_lazy_compilation", "bool", 0), ("tf_xla_print_cluster_outputs", "bool", 1),
         ("tf_xla_check_cluster_input_numerics", "bool", 2), ("tf_xla_check_cluster_output_numerics", "bool", 3),
         ("tf_xla_disable_constant_folding", "bool", 4), ("tf_xla_disable_full_embedding_pipelining", "bool", 5),
         ("tf_xla_disable_full_embedding_pipelining_with_summaries", "bool", 6),
         ("tf_xla_embedding_parallel_iterations", "i32", 8)]
DEVICE = [("tf_xla_compile_on_demand", "bool", 0), ("tf_xla_enable_xla_devices", "bool", 1)]
def child(case):
    for k in ("TF_XLA_FLAGS", "XLA_FLAGS"):
        os.environ.pop(k, None)
        if case.get(k) is not None:
            os.environ[k] = case[k]
    values = {}
    if case.get("XLA_FLAGS") is None:
        values.update(read(mark(), MARK)); values.update(read(build(), BUILD)); values.update(read(device(), DEVICE))
    else:
        debug_options(ctypes.create_string_buffer(1 << 20))
    sys.stdout.write("ORACLE-VALUES " + json.dumps(values) + "\n"); sys.stdout.flush()
results = []
for case in cases:
    fd, path = tempfile.mkstemp()
    pid = os.fork()
    if pid == 0:
        os.dup2(fd, 1); os.dup2(fd, 2)
        try:
            child(case)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    with open(path, encoding="utf-8", errors="replace") as f:
        results.append(f.read())
    os.close(fd); os.unlink(path)
print(json.dumps(results))
'''

_TF_LOG = re.compile(r"^[EF]\d{4} \S+\s+\d+ (?:command_line_flags|parse_flags_from_env)\.cc:\d+\] (.*)$")


def _tf_available() -> bool:
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.origin or not hasattr(os, "fork"):
        return False
    tfdir = Path(spec.origin).parent
    return (tfdir / "libtensorflow_cc.so.2").exists() and (tfdir / "libtensorflow_framework.so.2").exists()


needs_tf = pytest.mark.skipif(not _tf_available(), reason="TensorFlow's shared libraries are not available")


class TFResult:
    """What TF did with one (TF_XLA_FLAGS, XLA_FLAGS) pair: parsed values, or its log lines before aborting."""

    def __init__(self, log: str) -> None:
        self.log = log
        values = [line for line in log.splitlines() if line.startswith("ORACLE-VALUES ")]
        self.values: dict | None = json.loads(values[0][len("ORACLE-VALUES "):]) if values else None
        self.messages = [m.group(1) for line in log.splitlines() if (m := _TF_LOG.match(line))]
        # "Check failed: tsl::Flags::Parse(...) Flag parsing failed." -> "Flag parsing failed."
        self.messages = [("Flag parsing failed." if m.startswith("Check failed:") and
                          m.endswith("Flag parsing failed.") else m) for m in self.messages]

    @property
    def ok(self) -> bool:
        return self.values is not None


def run_tf(cases: list[dict]) -> list[TFResult]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    proc = subprocess.run([sys.executable, "-c", _ORACLE], input=json.dumps(cases), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [TFResult(log) for log in json.loads(proc.stdout.strip().splitlines()[-1])]


def ours(tf: str | None, xla: str | None) -> F.Flags | FlagError:
    try:
        return F.Flags.parse(tf or "", xla or "")
    except FlagError as err:
        return err


def assert_same_as_tf(case: dict, tf: TFResult) -> None:
    """Our parse of ``case`` must match TF's: the same values, or an error whose first line is TF's first line
    and whose tf_message is exactly what TF logged."""
    got = ours(case.get("TF_XLA_FLAGS"), case.get("XLA_FLAGS"))
    if tf.ok:
        assert isinstance(got, F.Flags), f"TF accepted {case} but we raised:\n{got}"
        if case.get("XLA_FLAGS") is None:
            expected = dict(tf.values)
            assert (got.auto_jit_level, got.auto_jit_single_gpu_level) == \
                (expected.pop("general"), expected.pop("single")), case
            assert {k: getattr(got, k) for k in expected} == expected, case
        return
    assert isinstance(got, FlagError), f"TF rejected {case} with {tf.messages} but we accepted it"
    assert tf.messages, tf.log[-2000:]
    assert got.tf_message == "\n".join(tf.messages), case
    if tf.messages[0] == "Flag parsing failed.":
        assert first_line(got).startswith("Flag parsing failed. "), case
    else:
        assert first_line(got) == tf.messages[0], case


ERROR_CASES = [
    {"TF_XLA_FLAGS": "--tf_xla_auto_jitt=2"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jitt=2 --tf_xla_foo"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jitt=2 --tf_xla_min_cluster_size=3 --tf_xla_max_cluster_size=5"},
    {"TF_XLA_FLAGS": "--xla_dump_to=/tmp/x"},
    {"TF_XLA_FLAGS": '--foo="a b"'},
    {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit"},
    {"TF_XLA_FLAGS": "-tf_xla_auto_jit=2"},
    {"TF_XLA_FLAGS": "--TF_XLA_AUTO_JIT=2"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 -- --tf_xla_min_cluster_size=2"},
    {"TF_XLA_FLAGS": "--help"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --help --foo"},
    {"TF_XLA_FLAGS": "--foo --help"},
    {"TF_XLA_FLAGS": "tf_xla_auto_jit=2"},
    {"TF_XLA_FLAGS": "   "},
    {"TF_XLA_FLAGS": "/nonexistent/tfxla_flags.txt"},
    {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size=foo"},
    {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size="},
    {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size=2147483648"},
    {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size=0x10"},
    {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size=1.5"},
    {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size='5 5'"},
    {"TF_XLA_FLAGS": "--tf_xla_clustering_fuel=9223372036854775808"},
    {"TF_XLA_FLAGS": "--tf_xla_sparse_core_stacking_mem_limit_bytes=1e3"},
    {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit=yes"},
    {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit="},
    {"TF_XLA_FLAGS": '--tf_xla_cpu_global_jit="true "'},
    {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit=2"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=foo"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=single-gpu(x)"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=99999999999"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit="},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=FUSIBLE"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=foo --tf_xla_min_cluster_size=x --tf_xla_cpu_global_jit=yes"},
    {"TF_XLA_FLAGS": "--tf_xla_bogus --tf_xla_min_cluster_size=x"},
    {"XLA_FLAGS": "--xla_dump_too=/tmp/x"},
    {"XLA_FLAGS": "--tf_xla_auto_jit=2"},
    {"XLA_FLAGS": "--xla_backend_optimization_level=x"},
    {"XLA_FLAGS": "--xla_cpu_enable_fast_math=maybe"},
    {"XLA_FLAGS": "--xla_gpu_autotune_gemm_rtol=1e"},
    {"XLA_FLAGS": "--xla_gpu_autotune_gemm_rtol=0x1p"},
    {"XLA_FLAGS": "--xla_gpu_autotune_level=3000000000"},
    {"XLA_FLAGS": "xla_dump_to=/tmp/x"},
]

VALID_CASES = [
    {"TF_XLA_FLAGS": None},
    {"TF_XLA_FLAGS": ""},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=-1"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=5"},
    {"TF_XLA_FLAGS": '--tf_xla_auto_jit=" +2 "'},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=fusible"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=fusible --tf_xla_ops_to_cluster=MatMul"},
    {"TF_XLA_FLAGS": "--tf_xla_ops_to_cluster=MatMul --tf_xla_auto_jit=fusible"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=single-gpu(2)"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_auto_jit=single-gpu(1)"},
    {"TF_XLA_FLAGS": "--tf_xla_auto_jit='single-gpu( -1 )'"},
    {"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit --tf_xla_clustering_debug=TRUE --tf_xla_deterministic_cluster_names=1 "
                     "--tf_xla_enable_lazy_compilation=False --tf_xla_print_cluster_outputs=0 "
                     "--tf_xla_compile_on_demand=tRuE --tf_xla_enable_xla_devices=true "
                     "--tf_xla_disable_full_embedding_pipelining_with_summaries=false"},
    {"TF_XLA_FLAGS": '--tf_xla_min_cluster_size=+7 --tf_xla_max_cluster_size=" 12 " '
                     "--tf_xla_clustering_fuel=-9223372036854775808 --tf_xla_embedding_parallel_iterations=007"},
    {"TF_XLA_FLAGS": '--tf_xla_ops_to_cluster="PW, RED" --tf_xla_cluster_exclude_ops=\'Where\' '
                     '--tf_xla_persistent_cache_directory="/tmp/a \\"b\\" \\\\c" '
                     "--tf_xla_persistent_cache_prefix=p'q --tf_xla_persistent_cache_device_types="},
    {"TF_XLA_FLAGS": "\t--tf_xla_min_cluster_size=3\n--tf_xla_auto_jit=1\r\n"},
    {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size=3 --tf_xla_min_cluster_size=5"},
    {"TF_XLA_FLAGS": '--tf_xla_ops_to_cluster="A B'},
    {"TF_XLA_FLAGS": '--tf_xla_ops_to_cluster="A"--tf_xla_min_cluster_size=2'},
    {"TF_XLA_FLAGS": "--tf_xla_disable_deadness_safety_checks_for_debugging "
                     "--tf_xla_disable_resource_variable_safety_checks_for_debugging=1 "
                     "--tf_xla_persistent_cache_read_only --tf_xla_disable_strict_signature_checks"},
    {"XLA_FLAGS": "--xla_dump_to=/tmp/x --xla_gpu_autotune_level=2 --xla_cpu_enable_fast_math=true "
                  "--xla_gpu_autotune_gemm_rtol=' 0.5 ' --xla_dump_hlo_pass_re=.* --xla_backend_optimization_level=+1"},
    *({"XLA_FLAGS": f"--xla_gpu_autotune_gemm_rtol='{v}'"} for v in
      ("0x1p3", "-0X1.8P1", "0x1e3", "+0x1.", "nan(123)", "nan()", "+nan", "-INFINITY", "1e400", "1e-400", "00.5")),
]


def _random_cases(seed: int, n: int) -> list[dict]:
    """TF_XLA_FLAGS strings mixing good and bad spellings, quoting styles and separators."""
    rng = random.Random(seed)
    ints = ["0", "7", "+3", "-2", " 5 ", "\t9", "2147483647", "2147483648", "-2147483649", "9223372036854775807",
            "1.0", "0x1", "", "x", "3 4", "08"]
    bools = [None, "true", "TRUE", "False", "0", "1", "yes", "", "t", " true", "2"]
    jits = ["0", "1", "2", "-1", "7", " 2", "fusible", "single-gpu(1)", "single-gpu(-1)", "single-gpu( 2 )",
            "single-gpu()", "single-gpu(1", "Fusible", "x", "", "2147483648"]
    strs = ["MatMul", "PW,RED", "a b", 'q"u', "back\\slash", "", "x=y", "'"]
    names = {s.name: s.ctype for s in F.FLAG_TABLE if s.env == F.TF_XLA_FLAGS and s.name in _READABLE}
    cases = []
    for _ in range(n):
        words = []
        for _ in range(rng.randint(1, 4)):
            name = rng.choice(sorted(names) + ["tf_xla_auto_jit"] * 3 + ["tf_xla_nope"])
            ctype = names.get(name, "string")
            value = (rng.choice(jits) if name == "tf_xla_auto_jit" else rng.choice(bools) if ctype == "bool"
                     else rng.choice(ints) if ctype.startswith("int") else rng.choice(strs))
            if value is None:
                words.append(f"--{name}")
                continue
            quote = rng.choice(["", '"', "'"]) if value and not any(c in value for c in " \t\"'\\") else \
                rng.choice(['"', "'"]) if '"' not in value and "'" not in value else '"'
            if quote == '"':
                value = value.replace("\\", "\\\\").replace('"', '\\"')
            words.append(f"--{name}={quote}{value}{quote}")
        seps = [rng.choice([" ", "  ", "\t", "\n", " \r\n "]) for _ in words]
        cases.append({"TF_XLA_FLAGS": rng.choice(["", " ", "\n"]) + "".join(w + s for w, s in zip(words, seps))})
    return cases


_READABLE = {
    "tf_xla_min_cluster_size", "tf_xla_max_cluster_size", "tf_xla_ops_to_cluster", "tf_xla_cluster_exclude_ops",
    "tf_xla_clustering_debug", "tf_xla_cpu_global_jit", "tf_xla_clustering_fuel",
    "tf_xla_deterministic_cluster_names", "tf_xla_persistent_cache_prefix", "tf_xla_enable_lazy_compilation",
    "tf_xla_embedding_parallel_iterations", "tf_xla_compile_on_demand", "tf_xla_persistent_cache_directory",
}

_TYPED_XLA = {n: t for n, t in F.XLA_UNMODELLED_FLAGS.items() if t != "string"}
_TYPED_XLA.update({s.name: s.ctype for s in F.flags_for(F.XLA_FLAGS) if s.ctype != "string"})
_PLAIN_XLA_STRINGS = [n for n, t in F.XLA_UNMODELLED_FLAGS.items()
                      if t == "string" and n not in F.XLA_SETTER_CHECKED_FLAGS]
_PLAIN_XLA_STRINGS += [s.name for s in F.flags_for(F.XLA_FLAGS) if s.ctype == "string"]
_PROBE = "--xla_tfxla_probe_unknown=1"

# One batch: every case is run by a single oracle process.
_XLA_TABLE_CASES = [
    {"XLA_FLAGS": " ".join(f"--{n}=@@" for n in _TYPED_XLA)},
    {"XLA_FLAGS": " ".join(f"--{n}=2" for n in _TYPED_XLA)},
    {"XLA_FLAGS": " ".join(f"--{n}=1.5" for n, t in _TYPED_XLA.items() if t != "bool")},
    {"XLA_FLAGS": " ".join(f"--{n}=3000000000" for n, t in _TYPED_XLA.items() if t in ("int32", "int64"))},
    {"XLA_FLAGS": " ".join(f"--{n}=@@" for n in _PLAIN_XLA_STRINGS) + " " + _PROBE},
    *({"XLA_FLAGS": f"--{n}=@@ {_PROBE}"} for n in sorted(F.XLA_SETTER_CHECKED_FLAGS)),
]
_USAGE_CASES = [{"TF_XLA_FLAGS": "--tf_xla_min_cluster_size=x"}, {"XLA_FLAGS": "--xla_backend_optimization_level=x"}]
_RANDOM_CASES = _random_cases(seed=2_21, n=120)
_STRAY_CASE = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 tf_xla_min_cluster_size=3 --tf_xla_cpu_global_jit"}


@pytest.fixture(scope="module")
def tf_oracle(tmp_path_factory) -> dict[str, TFResult]:
    if not _tf_available():
        pytest.skip("TensorFlow's shared libraries are not available")
    d = tmp_path_factory.mktemp("flagfiles")
    (d / "good.txt").write_text("--tf_xla_auto_jit=2\n--tf_xla_min_cluster_size=3\n")
    (d / "unknown.txt").write_text("  --tf_xla_auto_jitt=2\n")
    (d / "bad.txt").write_text("--tf_xla_cpu_global_jit=on\n")
    file_cases = [{"TF_XLA_FLAGS": str(d / n)} for n in ("good.txt", "unknown.txt", "bad.txt")]
    groups = {"error": ERROR_CASES, "valid": VALID_CASES, "files": file_cases, "xla_table": _XLA_TABLE_CASES,
              "usage": _USAGE_CASES, "random": _RANDOM_CASES, "stray": [_STRAY_CASE]}
    flat = [c for cases in groups.values() for c in cases]
    results = iter(run_tf(flat))
    return {name: [(c, next(results)) for c in cases] for name, cases in groups.items()}  # type: ignore[misc]


@needs_tf
@pytest.mark.parametrize("group", ["error", "valid", "files", "random"])
def test_same_as_tf(tf_oracle, group):
    for case, tf in tf_oracle[group]:
        assert_same_as_tf(case, tf)
    if group == "random":       # the generator must produce both outcomes
        outcomes = {tf.ok for _, tf in tf_oracle[group]}
        assert outcomes == {True, False}


@needs_tf
def test_error_cases_really_fail_in_tf_and_valid_ones_pass(tf_oracle):
    assert all(not tf.ok for _, tf in tf_oracle["error"])
    assert all(tf.ok for _, tf in tf_oracle["valid"])


@needs_tf
def test_table_matches_tf_usage(tf_oracle):
    """TF lists its flags with their defaults when parsing fails; our table must match that list."""
    (_, tf_usage), (_, xla_usage) = tf_oracle["usage"]

    def listed(log: str) -> list[tuple[str, str, str]]:
        rows = []
        for line in log.splitlines():
            if m := re.match(r"^\t--(\w+)=(.*?)\s*\t(bool|int32|int64|float|string)\t", line):
                rows.append((m.group(1), m.group(3), m.group(2)))
        return rows

    assert listed(tf_usage.log) == [(s.name, s.ctype, s.display()) for s in F.flags_for(F.TF_XLA_FLAGS)]
    xla_rows = {r[0]: r for r in listed(xla_usage.log)}    # TF truncates this long message; ours come early
    assert [xla_rows.get(s.name) for s in F.flags_for(F.XLA_FLAGS)] == \
        [(s.name, s.ctype, s.display()) for s in F.flags_for(F.XLA_FLAGS)]
    assert all(F.XLA_UNMODELLED_FLAGS[n] == r[1] for n, r in xla_rows.items() if n in F.XLA_UNMODELLED_FLAGS)


@needs_tf
def test_xla_flag_names_and_types_match_xla(tf_oracle):
    """Every XLA flag we know is accepted by XLA 2.21 with the type we record."""
    results = [tf for _, tf in tf_oracle["xla_table"]]

    def rejected(tf: TFResult, value: str) -> set[str]:
        return {m.group(1) for msg in tf.messages
                if (m := re.fullmatch(rf"Couldn't interpret value {re.escape(value)} for flag (\w+)\.", msg))}

    assert rejected(results[0], "@@") == set(_TYPED_XLA)                   # known, and not strings
    assert rejected(results[1], "2") == {n for n, t in _TYPED_XLA.items() if t == "bool"}
    assert rejected(results[2], "1.5") == {n for n, t in _TYPED_XLA.items() if t in ("int32", "int64")}
    assert rejected(results[3], "3000000000") == {n for n, t in _TYPED_XLA.items() if t == "int32"}
    assert results[4].messages == [f"Unknown flag in XLA_FLAGS: {_PROBE}"]     # every plain string is known
    for (case, tf) in tf_oracle["xla_table"][5:]:                              # setter-checked: known, value refused
        assert "Flag parsing failed." in tf.messages, case
        assert not any(m.startswith("Unknown flag") for m in tf.messages), case
    # and we agree on the typed ones
    err = ours(None, _XLA_TABLE_CASES[0]["XLA_FLAGS"])
    assert isinstance(err, FlagError) and err.tf_message == "\n".join(results[0].messages)
    assert isinstance(ours(None, _XLA_TABLE_CASES[4]["XLA_FLAGS"]), FlagError)
    assert ours(None, " ".join(f"--{n}=@@" for n in _PLAIN_XLA_STRINGS)).xla_passthrough  # type: ignore[union-attr]


@needs_tf
def test_tf_silently_ignores_words_without_dashes_but_we_refuse(tf_oracle):
    [(case, tf)] = tf_oracle["stray"]
    assert tf.ok and tf.values is not None and tf.values["general"] == 2
    assert tf.values["tf_xla_min_cluster_size"] == 4 and tf.values["tf_xla_cpu_global_jit"] is False
    err = ours(case["TF_XLA_FLAGS"], None)
    assert isinstance(err, FlagError) and "silently ignores" in first_line(err)


def test_oracle_reads_the_struct_layout_we_expect():
    """Guard the oracle itself: the header shipped with TF declares the fields in the order it reads them."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.origin:
        pytest.skip("TensorFlow is not installed")
    header = Path(spec.origin).parent / "include/tensorflow/compiler/jit/flags.h"
    if not header.exists():
        pytest.skip("TF headers are not installed")
    text = header.read_text(encoding="utf-8")
    body = text[text.index("struct MarkForCompilationPassFlags {"):]
    body = body[:body.index("};")]
    fields = re.findall(r"^\s*(?:std::string|bool|int32_t|int64_t|XlaAutoJitFlag)\s+(\w+);", body, re.M)
    assert fields == ["xla_auto_jit_flag", "tf_xla_min_cluster_size", "tf_xla_max_cluster_size",
                      "tf_xla_ops_to_cluster", "tf_xla_cluster_exclude_ops", "tf_xla_clustering_debug",
                      "tf_xla_cpu_global_jit", "tf_xla_clustering_fuel",
                      "tf_xla_disable_deadness_safety_checks_for_debugging",
                      "tf_xla_disable_resource_variable_safety_checks_for_debugging",
                      "tf_xla_deterministic_cluster_names", "tf_xla_persistent_cache_directory",
                      "tf_xla_persistent_cache_device_types", "tf_xla_persistent_cache_read_only",
                      "tf_xla_disable_strict_signature_checks", "tf_xla_persistent_cache_prefix"]
    assert ctypes.sizeof(ctypes.c_void_p) == 8


@pytest.mark.tfsweep
@needs_tf
def test_real_tf_function_with_bad_tf_xla_flags():
    """The user-level path: a jit_compile tf.function under a bad TF_XLA_FLAGS aborts with TF's message."""
    prog = "import tensorflow as tf; tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(1.)); print('RAN')"
    for value in ("--tf_xla_auto_jitt=2", "--tf_xla_min_cluster_size=foo"):
        env = dict(os.environ, TF_XLA_FLAGS=value, TF_CPP_MIN_LOG_LEVEL="0")
        proc = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode != 0 and "RAN" not in proc.stdout
        tf = TFResult(proc.stderr)
        assert first_line(error(value)) == tf.messages[0]


def test_resolve_keeps_xla_flags_from_the_environment():
    env = {"TF_XLA_FLAGS": "--tf_xla_min_cluster_size=7", "XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}
    f = F.Flags.resolve("--tf_xla_auto_jit=2", environ=env)
    # The string replaces TF_XLA_FLAGS; XLA_FLAGS still come from the environment.
    assert f.auto_jit_level == L.ON_2 and f.tf_xla_min_cluster_size == 4
    assert f == F.Flags.parse("--tf_xla_auto_jit=2", env["XLA_FLAGS"])
    assert F.Flags.resolve(None, environ=env) == F.Flags.from_env(env)
    assert F.Flags.resolve(f) is f
