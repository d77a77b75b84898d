"""Canonical HLO modules covering every opcode and attribute the printer knows.

Each text is exactly what ``module_to_string`` prints for it (checked by test_hlo_printer_parser), and
every instruction line was checked to be re-printed identically by XLA's own parser/printer (jax's
``hlo_module_from_text``), except the sign of ``-0`` constants, which XLA's lexer reads as an integer.
"""

ALL_OPS = r"""HloModule all_ops, entry_computation_layout={(f32[2,3]{1,0}, f32[3,4]{1,0}, f32[4]{0}, s32[], f32[1,4,4,2]{3,2,1,0}, /*index=5*/f32[3,3,2,3]{3,2,1,0}, s32[2,1]{1,0})->f32[2,4]{1,0}}

%add_f32 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

%ge_f32 (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=GE
}

%lt_sort (a.1: f32[], b.1: f32[], c.1: s32[], d: s32[]) -> pred[] {
  %a.1 = f32[] parameter(0)
  %b.1 = f32[] parameter(1)
  %c.1 = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %lt = pred[] compare(%a.1, %b.1), direction=LT, type=TOTALORDER
}

%cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(3)
  ROOT %lt.1 = pred[] compare(%i, %n), direction=LT
}

%body (t.1: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t.1 = (s32[], f32[4]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%t.1), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(%i.1, %one)
  %v = f32[4]{0} get-tuple-element(%t.1), index=1
  %v2 = f32[4]{0} add(%v, %v)
  ROOT %r = (s32[], f32[4]{0}) tuple(%i2, %v2)
}

%br0 (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n.1 = f32[4]{0} negate(%p)
}

%br1 (p.1: f32[4]) -> f32[4] {
  %p.1 = f32[4]{0} parameter(0)
  ROOT %n.2 = f32[4]{0} abs(%p.1)
}

%fused (p0: f32[4], p1: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  %p1 = f32[4]{0} parameter(1)
  ROOT %m = f32[4]{0} multiply(%p0, %p1)
}

ENTRY %main (a.2: f32[2,3], b.2: f32[3,4], v.1: f32[4], s: s32[], img: f32[1,4,4,2], ker: f32[3,3,2,3], idx: s32[2,1]) -> f32[2,4] {
  %a.2 = f32[2,3]{1,0} parameter(0), metadata={op_type="Placeholder" op_name="a" source_file="x.py" source_line=3}
  %b.2 = f32[3,4]{1,0} parameter(1)
  %v.1 = f32[4]{0} parameter(2)
  %s = s32[] parameter(3)
  %img = f32[1,4,4,2]{3,2,1,0} parameter(4)
  %ker = f32[3,3,2,3]{3,2,1,0} parameter(5)
  %idx = s32[2,1]{1,0} parameter(6)
  %dot = f32[2,4]{1,0} dot(%a.2, %b.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="MatMul" op_name="dense/MatMul"}
  %c3 = f32[2,2,3]{2,1,0} broadcast(%a.2), dimensions={1,2}
  %c4 = f32[2,3,2]{2,1,0} transpose(%c3), dimensions={0,2,1}
  %bdot = f32[2,2,2]{2,1,0} dot(%c3, %c4), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %bc = f32[2,4]{1,0} broadcast(%v.1), dimensions={1}
  %zero = f32[] constant(0)
  %bz = f32[2,4]{1,0} broadcast(%zero), dimensions={}
  %cmp = pred[2,4]{1,0} compare(%dot, %bz), direction=GT
  %sel = f32[2,4]{1,0} select(%cmp, %dot, %bz)
  %cl = f32[2,4]{1,0} clamp(%bz, %sel, %bc)
  %cv = s32[2,4]{1,0} convert(%cl)
  %bcv = s32[2,4]{1,0} bitcast-convert(%cl)
  %bit = f32[8]{0} bitcast(%cl)
  %cp = f32[2,4]{1,0} copy(%cl)
  %rs = f32[4,2]{1,0} reshape(%cp)
  %tr = f32[4,2]{0,1} transpose(%cp), dimensions={1,0}
  %sl = f32[1,2]{1,0} slice(%cp), slice={[0:1:1], [0:4:2]}
  %ds = f32[1,2]{1,0} dynamic-slice(%cp, %s, %s), dynamic_slice_sizes={1,2}
  %dus = f32[2,4]{1,0} dynamic-update-slice(%cp, %sl, %s, %s)
  %cat = f32[4,4]{1,0} concatenate(%cp, %dus), dimensions={0}
  %pd = f32[5,8]{1,0} pad(%cp, %zero), padding=1_2_0x0_1_1
  %rv = f32[2,4]{1,0} reverse(%cp), dimensions={0,1}
  %red = f32[2]{0} reduce(%cp, %zero), dimensions={1}, to_apply=%add_f32
  %rw = f32[2,2]{1,0} reduce-window(%cp, %zero), window={size=1x2 stride=1x2}, to_apply=%add_f32
  %rw2 = f32[2,4]{1,0} reduce-window(%cp, %zero), window={size=2x3 pad=0_1x1_1}, to_apply=%add_f32
  %sas = f32[2,4]{1,0} select-and-scatter(%cp, %rw, %zero), window={size=1x2 stride=1x2}, select=%ge_f32, scatter=%add_f32
  %conv = f32[1,4,4,3]{3,2,1,0} convolution(%img, %ker), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %conv2 = f32[1,2,2,3]{3,2,1,0} convolution(%img, %ker), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %g = f32[2,4]{1,0} gather(%cp, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
  %g2 = f32[2,4]{1,0} gather(%cp, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}, indices_are_sorted=true
  %sc = f32[2,4]{1,0} scatter(%cp, %idx, %g), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add_f32
  %iota = s32[2,4]{1,0} iota(), iota_dimension=1
  %srt = (f32[2,4]{1,0}, s32[2,4]{1,0}) sort(%cp, %iota), dimensions={1}, is_stable=true, to_apply=%lt_sort
  %gte = f32[2,4]{1,0} get-tuple-element(%srt), index=0
  %tk = (f32[2,2]{1,0}, s32[2,2]{1,0}) topk(%cp), k=2, largest=true
  %tk2 = (f32[2,3]{1,0}, s32[2,3]{1,0}) topk(%cp), k=3, largest=false
  %init = (s32[], f32[4]{0}) tuple(%s, %v.1)
  %wh = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body
  %call = f32[4]{0} call(%v.1), to_apply=%br0
  %pr = pred[] constant(true)
  %cnd = f32[4]{0} conditional(%pr, %v.1, %v.1), true_computation=%br0, false_computation=%br1
  %cnd2 = f32[4]{0} conditional(%s, %v.1, %v.1), branch_computations={%br0, %br1}
  %fu = f32[4]{0} fusion(%v.1, %v.1), kind=kLoop, calls=%fused
  %mp = f32[4]{0} map(%v.1, %v.1), dimensions={0}, to_apply=%add_f32
  %rp = f32[4]{0} reduce-precision(%v.1), exponent_bits=5, mantissa_bits=10
  %st = u64[2]{0} constant({1, 2})
  %rbg = (u64[2]{0}, u32[4]{0}) rng-bit-generator(%st), algorithm=rng_philox
  %rng = f32[4]{0} rng(%zero, %zero), distribution=rng_uniform
  %rgs = u64[2]{0} rng-get-and-update-state(), delta=4
  %cc = f32[4]{0} custom-call(%v.1), custom_call_target="foo", backend_config="bar"
  %atan = f32[4]{0} atan2(%v.1, %v.1)
  %sh = s32[] shift-right-logical(%s, %s)
  %cl0 = s32[] count-leading-zeros(%s)
  %pc = s32[] popcnt(%s)
  %fin = pred[4]{0} is-finite(%v.1)
  %er = f32[4]{0} erf(%v.1)
  %sdz = f32[2,4]{1,0} set-dimension-size(%cp, %s), dimensions={1}
  %cmplx = c64[4]{0} complex(%v.1, %v.1)
  %re = f32[4]{0} real(%cmplx)
  ROOT %out = f32[2,4]{1,0} add(%gte, %g)
}
"""

ATTRIBUTES = r"""HloModule b, is_scheduled=true, entry_computation_layout={(f32[2,4]{1,0}, s32[2,1]{1,0}, f32[4]{0}, s32[], f32[], /*index=5*/f32[], f32[])->f32[2,4]{1,0}}

%add_f32 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

%lt (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=LT
}

%add2 (a.1: f32[], b.1: f32[], c.1: f32[], d: f32[]) -> (f32[], f32[]) {
  %a.1 = f32[] parameter(0)
  %b.1 = f32[] parameter(1)
  %c.1 = f32[] parameter(2)
  %d = f32[] parameter(3)
  %x.1 = f32[] add(%a.1, %c.1)
  %y.1 = f32[] add(%b.1, %d)
  ROOT %t = (f32[], f32[]) tuple(%x.1, %y.1)
}

%wc (a.2: (f32[])) -> pred[] {
  %a.2 = (f32[]) parameter(0)
  ROOT %c.2 = pred[] constant(false)
}

%wc2 (a.3: (f32[])) -> (f32[]) {
  ROOT %a.3 = (f32[]) parameter(0)
}

%fused (p0: f32[4], p1: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  %p1 = f32[4]{0} parameter(1)
  ROOT %m = f32[4]{0} multiply(%p0, %p1)
}

ENTRY %main (a.4: f32[2,4], idx: s32[2,1], v: f32[4], s: s32[], p5: f32[], p6: f32[], p7: f32[]) -> f32[2,4] {
  %a.4 = f32[2,4]{1,0} parameter(0), parameter_replication={false}, metadata={op_name="XLA_Args"}
  %idx = s32[2,1]{1,0} parameter(1), sharding={replicated}
  %v = f32[4]{0} parameter(2)
  %s = s32[] parameter(3)
  %p5 = f32[] parameter(4)
  %p6 = f32[] parameter(5)
  %p7 = f32[] parameter(6)
  %t.1 = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[], f32[]) tuple(%p5, %p6, %p7, %p5, %p6, /*index=5*/%p7, %p5)
  %g = f32[2,4]{1,0} gather(%a.4, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
  %sc = f32[2,4]{1,0} scatter(%a.4, %idx, %g), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, indices_are_sorted=true, unique_indices=true, to_apply=%add_f32, metadata={op_name="x"}
  %dot = f32[2,2]{1,0} dot(%a.4, %a.4), lhs_contracting_dims={1}, rhs_contracting_dims={1}, operand_precision={highest,default}, frontend_attributes={grad_x="false",grad_y="false"}, metadata={op_type="MatMul" op_name="MatMul"}
  %cmpf = pred[4]{0} compare(%v, %v), direction=EQ
  %cmpt = pred[4]{0} compare(%v, %v), direction=NE, type=TOTALORDER
  %cmps = pred[] compare(%s, %s), direction=LE
  %fi = f32[4]{0} fusion(%v, %v), kind=kInput, calls=%fused, control-predecessors={%cmpf}
  %fo = f32[4]{0} fusion(%v, %v), kind=kOutput, calls=%fused, backend_config={"a":1}
  %srt = f32[4]{0} sort(%v), dimensions={0}, to_apply=%lt
  %cc = (f32[4]{0}) custom-call(%v), custom_call_target="TopK", api_version=API_VERSION_TYPED_FFI, called_computations={%add_f32}
  %st = u64[2]{0} constant({1, 2})
  %rbg = (u64[2]{0}, u32[4]{0}) rng-bit-generator(%st), algorithm=rng_default
  %red2 = (f32[2]{0}, f32[2]{0}) reduce(%a.4, %a.4, %p5, %p6), dimensions={1}, to_apply=%add2
  %nan = f32[3]{0} constant({nan, -inf, 1e+10})
  %tw = (f32[]) tuple(%p5)
  %wh = (f32[]) while(%tw), condition=%wc, body=%wc2, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %out = f32[2,4]{1,0} add(%sc, %a.4), sharding={replicated}
}
"""

GATHER_SCATTER_BATCHING = r"""HloModule g, entry_computation_layout={(f32[2,4,3]{2,1,0}, s32[2,1]{1,0}, f32[2,3]{1,0})->f32[2,2,2,2]{3,2,1,0}}

%add_f32 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

ENTRY %main (a: f32[2,4,3], idx: s32[2,1], u: f32[2,3]) -> f32[2,2,2,2] {
  %a = f32[2,4,3]{2,1,0} parameter(0)
  %idx = s32[2,1]{1,0} parameter(1)
  %x0 = f32[] constant(1)
  %x1 = f32[1,1]{1,0} constant({ {1} })
  %x2 = f32[2,2]{1,0} constant({ { 1, 2 }, { 3, 4 } })
  %u = f32[2,3]{1,0} parameter(2)
  %g = f32[2,3]{1,0} gather(%a, %idx), offset_dims={1}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1, slice_sizes={1,1,3}
  %s = f32[2,4,3]{2,1,0} scatter(%a, %idx, %u), update_window_dims={1}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=1, to_apply=%add_f32
  %rw = f32[] reduce-window(%x0, %x0), to_apply=%add_f32
  %c = f32[1,1]{1,0} convolution(%x1, %x1), dim_labels=bf_io->bf
  ROOT %d = f32[2,2,2,2]{3,2,1,0} dot(%x2, %x2), lhs_contracting_dims={}, rhs_contracting_dims={}
}
"""

ELEMENTWISE = r"""HloModule elementwise, entry_computation_layout={(f32[2,3]{1,0}, f32[2,3]{1,0}, s32[2,3]{1,0}, s32[2,3]{1,0}, pred[2,3]{1,0}, /*index=5*/c64[2,3]{1,0})->pred[2,3]{1,0}}

ENTRY %main (f: f32[2,3], g: f32[2,3], i: s32[2,3], j: s32[2,3], p: pred[2,3], c: c64[2,3]) -> pred[2,3] {
  %f = f32[2,3]{1,0} parameter(0)
  %g = f32[2,3]{1,0} parameter(1)
  %i = s32[2,3]{1,0} parameter(2)
  %j = s32[2,3]{1,0} parameter(3)
  %p = pred[2,3]{1,0} parameter(4)
  %c = c64[2,3]{1,0} parameter(5)
  %abs.f = f32[2,3]{1,0} abs(%f)
  %cbrt.f = f32[2,3]{1,0} cbrt(%f)
  %ceil.f = f32[2,3]{1,0} ceil(%f)
  %copy.f = f32[2,3]{1,0} copy(%f)
  %cosine.f = f32[2,3]{1,0} cosine(%f)
  %erf.f = f32[2,3]{1,0} erf(%f)
  %exponential.f = f32[2,3]{1,0} exponential(%f)
  %exponential-minus-one.f = f32[2,3]{1,0} exponential-minus-one(%f)
  %floor.f = f32[2,3]{1,0} floor(%f)
  %log.f = f32[2,3]{1,0} log(%f)
  %log-plus-one.f = f32[2,3]{1,0} log-plus-one(%f)
  %logistic.f = f32[2,3]{1,0} logistic(%f)
  %negate.f = f32[2,3]{1,0} negate(%f)
  %round-nearest-afz.f = f32[2,3]{1,0} round-nearest-afz(%f)
  %round-nearest-even.f = f32[2,3]{1,0} round-nearest-even(%f)
  %rsqrt.f = f32[2,3]{1,0} rsqrt(%f)
  %sign.f = f32[2,3]{1,0} sign(%f)
  %sine.f = f32[2,3]{1,0} sine(%f)
  %sqrt.f = f32[2,3]{1,0} sqrt(%f)
  %tan.f = f32[2,3]{1,0} tan(%f)
  %tanh.f = f32[2,3]{1,0} tanh(%f)
  %not.i = s32[2,3]{1,0} not(%i)
  %popcnt.i = s32[2,3]{1,0} popcnt(%i)
  %count-leading-zeros.i = s32[2,3]{1,0} count-leading-zeros(%i)
  %abs.i = s32[2,3]{1,0} abs(%i)
  %negate.i = s32[2,3]{1,0} negate(%i)
  %sign.i = s32[2,3]{1,0} sign(%i)
  %not.p = pred[2,3]{1,0} not(%p)
  %is-finite.f = pred[2,3]{1,0} is-finite(%f)
  %real.c = f32[2,3]{1,0} real(%c)
  %imag.c = f32[2,3]{1,0} imag(%c)
  %abs.c = f32[2,3]{1,0} abs(%c)
  %add.f = f32[2,3]{1,0} add(%f, %g)
  %add.i = s32[2,3]{1,0} add(%i, %j)
  %and.i = s32[2,3]{1,0} and(%i, %j)
  %and.p = pred[2,3]{1,0} and(%p, %p)
  %atan2.f = f32[2,3]{1,0} atan2(%f, %g)
  %divide.f = f32[2,3]{1,0} divide(%f, %g)
  %divide.i = s32[2,3]{1,0} divide(%i, %j)
  %maximum.f = f32[2,3]{1,0} maximum(%f, %g)
  %maximum.i = s32[2,3]{1,0} maximum(%i, %j)
  %minimum.f = f32[2,3]{1,0} minimum(%f, %g)
  %minimum.i = s32[2,3]{1,0} minimum(%i, %j)
  %multiply.f = f32[2,3]{1,0} multiply(%f, %g)
  %multiply.i = s32[2,3]{1,0} multiply(%i, %j)
  %or.i = s32[2,3]{1,0} or(%i, %j)
  %or.p = pred[2,3]{1,0} or(%p, %p)
  %power.f = f32[2,3]{1,0} power(%f, %g)
  %power.i = s32[2,3]{1,0} power(%i, %j)
  %remainder.f = f32[2,3]{1,0} remainder(%f, %g)
  %remainder.i = s32[2,3]{1,0} remainder(%i, %j)
  %shift-left.i = s32[2,3]{1,0} shift-left(%i, %j)
  %shift-right-arithmetic.i = s32[2,3]{1,0} shift-right-arithmetic(%i, %j)
  %shift-right-logical.i = s32[2,3]{1,0} shift-right-logical(%i, %j)
  %subtract.f = f32[2,3]{1,0} subtract(%f, %g)
  %subtract.i = s32[2,3]{1,0} subtract(%i, %j)
  %xor.i = s32[2,3]{1,0} xor(%i, %j)
  %xor.p = pred[2,3]{1,0} xor(%p, %p)
  %complex.f = c64[2,3]{1,0} complex(%f, %g)
  %cmp.eq = pred[2,3]{1,0} compare(%f, %g), direction=EQ
  %cmp.ne = pred[2,3]{1,0} compare(%f, %g), direction=NE
  %cmp.lt = pred[2,3]{1,0} compare(%f, %g), direction=LT
  %cmp.le = pred[2,3]{1,0} compare(%f, %g), direction=LE
  %cmp.gt = pred[2,3]{1,0} compare(%f, %g), direction=GT
  %cmp.ge = pred[2,3]{1,0} compare(%f, %g), direction=GE
  %cmp.total = pred[2,3]{1,0} compare(%f, %g), direction=LT, type=TOTALORDER
  %select = f32[2,3]{1,0} select(%p, %f, %g)
  %clamp = f32[2,3]{1,0} clamp(%f, %g, %f)
  %convert = s32[2,3]{1,0} convert(%f)
  %bitcast-convert = s32[2,3]{1,0} bitcast-convert(%f)
  %bitcast-convert.1 = u8[2,3,4]{2,1,0} bitcast-convert(%f)
  %reduce-precision = f32[2,3]{1,0} reduce-precision(%f), exponent_bits=8, mantissa_bits=7
  ROOT %and.q = pred[2,3]{1,0} and(%cmp.eq, %is-finite.f)
}
"""

LITERALS = r"""HloModule literals, entry_computation_layout={()->f32[]}

ENTRY %main () -> f32[] {
  %f32s = f32[12]{0} constant({0.1, 1e+10, inf, -inf, nan, -nan, 0.333333343, -0, 1.4013e-45, 3.40282347e+38, nan(0x1), -nan(0x7fffff)})
  %f64s = f64[6]{0} constant({0.1, 1e+100, 0.30000000000000004, 1e+22, 1.2345678901234568e+17, 4.94065645841247e-324})
  %f16s = f16[5]{0} constant({0.099976, 100, 65504, -inf, 5.9605e-08})
  %bf16s = bf16[5]{0} constant({0.1001, 9.999e+09, -0, 3.297, 1.175e-38})
  %cplx64 = c64[2]{0} constant({(1, 2), (0.5, -inf)})
  %cplx128 = c128[] constant((0.1, 1e+100))
  %preds = pred[2,2]{1,0} constant({ { 1, 0 }, { 0, 1 } })
  %pred0 = pred[] constant(false)
  %s8s = s8[2]{0} constant({-128, 127})
  %u64s = u64[2]{0} constant({18446744073709551615, 0})
  %s64s = s64[] constant(-9223372036854775808)
  %r3 = f32[2,3,1]{2,1,0} constant({ { {1}, {2}, {3} }, { {4}, {5}, {6} } })
  %r4 = f32[2,1,2,2]{3,2,1,0} constant({ { /*i0=0*/ { /*i1=0*/ { 1, 2 }, { 3, 4 } } }, { /*i0=1*/ { /*i1=0*/ { 5, 6 }, { 7, 8 } } } })
  %e0 = f32[0,3]{1,0} constant({  })
  %e1 = f32[0]{0} constant({})
  %e2 = f32[2,0]{1,0} constant({ {}, {} })
  %one = f32[1,1]{1,0} constant({ {1} })
  %tup = (f32[], s32[2]{0}) constant(( 1, {2, 3} ))
  ROOT %s = f32[] constant(3)
}
"""

WIDE_TUPLE = r"""HloModule big, entry_computation_layout={(f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[], f32[])->(f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[], f32[])}

ENTRY %main (p0: f32[], p1: f32[], p2: f32[], p3: f32[], p4: f32[], p5: f32[], p6: f32[]) -> (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[], f32[]) {
  %p0 = f32[] parameter(0)
  %p1 = f32[] parameter(1)
  %p2 = f32[] parameter(2)
  %p3 = f32[] parameter(3)
  %p4 = f32[] parameter(4)
  %p5 = f32[] parameter(5)
  %p6 = f32[] parameter(6)
  ROOT %t = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[], f32[]) tuple(%p0, %p1, %p2, %p3, %p4, /*index=5*/%p5, %p6)
}
"""

LAYOUTS = r"""HloModule layouts, entry_computation_layout={(f32[2,3]{0,1})->f32[3,2]{1,0}}

ENTRY %main (a: f32[2,3]) -> f32[3,2] {
  %a = f32[2,3]{0,1} parameter(0)
  %copy = f32[2,3]{1,0} copy(%a)
  %bitcast = f32[3,2]{0,1} bitcast(%copy)
  %transpose = f32[3,2]{1,0} transpose(%a), dimensions={1,0}
  %t3 = f32[2,1,3]{1,0,2} reshape(%copy)
  %b3 = f32[6]{0} bitcast(%a)
  ROOT %add = f32[3,2]{1,0} add(%bitcast, %transpose)
}
"""

METADATA = r"""HloModule c, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

ENTRY %main (v: f32[4]) -> f32[4] {
  %v = f32[4]{0} parameter(0)
  %n = f32[4]{0} negate(%v)
  ROOT %out = f32[4]{0} add(%v, %v), sharding={replicated}, frontend_attributes={k="v"}, control-predecessors={%n}, metadata={op_name="a"}, backend_config={"x":1}
}
"""

MISC = r"""HloModule misc, entry_computation_layout={(f32[2,3]{1,0})->(s32[], (f32[2,3]{1,0}), u32[], u32[])}

ENTRY %main (a: f32[2,3]) -> (s32[], (f32[2,3]), u32[], u32[]) {
  %a = f32[2,3]{1,0} parameter(0)
  %gds = s32[] get-dimension-size(%a), dimensions={1}
  %t = (f32[2,3]{1,0}) tuple(%a)
  %ob = (f32[2,3]{1,0}) opt-barrier(%t)
  %pid = u32[] partition-id()
  %rid = u32[] replica-id()
  %tok = token[] after-all()
  ROOT %r = (s32[], (f32[2,3]{1,0}), u32[], u32[]) tuple(%gds, %ob, %pid, %rid)
}
"""

MODULES = {name: text for name, text in globals().items() if name.isupper() and name != "MODULES"}
