"""Algebraic simplifier: one golden per rewrite (HLO in, FileCheck lines out), XLA's preconditions as
negative cases, evaluator equality on random inputs, and idempotence."""
import pytest

from tests.passes.passes_helpers import assert_same_values, filecheck, module_text, random_args
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.verifier import verify_module
from tfxla_cluster.passes import RULES, AlgebraicSimplifier, FixedPoint, HloDCE


def M(params: str, body: str) -> str:
    """A module whose entry has ``params`` (``name: shape`` list) and ``body`` instruction lines."""
    lines = [f"  {p.split(':')[0].strip()} = {p.split(':')[1].strip()} parameter({k})"
             for k, p in enumerate(x for x in params.split(";") if x.strip())]
    lines += ["  " + line.strip() for line in body.strip().splitlines()]
    return "HloModule m\n\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


# (rule, module text, FileCheck lines). Every case also checks values and that ``rule`` fired.
CASES = [
    ("add_zero", M("p: f32[4]", """
        c = f32[] constant(0)
        b = f32[4] broadcast(c), dimensions={}
        ROOT a = f32[4] add(p, b)"""), "CHECK: ROOT %p = f32[4]{0} parameter(0)"),
    ("add_zero", M("p: s32[4]", """
        c = s32[4] constant({0, 0, 0, 0})
        ROOT a = s32[4] add(c, p)"""), "CHECK: ROOT %p = s32[4]{0} parameter(0)"),
    ("add_constant_to_rhs", M("p: f32[2]", """
        c = f32[2] constant({1, 2})
        ROOT a = f32[2] add(c, p)"""), "CHECK: ROOT {{.*}} add(%p, %c)"),
    ("minmax_constant_to_rhs", M("p: f32[2]", """
        c = f32[] constant(0)
        b = f32[2] broadcast(c), dimensions={}
        ROOT m = f32[2] maximum(b, p)"""), "CHECK: ROOT {{.*}} maximum(%p, %b)"),
    ("minmax_constant_to_rhs", M("p: s32[2]", """
        c = s32[] constant(1)
        b = s32[2] broadcast(c), dimensions={}
        ROOT m = s32[2] minimum(b, p)"""), "CHECK: ROOT {{.*}} minimum(%p, %b)"),
    ("minmax_self", M("p: f32[3]", "ROOT m = f32[3] maximum(p, p)"), "CHECK: ROOT %p = f32[3]{0} parameter(0)"),
    ("minmax_self", M("p: s32[3]", "ROOT m = s32[3] minimum(p, p)"), "CHECK: ROOT %p = s32[3]{0} parameter(0)"),
    ("add_reassociate_constants", M("p: f32[2]", """
        c1 = f32[2] constant({1, 2})
        c2 = f32[2] constant({3, 4})
        a1 = f32[2] add(p, c1)
        ROOT a2 = f32[2] add(a1, c2)"""), "CHECK: f32[2]{0} add(%c1, %c2)\nCHECK: ROOT {{.*}} add(%p, %{{add.*}})"),
    ("add_reassociate_constants", M("p: f32[2,3]", """
        c1 = f32[] constant(1)
        c2 = f32[] constant(2)
        b1 = f32[2,3] broadcast(c1), dimensions={}
        b2 = f32[2,3] broadcast(c2), dimensions={}
        a1 = f32[2,3] add(p, b1)
        ROOT a2 = f32[2,3] add(a1, b2)"""), "CHECK: f32[] add(%c1, %c2)\nCHECK: broadcast\nCHECK: ROOT {{.*}} add(%p,"),
    ("add_of_const_minus", M("p: f32[2]", """
        c1 = f32[2] constant({1, 2})
        c2 = f32[2] constant({3, 4})
        s = f32[2] subtract(c1, p)
        ROOT a = f32[2] add(s, c2)"""), "CHECK: add(%c1, %c2)\nCHECK: ROOT {{.*}} subtract(%{{add.*}}, %p)"),
    ("add_factor_common_multiplicand", M("p: s32[3]; q: s32[3]; r: s32[3]", """
        m1 = s32[3] multiply(p, r)
        m2 = s32[3] multiply(q, r)
        ROOT a = s32[3] add(m1, m2)"""), "CHECK: add(%p, %q)\nCHECK: ROOT {{.*}} multiply(%{{add.*}}, %r)"),
    ("add_factor_common_multiplicand", M("p: f32[3]; q: f32[3]", """
        c = f32[] constant(0.25)
        b = f32[3] broadcast(c), dimensions={}
        m1 = f32[3] multiply(p, b)
        m2 = f32[3] multiply(q, b)
        ROOT a = f32[3] add(m1, m2)"""), "CHECK: add(%p, %q)\nCHECK: ROOT {{.*}} multiply("),
    ("sub_zero", M("p: f32[4]", """
        c = f32[] constant(0)
        b = f32[4] broadcast(c), dimensions={}
        ROOT s = f32[4] subtract(p, b)"""), "CHECK: ROOT %p"),
    ("sub_self_integral", M("p: s32[4]", "ROOT s = s32[4] subtract(p, p)"),
     "CHECK: s32[] constant(0)\nCHECK: ROOT {{.*}} broadcast"),
    ("sub_constant_to_add", M("p: f32[2]", """
        c = f32[2] constant({1, 2})
        ROOT s = f32[2] subtract(p, c)"""), "CHECK: negate(%c)\nCHECK: ROOT {{.*}} add(%p, %negate"),
    ("sub_constant_to_add", M("p: f32[2,2]", """
        c = f32[] constant(3)
        b = f32[2,2] broadcast(c), dimensions={}
        ROOT s = f32[2,2] subtract(p, b)"""), "CHECK: f32[] negate(%c)\nCHECK: broadcast(%negate\nCHECK: ROOT {{.*}} add(%p,"),
    ("mul_one", M("p: f32[4]", """
        c = f32[] constant(1)
        b = f32[4] broadcast(c), dimensions={}
        ROOT m = f32[4] multiply(b, p)"""), "CHECK: ROOT %p"),
    ("mul_zero_integral", M("p: s32[4]", """
        c = s32[] constant(0)
        b = s32[4] broadcast(c), dimensions={}
        ROOT m = s32[4] multiply(p, b)"""), "CHECK: ROOT %b = s32[4]{0} broadcast(%c)"),
    ("mul_reassociate_constants", M("p: f32[2]", """
        c1 = f32[2] constant({2, 3})
        c2 = f32[2] constant({4, 5})
        m1 = f32[2] multiply(p, c1)
        ROOT m2 = f32[2] multiply(m1, c2)"""), "CHECK: multiply(%c1, %c2)\nCHECK: ROOT {{.*}} multiply(%p,"),
    ("mul_exp", M("p: f32[4]; q: f32[4]", """
        e1 = f32[4] exponential(p)
        e2 = f32[4] exponential(q)
        ROOT m = f32[4] multiply(e1, e2)"""), "CHECK: add(%p, %q)\nCHECK: ROOT {{.*}} exponential(%add"),
    ("div_one", M("p: f32[4]", """
        c = f32[] constant(1)
        b = f32[4] broadcast(c), dimensions={}
        ROOT d = f32[4] divide(p, b)"""), "CHECK: ROOT %p"),
    ("div_by_constant_to_mul", M("p: f32[4]", """
        c = f32[] constant(8)
        b = f32[4] broadcast(c), dimensions={}
        ROOT d = f32[4] divide(p, b)"""), "CHECK: f32[] constant(0.125)\nCHECK: broadcast\nCHECK: ROOT {{.*}} multiply(%p,"),
    ("div_by_constant_to_mul", M("p: f64[2]", """
        c = f64[2] constant({4, 0.5})
        ROOT d = f64[2] divide(p, c)"""), "CHECK: constant({0.25, 2})\nCHECK: ROOT {{.*}} multiply(%p,"),
    ("div_integral_by_power_of_two", M("p: u32[4]", """
        c = u32[] constant(8)
        b = u32[4] broadcast(c), dimensions={}
        ROOT d = u32[4] divide(p, b)"""), "CHECK: u32[] constant(3)\nCHECK: ROOT {{.*}} shift-right-logical(%p,"),
    ("div_integral_by_power_of_two", M("p: s32[6]", """
        c = s32[] constant(4)
        b = s32[6] broadcast(c), dimensions={}
        ROOT d = s32[6] divide(p, b)"""), "CHECK: compare\nCHECK: shift-right-logical\nCHECK: ROOT {{.*}} select("),
    ("div_exp_exp", M("p: f32[4]; q: f32[4]", """
        e1 = f32[4] exponential(p)
        e2 = f32[4] exponential(q)
        ROOT d = f32[4] divide(e1, e2)"""), "CHECK: subtract(%p, %q)\nCHECK: ROOT {{.*}} exponential("),
    ("div_by_exp", M("p: f32[4]; q: f32[4]", """
        e = f32[4] exponential(q)
        ROOT d = f32[4] divide(p, e)"""), "CHECK: negate(%q)\nCHECK: exponential(%negate\nCHECK: ROOT {{.*}} multiply(%p,"),
    ("div_by_pow", M("p: f32[4]; q: f32[4]; r: f32[4]", """
        w = f32[4] power(q, r)
        ROOT d = f32[4] divide(p, w)"""), "CHECK: negate(%r)\nCHECK: power(%q, %negate\nCHECK: ROOT {{.*}} multiply(%p,"),
    ("div_by_sqrt", M("p: f32[4]; q: f32[4]", """
        s = f32[4] sqrt(q)
        ROOT d = f32[4] divide(p, s)"""), "CHECK: rsqrt(%q)\nCHECK: ROOT {{.*}} multiply(%p, %rsqrt"),
    ("div_of_divs", M("p: f32[4]; q: f32[4]; r: f32[4]", """
        d1 = f32[4] divide(p, q)
        ROOT d2 = f32[4] divide(d1, r)"""), "CHECK: multiply(%q, %r)\nCHECK: ROOT {{.*}} divide(%p, %multiply"),
    ("pow_special_exponent", M("p: f32[4]; q: f32[4]", """
        e = f32[4] exponential(p)
        ROOT w = f32[4] power(e, q)"""), "CHECK: multiply(%p, %q)\nCHECK: ROOT {{.*}} exponential("),
    ("pow_special_exponent", M("p: f32[4]", """
        a = f32[4] abs(p)
        h = f32[] constant(0.5)
        hb = f32[4] broadcast(h), dimensions={}
        ROOT w = f32[4] power(a, hb)"""), "CHECK: ROOT {{.*}} sqrt(%a)"),
    ("pow_special_exponent", M("p: f32[4]", """
        c = f32[] constant(2)
        b = f32[4] broadcast(c), dimensions={}
        ROOT w = f32[4] power(p, b)"""), "CHECK: ROOT {{.*}} multiply(%p, %p)"),
    ("pow_special_exponent", M("p: s32[4]", """
        c = s32[] constant(3)
        b = s32[4] broadcast(c), dimensions={}
        ROOT w = s32[4] power(p, b)"""), "CHECK: %multiply = s32[4]{0} multiply(%p, %p)\nCHECK: ROOT {{.*}} multiply(%p, %multiply)"),
    ("pow_special_exponent", M("p: f32[4]", """
        c = f32[] constant(0)
        b = f32[4] broadcast(c), dimensions={}
        ROOT w = f32[4] power(p, b)"""), "CHECK: f32[] constant(1)\nCHECK: ROOT {{.*}} broadcast"),
    ("pow_special_exponent", M("p: f32[4]", """
        c = f32[] constant(1)
        b = f32[4] broadcast(c), dimensions={}
        ROOT w = f32[4] power(p, b)"""), "CHECK: ROOT %p"),
    ("pow_special_exponent", M("p: f32[4]", """
        c = f32[] constant(-1)
        b = f32[4] broadcast(c), dimensions={}
        ROOT w = f32[4] power(p, b)"""), "CHECK: ROOT {{.*}} divide({{.*}}, %p)"),
    ("log_exp", M("p: f32[4]", """
        e = f32[4] exponential(p)
        ROOT l = f32[4] log(e)"""), "CHECK: ROOT %p"),
    ("log_of_pow", M("p: f32[4]; q: f32[4]", """
        a = f32[4] abs(p)
        w = f32[4] power(a, q)
        ROOT l = f32[4] log(w)"""), "CHECK: log(%abs\nCHECK: multiply(%log{{.*}}, %q)\n"
     "CHECK: compare(%q, {{.*}}), direction=EQ\nCHECK: ROOT {{.*}} select("),
    ("log_of_root", M("p: f32[4]", """
        s = f32[4] sqrt(p)
        ROOT l = f32[4] log(s)"""), "CHECK: log(%p)\nCHECK: ROOT {{.*}} multiply(%log"),
    ("bitcast_noop", M("p: f32[2,3]", """
        b1 = f32[6] bitcast(p)
        ROOT b2 = f32[3,2] bitcast(b1)"""), "CHECK: ROOT {{.*}} f32[3,2]{1,0} bitcast(%p)"),
    ("negate_negate", M("p: f32[4]", """
        n1 = f32[4] negate(p)
        ROOT n2 = f32[4] negate(n1)"""), "CHECK: ROOT %p"),
    ("not_not", M("p: pred[4]", """
        n1 = pred[4] not(p)
        ROOT n2 = pred[4] not(n1)"""), "CHECK: ROOT %p"),
    ("and_constant", M("p: pred[4]", """
        c = pred[] constant(true)
        b = pred[4] broadcast(c), dimensions={}
        ROOT a = pred[4] and(p, b)"""), "CHECK: ROOT %p"),
    ("and_constant", M("p: pred[4]", """
        c = pred[] constant(false)
        b = pred[4] broadcast(c), dimensions={}
        ROOT a = pred[4] and(b, p)"""), "CHECK: ROOT %b"),
    ("or_constant", M("p: pred[4]", """
        c = pred[] constant(true)
        b = pred[4] broadcast(c), dimensions={}
        ROOT o = pred[4] or(p, b)"""), "CHECK: ROOT %b"),
    ("or_constant", M("p: s32[4]", """
        c = s32[] constant(0)
        b = s32[4] broadcast(c), dimensions={}
        ROOT o = s32[4] or(b, p)"""), "CHECK: ROOT %p"),
    ("constant_uniform_to_broadcast", M("p: f32[2,3]", """
        c = f32[2,3] constant({ { 7, 7, 7 }, { 7, 7, 7 } })
        ROOT a = f32[2,3] multiply(p, c)"""), "CHECK: f32[] constant(7)\nCHECK: broadcast({{.*}}), dimensions={}"),
    ("constant_iota", M("p: s32[5]", """
        c = s32[5] constant({0, 1, 2, 3, 4})
        ROOT a = s32[5] add(p, c)"""), "CHECK: s32[5]{0} iota(), iota_dimension=0"),
    ("constant_strided_iota", M("p: s32[4]", """
        c = s32[4] constant({0, 3, 6, 9})
        ROOT a = s32[4] add(p, c)"""), "CHECK: iota()\nCHECK: multiply(%iota"),
    # a Philox-sized u64 stride (beyond a C long) is compared in u64, not in Python ints
    ("constant_strided_iota", M("p: u64[2]", """
        c = u64[2] constant({0, 13499775926154735616})
        ROOT a = u64[2] add(p, c)"""), "CHECK: iota()\nCHECK: u64[] constant(13499775926154735616)"),
    ("reshape_noop", M("p: f32[2,3]", "ROOT r = f32[2,3] reshape(p)"), "CHECK: ROOT %p"),
    ("reshape_reshape", M("p: f32[2,3]", """
        r1 = f32[6] reshape(p)
        ROOT r2 = f32[3,2] reshape(r1)"""), "CHECK: ROOT {{.*}} f32[3,2]{1,0} reshape(%p)"),
    ("reshape_broadcast", M("p: f32[3]", """
        b = f32[3,2,2] broadcast(p), dimensions={0}
        ROOT r = f32[3,4] reshape(b)"""), "CHECK: ROOT {{.*}} f32[3,4]{1,0} broadcast(%p), dimensions={0}"),
    ("permute_of_scalar_broadcast", M("p: f32[]", """
        b = f32[2,3] broadcast(p), dimensions={}
        ROOT t = f32[3,2] transpose(b), dimensions={1,0}"""), "CHECK: ROOT {{.*}} f32[3,2]{1,0} broadcast(%p), dimensions={}"),
    ("permute_of_scalar_broadcast", M("p: f32[]", """
        b = f32[8] broadcast(p), dimensions={}
        ROOT s = f32[3] slice(b), slice={[2:5]}"""), "CHECK: ROOT {{.*}} f32[3]{0} broadcast(%p)"),
    ("transpose_noop", M("p: f32[2,3]", "ROOT t = f32[2,3] transpose(p), dimensions={0,1}"), "CHECK: ROOT %p"),
    ("transpose_transpose", M("p: f32[2,3,4]", """
        t1 = f32[3,4,2] transpose(p), dimensions={1,2,0}
        ROOT t2 = f32[4,2,3] transpose(t1), dimensions={1,2,0}"""),
     "CHECK: ROOT {{.*}} f32[4,2,3]{2,1,0} transpose(%p), dimensions={2,0,1}"),
    ("transpose_is_reshape", M("p: f32[1,3,1,4]", "ROOT t = f32[3,1,4,1] transpose(p), dimensions={1,0,3,2}"),
     "CHECK: ROOT {{.*}} reshape(%p)"),
    ("transpose_broadcast", M("p: f32[3]", """
        b = f32[2,3,4] broadcast(p), dimensions={1}
        ROOT t = f32[3,4,2] transpose(b), dimensions={1,2,0}"""), "CHECK: ROOT {{.*}} f32[3,4,2]{2,1,0} broadcast(%p), dimensions={0}"),
    ("broadcast_noop", M("p: f32[2,3]", "ROOT b = f32[2,3] broadcast(p), dimensions={0,1}"), "CHECK: ROOT %p"),
    ("broadcast_to_reshape", M("p: f32[4]", "ROOT b = f32[4,1] broadcast(p), dimensions={0}"),
     "CHECK: ROOT {{.*}} f32[4,1]{1,0} reshape(%p)"),
    ("broadcast_to_transpose", M("p: f32[2,3]", "ROOT b = f32[3,2] broadcast(p), dimensions={1,0}"),
     "CHECK: ROOT {{.*}} transpose(%p), dimensions={1,0}"),
    ("broadcast_of_degenerate_reshape", M("p: f32[4]", """
        r = f32[4,1] reshape(p)
        ROOT b = f32[4,1,5] broadcast(r), dimensions={0,1}"""), "CHECK: ROOT {{.*}} broadcast(%p), dimensions={0}"),
    ("broadcast_iota", M("", """
        i = s32[3] iota(), iota_dimension=0
        ROOT b = s32[2,3] broadcast(i), dimensions={1}"""), "CHECK: ROOT {{.*}} s32[2,3]{1,0} iota(), iota_dimension=1"),
    ("broadcast_broadcast", M("p: f32[3]", """
        b1 = f32[3,4] broadcast(p), dimensions={0}
        ROOT b2 = f32[2,3,4] broadcast(b1), dimensions={1,2}"""), "CHECK: ROOT {{.*}} f32[2,3,4]{2,1,0} broadcast(%p), dimensions={1}"),
    ("sink_broadcast_after_elementwise", M("p: bf16[]", """
        b = bf16[4] broadcast(p), dimensions={}
        ROOT c = f32[4] convert(b)"""), "CHECK: f32[] convert(%p)\nCHECK: ROOT {{.*}} f32[4]{0} broadcast(%c"),
    ("sink_broadcast_after_elementwise", M("p: f32[3]; q: f32[]", """
        b1 = f32[2,3] broadcast(p), dimensions={1}
        b2 = f32[2,3] broadcast(q), dimensions={}
        ROOT m = f32[2,3] maximum(b1, b2)"""),
     "CHECK: f32[3]{0} broadcast(%q), dimensions={}\nCHECK: f32[3]{0} maximum(%p, \nCHECK: ROOT {{.*}} f32[2,3]{1,0} broadcast({{.*}}), dimensions={1}"),
    ("broadcast_drop_degenerate_dims", M("p: f32[3,1]", """
        ROOT b = f32[3,1,5] broadcast(p), dimensions={0,1}"""),
     "CHECK: f32[3]{0} reshape(%p)\nCHECK: ROOT {{.*}} broadcast(%reshape{{.*}}), dimensions={0}"),
    ("slice_full", M("p: f32[2,3]", "ROOT s = f32[2,3] slice(p), slice={[0:2], [0:3]}"), "CHECK: ROOT %p"),
    ("dynamic_slice_full", M("p: f32[2,3]; i: s32[]", """
        ROOT s = f32[2,3] dynamic-slice(p, i, i), dynamic_slice_sizes={2,3}"""), "CHECK: ROOT %p"),
    ("dynamic_update_slice_full", M("p: f32[2,3]; u: f32[2,3]; i: s32[]", """
        ROOT s = f32[2,3] dynamic-update-slice(p, u, i, i)"""), "CHECK: ROOT %u"),
    ("dynamic_update_slice_of_broadcast_to_pad", M("u: f32[1,3]", """
        z = f32[] constant(0)
        b = f32[3,3] broadcast(z), dimensions={}
        i = s32[] constant(2)
        j = s32[] constant(5)
        ROOT s = f32[3,3] dynamic-update-slice(b, u, i, j)"""), "CHECK: ROOT {{.*}} pad(%u, %z), padding=2_0x0_0"),
    # the combine of an expanded one-index scatter (XLA's HandleMap)
    ("map_inline", M("p: f32[2,3]; q: f32[2,3]", """
        ROOT m = f32[2,3] map(p, q), dimensions={0,1}, to_apply=add"""), "CHECK: ROOT {{.*}} f32[2,3]{1,0} add(%p, %q)"),
    ("map_inline", M("p: f32[2,3]; q: f32[2,3]", """
        ROOT m = f32[2,3] map(p, q), dimensions={0,1}, to_apply=second"""), "CHECK: ROOT %q"),
    ("slice_slice", M("p: f32[20]", """
        s1 = f32[8] slice(p), slice={[2:18:2]}
        ROOT s2 = f32[3] slice(s1), slice={[1:7:2]}"""), "CHECK: ROOT {{.*}} f32[3]{0} slice(%p), slice={[4:13:4]}"),
    ("slice_of_concat", M("p: f32[2,3]; q: f32[2,4]", """
        c = f32[2,7] concatenate(p, q), dimensions={1}
        ROOT s = f32[2,2] slice(c), slice={[0:2], [4:6]}"""), "CHECK: ROOT {{.*}} slice(%q), slice={[0:2], [1:3]}"),
    ("concat_single_operand", M("p: f32[2,3]", "ROOT c = f32[2,3] concatenate(p), dimensions={0}"), "CHECK: ROOT %p"),
    ("concat_to_pad", M("p: f32[2,3]; s: f32[]", """
        b = f32[2,2] broadcast(s), dimensions={}
        ROOT c = f32[2,5] concatenate(p, b), dimensions={1}"""), "CHECK: ROOT {{.*}} pad(%p, %s), padding=0_0x0_2"),
    ("pad_noop", M("p: f32[2,3]; s: f32[]", "ROOT x = f32[2,3] pad(p, s), padding=0_0x0_0"), "CHECK: ROOT %p"),
    ("reverse_noop", M("p: f32[1,3]", "ROOT r = f32[1,3] reverse(p), dimensions={0}"), "CHECK: ROOT %p"),
    ("sort_trivial", M("p: f32[4,1]", "ROOT s = f32[4,1] sort(p), dimensions={1}, to_apply=less"), "CHECK: ROOT %p"),
    ("sort_trivial", M("p: f32[1,3]; q: s32[1,3]", """
        ROOT s = (f32[1,3], s32[1,3]) sort(p, q), dimensions={0}, to_apply=kv_less"""),
     "CHECK: ROOT {{.*}} tuple(%p, %q)"),
    ("reduce_to_reshape", M("p: f32[4,1]", """
        z = f32[] constant(0)
        ROOT r = f32[4] reduce(p, z), dimensions={1}, to_apply=add"""), "CHECK: ROOT {{.*}} f32[4]{0} reshape(%p)"),
    ("reduce_window_trivial", M("p: f32[2,3]", """
        z = f32[] constant(1)
        ROOT r = f32[3,4] reduce-window(p, z), window={size=1x1 pad=0_1x1_0}, to_apply=add"""),
     "CHECK: broadcast(%z)\nCHECK: add(%p, %broadcast\nCHECK: ROOT {{.*}} f32[3,4]{1,0} pad({{.*}}, %z), padding=0_1x1_0"),
    ("reduce_window_trivial", M("p: f32[0,3]", """
        z = f32[] constant(0)
        ROOT r = f32[0,3] reduce-window(p, z), window={size=2x1 pad=1_0x0_0}, to_apply=add"""),
     "CHECK: ROOT {{.*}} broadcast(%z)"),
    # As in TF's dump for max_pool2d(bf16[1,3,8,2], ksize=[3, 1], VALID): a reduce, then a reshape.
    ("reduce_window_to_reduce", M("p: f32[1,3,8,2]", """
        z = f32[] constant(0)
        ROOT r = f32[1,1,8,2] reduce-window(p, z), window={size=1x3x1x1}, to_apply=add"""),
     "CHECK: %{{.*}} = f32[1,8,2]{2,1,0} reduce(%p, %z), dimensions={1}, to_apply=%add\n"
     "CHECK: ROOT {{.*}} f32[1,1,8,2]{3,2,1,0} reshape("),
    ("reduce_window_to_reduce", M("p: f32[2,3,4]", """
        z = f32[] constant(0)
        ROOT r = f32[1,3,1] reduce-window(p, z), window={size=2x1x4}, to_apply=add"""),
     "CHECK: %{{.*}} = f32[3]{0} reduce(%p, %z), dimensions={0,2}, to_apply=%add\n"
     "CHECK: ROOT {{.*}} f32[1,3,1]{2,1,0} reshape("),
    ("select_same_branches", M("p: pred[4]; a: f32[4]", "ROOT s = f32[4] select(p, a, a)"), "CHECK: ROOT %a"),
    ("select_constant_predicate", M("a: f32[4]; b: f32[4]", """
        c = pred[] constant(false)
        p = pred[4] broadcast(c), dimensions={}
        ROOT s = f32[4] select(p, a, b)"""), "CHECK: ROOT %b"),
    ("select_not_predicate", M("p: pred[4]; a: f32[4]; b: f32[4]", """
        n = pred[4] not(p)
        ROOT s = f32[4] select(n, a, b)"""), "CHECK: ROOT {{.*}} select(%p, %b, %a)"),
    ("gte_of_tuple", M("a: f32[4]; b: s32[]", """
        t = (f32[4], s32[]) tuple(a, b)
        ROOT g = s32[] get-tuple-element(t), index=1"""), "CHECK: ROOT %b"),
    # TF's dump for conv2d(f32[1,3,2,2], f32[3,3,2,2], SAME) and (f32[2,1,2,2], f32[3,2,2,2], SAME).
    ("conv_operand_swap", M("x: f32[1,3,2,2]; w: f32[3,3,2,2]", """
        ROOT c = f32[1,3,2,2] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"""),
     "CHECK: %reverse = f32[3,3,2,2]{3,2,1,0} reverse(%w), dimensions={0,1}\n"
     "CHECK: ROOT {{.*}} convolution(%reverse, %x), window={size=3x2 pad=1_1x0_0 rhs_reversal=1x1}, "
     "dim_labels=01fb_o01i->f01b"),
    ("conv_operand_swap", M("x: f32[2,1,2,2]; w: f32[3,2,2,2]", """
        ROOT c = f32[2,1,2,2] convolution(x, w), window={size=3x2 pad=1_1x0_1}, dim_labels=b01f_01io->b01f"""),
     "CHECK: ROOT {{.*}} convolution(%{{.*}}, %x), window={size=1x2 pad=-1_-1x0_1 rhs_reversal=1x1}, "
     "dim_labels=01fb_o01i->f01b"),
    # TF's dump for depthwise_conv2d(f32[1,2,2,3], f32[1,2,3,1], VALID) and conv2d(f32[2,3,3,1], f32[3,3,1,1]):
    # a multiply and a reduce over the whole-input window dimensions (SimplifyConvToMultiply)
    ("conv_to_multiply", M("x: f32[1,2,2,3]; w: f32[1,2,1,3]", """
        ROOT c = f32[1,2,1,3] convolution(x, w), window={size=1x2}, dim_labels=b01f_01io->b01f,
        feature_group_count=3"""),
     "CHECK: %transpose = f32[1,1,2,3]{3,2,1,0} transpose(%w), dimensions={2,0,1,3}\n"
     "CHECK: broadcast({{.*}}), dimensions={0,2,3}\n"
     "CHECK: %multiply = f32[1,2,2,3]{3,2,1,0} multiply(%x, %broadcast)\n"
     "CHECK: reduce(%multiply, %constant), dimensions={2}, to_apply=%multiply.reduce_sub_computation\n"
     "CHECK: ROOT {{.*}} f32[1,2,1,3]{3,2,1,0} reshape("),
    ("conv_to_multiply", M("x: f32[2,3,3,1]; w: f32[3,3,1,1]", """
        ROOT c = f32[2,1,1,1] convolution(x, w), window={size=3x3}, dim_labels=b01f_01io->b01f"""),
     "CHECK: reduce(%multiply, %constant), dimensions={1,2}\nCHECK: ROOT {{.*}} f32[2,1,1,1]{3,2,1,0} reshape("),
    ("conv_to_multiply", M("x: f32[2,3,4]; w: f32[1,1,4]", """
        ROOT c = f32[2,3,4] convolution(x, w), window={size=1}, dim_labels=b0f_0io->b0f, feature_group_count=4"""),
     "CHECK: broadcast({{.*}}), dimensions={2}\nCHECK: ROOT {{.*}} multiply(%x, %broadcast)"),
    ("convert_noop", M("p: f32[4]", "ROOT c = f32[4] convert(p)"), "CHECK: ROOT %p"),
    ("convert_pair_noop", M("p: f32[4]", """
        c1 = f64[4] convert(p)
        ROOT c2 = f32[4] convert(c1)"""), "CHECK: ROOT %p"),
    ("copy_noop", M("p: f32[4]", "ROOT c = f32[4] copy(p)"), "CHECK: ROOT %p"),
    ("compare_self_integral", M("p: s32[4]", "ROOT c = pred[4] compare(p, p), direction=GE"),
     "CHECK: pred[] constant(true)\nCHECK: ROOT {{.*}} broadcast"),
    ("compare_non_negative", M("p: s32[4]", """
        a = s32[4] abs(p)
        z = s32[] constant(0)
        zb = s32[4] broadcast(z), dimensions={}
        ROOT c = pred[4] compare(a, zb), direction=LT"""),
     "CHECK: pred[] constant(false)\nCHECK: ROOT {{.*}} broadcast"),
    ("compare_non_negative", M("p: f32[4]", """
        m = f32[4] multiply(p, p)
        z = f32[] constant(0)
        zb = f32[4] broadcast(z), dimensions={}
        ROOT c = pred[4] compare(zb, m), direction=LE"""),
     "CHECK: pred[] constant(true)\nCHECK: ROOT {{.*}} broadcast"),
    ("compare_non_negative", M("p: f32[4]", """
        e = f32[4] exponential(p)
        z = f32[] constant(0)
        zb = f32[4] broadcast(z), dimensions={}
        ROOT c = pred[4] compare(e, zb), direction=GE"""),
     "CHECK: pred[] constant(true)\nCHECK: ROOT {{.*}} broadcast"),
    ("abs_non_negative", M("p: f32[4]", """
        e = f32[4] exponential(p)
        ROOT a = f32[4] abs(e)"""), "CHECK: ROOT %e = f32[4]{0} exponential(%p)"),
    ("abs_non_negative", M("p: f32[4]; q: f32[4]; r: f32[4]", """
        a = f32[4] abs(p)
        e = f32[4] exponential(q)
        w = f32[4] power(a, r)
        m = f32[4] minimum(w, e)
        ROOT b = f32[4] abs(m)"""), "CHECK: ROOT %m = f32[4]{0} minimum(%w, %e)"),
    ("sqrt_of_square", M("p: f32[4]", """
        m = f32[4] multiply(p, p)
        ROOT s = f32[4] sqrt(m)"""), "CHECK: ROOT {{.*}} f32[4]{0} abs(%p)"),
    ("dot_remove_degenerate_dims", M("p: f32[1,4]; q: f32[4,3]", """
        ROOT d = f32[1,3] dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""),
     "CHECK: f32[4]{0} reshape(%p)\nCHECK: f32[3]{0} dot(\nCHECK: ROOT {{.*}} f32[1,3]{1,0} reshape(%dot"),
    ("dot_without_contraction_to_multiply", M("p: f32[3]; q: f32[2]", """
        ROOT d = f32[3,2] dot(p, q), lhs_contracting_dims={}, rhs_contracting_dims={}"""),
     "CHECK: broadcast(%p), dimensions={0}\nCHECK: broadcast(%q), dimensions={1}\nCHECK: ROOT {{.*}} multiply("),
    ("set_dimension_size_static", M("p: f32[4]", """
        n = s32[] constant(4)
        ROOT s = f32[4] set-dimension-size(p, n), dimensions={0}"""), "CHECK: ROOT %p"),
]

ADD = """%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

"""


SECOND = """%second (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %y = f32[] parameter(1)
}

"""


LESS = """%less (x: f32[], y: f32[]) -> pred[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %lt = pred[] compare(%x, %y), direction=LT
}

"""


KV_LESS = """%kv_less (x: f32[], y: f32[], i: s32[], j: s32[]) -> pred[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %i = s32[] parameter(2)
  %j = s32[] parameter(3)
  ROOT %lt = pred[] compare(%x, %y), direction=LT
}

"""


def parse(text: str):
    for name, comp in (("add", ADD), ("second", SECOND), ("kv_less", KV_LESS), ("less", LESS)):
        if f"to_apply={name}" in text:
            text = text.replace("HloModule m\n\n", "HloModule m\n\n" + comp).replace(f"to_apply={name}",
                                                                                      f"to_apply=%{name}")
    module = parse_module(text)
    verify_module(module)
    return module


def simplify_once(module):
    simp = AlgebraicSimplifier()
    changed = simp.run(module)
    HloDCE().run(module)
    verify_module(module)
    return simp, changed


@pytest.mark.parametrize("rule,text,checks", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_rewrite(rule, text, checks):
    module = parse(text)
    args = random_args(module, seed=1)
    want = evaluate(module, *args)
    simp, changed = simplify_once(module)
    assert changed and simp.stats[rule] >= 1, f"{rule} did not fire: {dict(simp.stats)}"
    filecheck(module_text(module), checks)
    assert_same_values(evaluate(module, *args), want, rtol=1e-6, atol=1e-6, context=rule)


def test_every_rule_has_a_golden_and_a_docstring():
    tested = {c[0] for c in CASES} | {"reshape_is_bitcast", "transpose_is_bitcast", "concat_drop_empty"}
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)), "rule names are unique"
    assert set(names) <= tested, f"untested rules: {set(names) - tested}"
    assert all(r.doc for r in RULES)


# XLA's preconditions: these must stay as they are.
NEGATIVE = [
    ("conv_kernel_not_larger", M("x: f32[1,3,3,2]; w: f32[3,3,2,4]", """
        ROOT c = f32[1,3,3,4] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f""")),
    ("conv_grouped_no_swap", M("x: f32[1,2,2,4]; w: f32[3,3,2,4]", """
        ROOT c = f32[1,2,2,4] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,
        feature_group_count=2""")),
    ("a depthwise convolution with a stride is no multiply", M("x: f32[1,2,4,3]; w: f32[1,2,1,3]", """
        ROOT c = f32[1,2,2,3] convolution(x, w), window={size=1x2 stride=1x2}, dim_labels=b01f_01io->b01f,
        feature_group_count=3""")),
    ("a depthwise multiplier of 2 is no multiply", M("x: f32[1,2,2,3]; w: f32[1,2,1,6]", """
        ROOT c = f32[1,2,1,6] convolution(x, w), window={size=1x2}, dim_labels=b01f_01io->b01f,
        feature_group_count=3""")),
    ("int divide by a constant is not a multiply", M("p: s32[4]", """
        c = s32[] constant(3)
        b = s32[4] broadcast(c), dimensions={}
        ROOT d = s32[4] divide(p, b)""")),
    ("float A*0 is kept (NaN)", M("p: f32[4]", """
        c = f32[] constant(0)
        b = f32[4] broadcast(c), dimensions={}
        ROOT m = f32[4] multiply(p, b)""")),
    ("A-B with non-constant B is kept", M("p: f32[4]; q: f32[4]", "ROOT s = f32[4] subtract(p, q)")),
    ("float A-A is kept (inf - inf)", M("p: f32[4]", "ROOT s = f32[4] subtract(p, p)")),
    ("divide by a non-constant stays", M("p: f32[4]; q: f32[4]", "ROOT d = f32[4] divide(p, q)")),
    ("narrowing convert pair stays", M("p: f32[4]", """
        c1 = f16[4] convert(p)
        ROOT c2 = f32[4] convert(c1)""")),
    ("a reduce-window over a real window stays", M("p: f32[2,3]", """
        z = f32[] constant(0)
        ROOT r = f32[2,2] reduce-window(p, z), window={size=1x2}, to_apply=add""")),
    ("a strided 1x1 reduce-window stays", M("p: f32[4]", """
        z = f32[] constant(0)
        ROOT r = f32[2] reduce-window(p, z), window={size=1 stride=2}, to_apply=add""")),
    # XLA's FloatNormalization has already wrapped a bf16 reducer's root in converts (a 1x1 bf16 max_pool of
    # NaN is -inf in TF's XLA, the window loop's max(-inf, NaN), not the NaN of maximum(NaN, -inf))
    ("a bf16 1x1 max reduce-window stays", """HloModule m

%max (x: bf16[], y: bf16[]) -> bf16[] {
  %x = bf16[] parameter(0)
  %y = bf16[] parameter(1)
  ROOT %m = bf16[] maximum(%x, %y)
}

ENTRY e {
  p = bf16[4] parameter(0)
  z = bf16[] constant(-inf)
  ROOT r = bf16[4] reduce-window(p, z), window={size=1}, to_apply=%max
}
"""),
    ("a whole-dimension reduce-window with a stride elsewhere stays", M("p: f32[2,4]", """
        z = f32[] constant(0)
        ROOT r = f32[1,2] reduce-window(p, z), window={size=2x1 stride=1x2}, to_apply=add""")),
    ("a whole-dimension reduce-window with padding stays", M("p: f32[2,4]", """
        z = f32[] constant(0)
        ROOT r = f32[1,4] reduce-window(p, z), window={size=3x1 pad=1_0x0_0}, to_apply=add""")),
    ("max of two equal converts stays (only one instruction on both sides)", M("p: f32[3]", """
        c1 = s32[3] convert(p)
        c2 = s32[3] convert(p)
        ROOT m = s32[3] maximum(c1, c2)""")),
    # XLA's HandleMultiply has no Const * A -> A * Const canonicalisation (HandleAdd has): operand order
    # picks which product of a complex multiply LLVM contracts into an FMA (fuzz seed 113001338)
    ("a constant multiplicand stays on the left", M("p: f32[2]", """
        c = f32[2] constant({2, 3})
        ROOT m = f32[2] multiply(c, p)""")),
    ("real transpose stays", M("p: f32[2,3]", "ROOT t = f32[3,2] transpose(p), dimensions={1,0}")),
    ("partial slice stays", M("p: f32[4]", "ROOT s = f32[2] slice(p), slice={[1:3]}")),
    ("non-uniform constant stays", M("p: f32[3]", """
        c = f32[3] constant({1, 2, 4})
        ROOT a = f32[3] multiply(p, c)""")),
    # TF 2.21's IsNonNegative: -0 (and NaN) constants are not non-negative, sqrt's IsPositive needs a cuDNN call
    ("pow(A, 0.5) of a maybe-negative A stays", M("p: f32[4]", """
        h = f32[] constant(0.5)
        hb = f32[4] broadcast(h), dimensions={}
        ROOT w = f32[4] power(p, hb)""")),
    ("abs of max with -0 stays", M("p: f32[4]", """
        z = f32[] constant(-0)
        zb = f32[4] broadcast(z), dimensions={}
        m = f32[4] maximum(p, zb)
        ROOT a = f32[4] abs(m)""")),
    ("sqrt of a product of two equal instructions stays (XLA compares operands by identity)", M("p: f32[4]", """
        m1 = f32[4] negate(p)
        m2 = f32[4] negate(p)
        m = f32[4] multiply(m1, m2)
        ROOT s = f32[4] sqrt(m)""")),
    ("abs of sqrt stays", M("p: f32[4]", """
        s = f32[4] sqrt(p)
        ROOT a = f32[4] abs(s)""")),
    ("sqrt with two users is not turned into rsqrt", M("p: f32[4]; q: f32[4]", """
        s = f32[4] sqrt(q)
        d = f32[4] divide(p, s)
        ROOT a = f32[4] add(d, s)""")),
]


@pytest.mark.parametrize("what,text", NEGATIVE, ids=[n[0] for n in NEGATIVE])
def test_precondition_blocks_rewrite(what, text):
    module = parse(text)
    before = module_text(module)
    simp, changed = simplify_once(module)
    assert not changed, f"{what}: fired {dict(simp.stats)}"
    assert module_text(module) == before


def test_control_predecessors_block_rewrites():
    module = parse(M("p: f32[4]", """
        n1 = f32[4] negate(p)
        ROOT n2 = f32[4] negate(n1)"""))
    module.entry.root.control_predecessors.append(module.entry.get_instruction("p"))
    _, changed = simplify_once(module)
    assert not changed


def test_disabled_rule():
    module = parse(CASES[0][1])
    simp = AlgebraicSimplifier(disabled_rules=frozenset({"add_zero"}))
    assert not simp.run(module)


def test_metadata_moves_to_the_replacement():
    module = parse_module("""HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  c = f32[4] constant({2, 2, 2, 2})
  ROOT d = f32[4] divide(p, c), metadata={op_type="RealDiv" op_name="div"}
}""")
    simplify_once(module)
    simplify_once(module)
    assert module.entry.root.opcode.text == "multiply"
    assert module.entry.root.metadata.op_name == "div"


@pytest.mark.parametrize("rule,text,checks", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_fixed_point_is_idempotent(rule, text, checks):
    module = parse(text)
    args = random_args(module, seed=2)
    want = evaluate(module, *args)
    FixedPoint("simplification", [AlgebraicSimplifier(), HloDCE()]).run(module)
    assert not AlgebraicSimplifier().run(module), "a second run changed the module"
    assert_same_values(evaluate(module, *args), want, rtol=1e-6, atol=1e-6, context=rule)


def test_complex_sqrt_of_square_is_xlas_abs():
    """XLA's HandleSqrt turns a complex sqrt(A*A) into convert(abs(A)) too, though sqrt(z²) is ±z, not |z|
    (TF 2.21's optimised HLO for tf.sqrt(x * x) of c64 is ``abs`` then ``convert``: its values are |x|)."""
    module = parse(M("p: c64[4]", """
        m = c64[4] multiply(p, p)
        ROOT s = c64[4] sqrt(m)"""))
    simp, changed = simplify_once(module)
    assert changed and simp.stats["sqrt_of_square"] == 1
    filecheck(module_text(module), "CHECK: f32[4]{0} abs(%p)\nCHECK: ROOT {{.*}} c64[4]{0} convert(")
