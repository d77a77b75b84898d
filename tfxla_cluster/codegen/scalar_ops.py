"""Value-level semantics of HLO elementwise ops in LLVM IR (XLA's ElementalIrEmitter, scalar part).

Every function here takes register values and returns a register value; nothing reads memory. The
semantics are exactly those of the reference evaluator (``tfxla_cluster.hlo.eval_elementwise``):

- f16/bf16 arithmetic is done in f32 and rounded back (round-to-nearest-even) after each op;
- integers wrap; x/0 is -1 (signed) or all ones (unsigned), INT_MIN/-1 = INT_MIN, x%0 = x,
  INT_MIN%-1 = 0 — emitted without undefined behaviour (the divisor is made safe first);
- integer power uses the exponent's low 6 bits (XLA:CPU's emitter); with a negative exponent, XLA:CPU's emitter gives (-1)^y for x == -1 where its
  evaluator (constant folding, ours too) gives 0 — each side follows its XLA counterpart;
- shift amounts are unsigned; amounts >= the bit width give 0 (or the sign fill for arithmetic shift);
- maximum/minimum propagate NaN and otherwise follow std::max/min (max(-0, +0) is the lhs); with
  ``xla_cpu_enable_fast_min_max`` (XLA's default) they are XLA's fast form ``lhs >=u rhs ? lhs : rhs``
  (a NaN lhs is kept, a NaN rhs dropped — what TF's XLA computes), and min/max reductions drop NaNs;
- convert float→int saturates and maps NaN to 0; anything → f16/bf16 goes through f32;
- compare FLOAT is IEEE, TOTALORDER orders -NaN < -inf < … < -0 < +0 < … < inf < +NaN;
- complex (c64/c128) operands go to ``complex_ops`` (XLA's complex formulas on the parts).

Ordinary float arithmetic carries only the ``contract`` fast-math flag (XLA's AllowFPOpFusion=Fast)
unless ``xla_cpu_enable_fast_math`` is on. With ``fast_transcendentals`` f32 exp/log/tanh use inline
Cephes/Eigen approximations (a few ulp, like XLA:CPU's own) so loops containing them vectorise.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tfxla_cluster.codegen import complex_ops, irtypes as t
from tfxla_cluster.codegen.context import ModuleContext
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.attrs import ComparisonDirection as D
from tfxla_cluster.hlo.attrs import ComparisonType, default_comparison_type
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.shape import PrimitiveType as T

_HALF = (T.F16, T.BF16)

# xla.tanh.f64's polynomial coefficients (bit patterns, highest power first; both end in 1.0), as TF 2.21's
# XLA:CPU emits them.
_TANH_F64_P = (0x3B3F9F82E5D782DF, 0x3C2C3C836C04B4C8, 0x3CEC3379F905E662, 0x3D929AFF6C8EDD96, 0x3E2525A389DCE7C2,
               0x3EA708819BE51CD9, 0x3F18996F4026A7FA, 0x3F787F80B957ED00, 0x3FC36FBA9B450E5A)
_TANH_F64_Q = (0x3BBE8630CF903250, 0x3C90AABCA9A5FEA0, 0x3D4232981AA2BBA8, 0x3DDEE2F015EA8065, 0x3E681F1947C52304,
               0x3EE26C82AB46D140, 0x3F4B2E7C4D488C04, 0x3FA1998830265B50, 0x3FDF0D32A2F7DC79)


def _f64_bits(bits: int) -> float:
    return float(np.array(bits, np.uint64).view(np.float64))


class ScalarOps:
    """Emits scalar HLO operations with one builder into one module."""

    def __init__(self, b: ir.IRBuilder, mctx: ModuleContext) -> None:
        self.b = b
        self.mctx = mctx
        self.flags = mctx.options.float_flags
        # Whether a vector llvm.ldexp is one instruction for the target (AVX-512's vscalefps); elsewhere it
        # is a libm call per element, so exp builds 2^n from bits. The target, not the host: code compiled
        # for an AVX2 CPU must not depend on what this machine has.
        self.scalef = mctx.options.cpu_target.info.scalef
        info = mctx.options.cpu_target.info
        # XLA's f32 rsqrt is the SSE/AVX estimate refined by two Newton steps where the target has AVX
        # (xla/codegen/intrinsic/rsqrt.cc), 1/sqrt(x) elsewhere; its steps are contracted to FMA.
        self.rsqrt_estimate = info.isa in ("AVX", "AVX2", "AVX-512")
        self.rsqrt14 = info.isa == "AVX-512"   # f64: AVX-512's rsqrt14 estimate, the same two steps
        # XLA takes a target with SSE4a for AMD, whose SSE/AVX estimate is more accurate: one Newton step
        # there for f32 (rsqrtss), two for AVX-512's rsqrt14 (f64).
        self.rsqrt_f32_steps = 1 if "+sse4a" in mctx.options.cpu_target.features.split(",") else 2
        self.has_fma = info.fma
        self.fp16 = info.fp16   # half FMAs (LLVM contracts f16 only where f16 arithmetic is native)

    # ---------------------------------------------------------------- float compute type
    def to_compute(self, et: T, v: ir.Value) -> ir.Value:
        """f16/bf16 register value → f32; other types unchanged."""
        b = self.b
        if et is T.F16:
            return b.fpext(v, t.F32)
        if et is T.BF16:
            return b.bitcast(b.shl(b.zext(v, t.I32), ir.Constant(t.I32, 16)), t.F32)
        return v

    def from_compute(self, et: T, v: ir.Value) -> ir.Value:
        """f32 → f16/bf16 with round-to-nearest-even; other types unchanged."""
        b = self.b
        if et is T.F16:
            return b.fptrunc(v, t.F16)
        if et is T.BF16:
            bits = b.bitcast(v, t.I32)
            lsb = b.and_(b.lshr(bits, ir.Constant(t.I32, 16)), ir.Constant(t.I32, 1))
            rounded = b.lshr(b.add(bits, b.add(ir.Constant(t.I32, 0x7FFF), lsb)), ir.Constant(t.I32, 16))
            quiet = b.or_(b.lshr(bits, ir.Constant(t.I32, 16)), ir.Constant(t.I32, 0x40))
            isnan = b.fcmp_unordered("uno", v, v)
            return b.trunc(b.select(isnan, quiet, rounded), t.I16)
        return v

    def fconst(self, ty: ir.Type, value: float) -> ir.Constant:
        return t.float_constant(ty, value)

    # ---------------------------------------------------------------- float helpers
    def fadd(self, a, c):
        return self.b.fadd(a, c, flags=self.flags)

    def fsub(self, a, c):
        return self.b.fsub(a, c, flags=self.flags)

    def fmul(self, a, c):
        return self.b.fmul(a, c, flags=self.flags)

    def fdiv(self, a, c):
        return self.b.fdiv(a, c, flags=self.flags)

    def call_intrinsic(self, base: str, *args, ret=None):
        fn = self.mctx.intrinsic(base, args[0].type, len(args), ret)
        return self.b.call(fn, list(args))

    def call_libm(self, name: str, *args):
        ty = args[0].type
        fname = name + ("f" if isinstance(ty, ir.FloatType) else "")
        return self.b.call(self.mctx.function(fname, ty, [ty] * len(args)), list(args))

    def rsqrt(self, x):
        """XLA:CPU's rsqrt: for f32 on an AVX target the hardware estimate (rsqrtss: the same table as the
        8-wide rsqrtps XLA's loops use) refined by two Newton steps, h = (x*y)*y - 1, y = (-y/2)*h + y; the
        estimate itself below the smallest normal and at +inf. f64 the same from AVX-512's rsqrt14 (TF's XLA
        on an AVX-512 CPU, bit-equal); other targets: 1/sqrt(x). One f32 step on AMD targets (XLA's rule)."""
        b = self.b
        ty = x.type
        i0 = ir.Constant(t.I32, 0)
        if ty == t.F32 and self.rsqrt_estimate:
            v4 = ir.VectorType(t.F32, 4)
            est = self.mctx.function("llvm.x86.sse.rsqrt.ss", v4, [v4])
            guess = b.extract_element(b.call(est, [b.insert_element(ir.Constant(v4, ir.Undefined), x, i0)]), i0)
        elif ty == t.F64 and self.rsqrt14:
            v2 = ir.VectorType(t.F64, 2)
            est = self.mctx.function("llvm.x86.avx512.rsqrt14.pd.128", v2, [v2, v2, t.I8])
            arg = b.insert_element(ir.Constant(v2, ir.Undefined), x, i0)
            guess = b.extract_element(b.call(est, [arg, ir.Constant(v2, [0.0, 0.0]), ir.Constant(t.I8, -1)]), i0)
        else:
            return b.fdiv(self.fconst(ty, 1.0), self.call_intrinsic("sqrt", x))

        def pmadd(a, c, d):
            return self.call_intrinsic("fma", a, c, d) if self.has_fma else b.fadd(b.fmul(a, c), d)
        y = guess
        for _ in range(self.rsqrt_f32_steps if ty == t.F32 else 2):
            h = pmadd(b.fmul(x, y), y, self.fconst(ty, -1.0))
            y = pmadd(b.fmul(y, self.fconst(ty, -0.5)), h, y)
        tiny = float(np.finfo(np.float32 if ty == t.F32 else np.float64).tiny)
        tiny = b.fcmp_ordered("<", x, self.fconst(ty, tiny))
        inf = b.fcmp_ordered("==", x, self.fconst(ty, float("inf")))
        return b.select(b.or_(tiny, inf), guess, y)

    def isnan(self, v):
        return self.b.fcmp_unordered("uno", v, v)

    def fabs(self, v):
        return self.call_intrinsic("fabs", v)

    def clamp_keep_nan(self, v, lo: float, hi: float):
        b, ty = self.b, v.type
        v = b.select(b.fcmp_ordered("<", v, self.fconst(ty, lo)), self.fconst(ty, lo), v)
        return b.select(b.fcmp_ordered(">", v, self.fconst(ty, hi)), self.fconst(ty, hi), v)

    def poly(self, x, coeffs):
        """Horner: coeffs[0]*x^(n-1) + ... + coeffs[-1]."""
        acc = self.fconst(x.type, coeffs[0])
        for c in coeffs[1:]:
            acc = self.fadd(self.fmul(acc, x), self.fconst(x.type, c))
        return acc

    def fast(self, x) -> bool:
        """Whether f32 ``x`` takes the inline approximation; the function it lands in is then marked for
        the target's full vector width (``ModuleContext.wide_vector_bits``)."""
        fast = self.mctx.options.fast_transcendentals and isinstance(x.type, ir.FloatType)
        if fast and self.b.block is not None:
            self.mctx.mark_wide(self.b.block.function)
        return fast

    # ---------------------------------------------------------------- transcendentals
    def exp(self, x):
        if isinstance(x.type, ir.DoubleType):
            return self._exp_f64(x)
        if not self.fast(x):
            return self.call_intrinsic("exp", x)
        # Cephes expf: exp(x) = 2^n * exp(r), r = x - n*ln2 in [-ln2/2, ln2/2]; 2^n built in two halves
        # so results in the denormal range are right too.
        b, ty = self.b, x.type
        xc = self.clamp_keep_nan(x, -104.0, 88.8)
        n = self.call_intrinsic("floor", self.fadd(self.fmul(xc, self.fconst(ty, 1.44269504088896341)),
                                                   self.fconst(ty, 0.5)))
        # XLA's exp caps n at 127 (2^n stays finite): above x ~ 88.38, r leaves [-ln2/2, ln2/2] and the
        # polynomial's error reaches XLA's few ulps there (measured against TF's XLA).
        n = b.select(b.fcmp_ordered(">", n, self.fconst(ty, 127.0)), self.fconst(ty, 127.0), n)
        r = self.fsub(self.fsub(xc, self.fmul(n, self.fconst(ty, 0.693359375))),
                      self.fmul(n, self.fconst(ty, -2.12194440e-4)))
        z = self.fmul(r, r)
        p = self.poly(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                          1.6666665459e-1, 5.0000001201e-1])
        p = self.fadd(self.fadd(self.fmul(p, z), r), self.fconst(ty, 1.0))
        ni = b.fptosi(b.select(self.isnan(n), self.fconst(ty, 0.0), n), t.I32)
        if self.scalef and isinstance(ty, ir.FloatType):
            # p * 2^n in one correctly rounded step (AVX-512's vscalefps), subnormal results included.
            res = b.call(self.mctx.function("llvm.ldexp.f32.i32", ty, [ty, t.I32]), [p, ni])
        else:
            n1 = b.ashr(ni, ir.Constant(t.I32, 1))
            n2 = b.sub(ni, n1)

            def pow2(k):
                return b.bitcast(b.shl(b.add(k, ir.Constant(t.I32, 127)), ir.Constant(t.I32, 23)), ty)
            res = b.fmul(b.fmul(p, pow2(n1)), pow2(n2))
        res = b.select(b.fcmp_ordered(">", x, self.fconst(ty, 88.72283935546875)), self.fconst(ty, np.inf), res)
        res = b.select(b.fcmp_ordered("<", x, self.fconst(ty, -103.972084045410)), self.fconst(ty, 0.0), res)
        return b.select(self.isnan(x), x, res)

    def _exp_f64(self, x):
        """XLA:CPU's ``xla.exp.f64`` (its f64 exp everywhere, never libm's; Eigen's pexp_double): x clamped
        to [-708.396…, 709.782…], n = floor(x·log2(e) + 1/2), g = x - n·C1 - n·C2 (ln 2 in two parts), exp(g) =
        1 + 2·P(g)/(Q(g²) - P(g)) with P(g) = g·P'(g²), then scaled by 2^n in four exact steps and one
        rounding (Eigen's ldexp; FTZ flushes what falls below the normals). Below the clamp 0, above +inf.
        The fmul/fadd pairs XLA's backend contracts are explicit FMAs here."""
        b, ty = self.b, x.type
        if self.mctx.options.fast_transcendentals and b.block is not None:
            self.mctx.mark_wide(b.block.function)   # compute-bound: the full vector width
        c = lambda v: self.fconst(ty, v)  # noqa: E731
        lo, hi = c(-708.3964185322641), c(709.782712893384)
        # llvm.minimum/maximum: NaN propagates.
        xc = self.call_intrinsic("minimum", x, hi)
        xc = self.call_intrinsic("maximum", xc, lo)
        n = self.call_intrinsic("floor", self.mul_add(xc, c(1.4426950408889634073599), c(0.5)))
        g = self.mul_add(b.fneg(n), c(0.693145751953125), xc)
        g = self.mul_add(b.fneg(n), c(1.42860682030941723212e-6), g)
        g2 = b.fmul(g, g)
        p = self.mul_add(c(1.26177193074810590878e-4), g2, c(3.02994407707441961300e-2))
        p = self.mul_add(p, g2, c(9.99999999999999999910e-1))
        p = b.fmul(p, g)
        q = self.mul_add(c(3.00198505138664455042e-6), g2, c(2.52448340349684104192e-3))
        q = self.mul_add(q, g2, c(2.27265548208155028766e-1))
        q = self.mul_add(q, g2, c(2.00000000000000000009e0))
        e = self.mul_add(b.fdiv(p, b.fsub(q, p)), c(2.0), c(1.0))
        # 2^n: n clamped to ±2099, then (e·2^k·2^k·2^k)·2^(n-3k) with k = floor(n/4) (each step exact
        # unless the last one leaves the normals).
        i64 = lambda v: ir.Constant(t.I64, v)  # noqa: E731
        ni = b.fptosi(b.select(self.isnan(n), c(0.0), n), t.I64)
        ni = b.select(b.icmp_signed(">", ni, i64(-2099)), ni, i64(-2099))
        ni = b.select(b.icmp_signed("<", ni, i64(2099)), ni, i64(2099))
        k = b.ashr(ni, i64(2))
        pow2 = lambda m: b.bitcast(b.shl(b.add(m, i64(1023)), i64(52)), ty)  # noqa: E731
        s2 = pow2(k)
        r = b.fmul(b.fmul(b.fmul(e, s2), s2), s2)
        r = b.fmul(r, pow2(b.sub(ni, b.mul(i64(3), k))))
        r = b.select(b.fcmp_ordered("<", x, lo), c(0.0), r)
        return b.select(b.fcmp_ordered(">", x, hi), c(np.inf), r)

    def log(self, x):
        if not self.fast(x):
            # XLA:CPU's libm log (LLVM libc's, not glibc's) tests x == 0 as a float compare first: under
            # DAZ a ±denormal compares equal, so it is -inf (glibc's integer test would normalize it into
            # a finite garbage value, or NaN for a negative one); x < 0 is a positive quiet NaN (glibc: -NaN).
            b, ty = self.b, x.type
            res = b.select(b.fcmp_ordered("<", x, self.fconst(ty, 0.0)), self.fconst(ty, np.nan),
                           self.call_intrinsic("log", x))
            return b.select(b.fcmp_ordered("==", x, self.fconst(ty, 0.0)), self.fconst(ty, -np.inf), res)
        return self._log_f32(x)

    def mul_add(self, a, c, d):
        """a*c + d as XLA:CPU's backend computes an fmul feeding an fadd: one FMA where the target has FMA
        (LLVM contracts them with AllowFPOpFusion=Fast), two roundings elsewhere. Emitted as llvm.fma so
        the rounding does not depend on which operand order LLVM's passes leave."""
        if self.fp16 if isinstance(a.type, ir.HalfType) else self.has_fma:
            return self.call_intrinsic("fma", a, c, d)
        return self.b.fadd(self.b.fmul(a, c), d)

    def _log_f32(self, x):
        """XLA:CPU's f32 log (its runtime rewrite of llvm.log.f32, Eigen's plog: Cephes' polynomial split in
        three parts of x³): x = m·2^e with m in [sqrt(1/2), sqrt(2)), then m-1 + P(m-1) + e·ln2 in two
        parts. Inputs below the smallest normal are read as it (DAZ makes a denormal compare equal to 0:
        -inf), x <= 0 or NaN gives an all-ones NaN, 0 gives -inf and +inf gives +inf, as XLA's masks do."""
        b, ty = self.b, x.type
        i32 = lambda v: ir.Constant(t.I32, v)  # noqa: E731
        c = lambda v: self.fconst(ty, v)  # noqa: E731
        one = c(1.0)
        m = b.select(b.fcmp_unordered(">=", c(1.17549435082228751e-38), x), c(1.17549435082228751e-38), x)
        bits = b.bitcast(m, t.I32)
        e = b.fadd(one, b.sitofp(b.sub(b.lshr(bits, i32(23)), i32(0x7F)), ty))
        m = b.bitcast(b.or_(b.and_(bits, i32(~0x7F800000)), i32(0x3F000000)), ty)  # in [0.5, 1)
        small = b.fcmp_ordered("<", m, c(0.707106781186547524))
        # (m - 1) + (m or 0) and e - (1 or 0): both exact, in XLA's order.
        xm = b.fadd(b.fsub(m, one), b.select(small, m, c(0.0)))
        e = b.fsub(e, b.select(small, one, c(0.0)))
        x2 = b.fmul(xm, xm)
        x3 = b.fmul(x2, xm)
        y = self.mul_add(xm, c(7.0376836292e-2), c(-1.1514610310e-1))
        y1 = self.mul_add(xm, c(-1.2420140846e-1), c(1.4249322787e-1))
        y2 = self.mul_add(xm, c(2.0000714765e-1), c(-2.4999993993e-1))
        y = self.mul_add(y, xm, c(1.1676998740e-1))
        y1 = self.mul_add(y1, xm, c(-1.6668057665e-1))
        y2 = self.mul_add(y2, xm, c(3.3333331174e-1))
        y = self.mul_add(y, x3, y1)
        y = self.mul_add(y, x3, y2)
        # (y·x3) + (q1·e): LLVM's DAG fuses the first product (the fadd's lhs), the second is rounded.
        y = self.mul_add(y, x3, b.fmul(c(-2.12194440e-4), e))
        r = self.mul_add(c(-0.5), x2, xm)
        r = b.fadd(r, y)
        r = self.mul_add(c(0.693359375), e, r)
        nan = b.bitcast(i32(-1), ty)
        r = b.select(b.fcmp_unordered("<=", x, c(0.0)), nan, r)
        r = b.select(b.fcmp_ordered("==", x, c(np.inf)), c(np.inf), r)
        return b.select(b.fcmp_ordered("==", x, c(0.0)), c(-np.inf), r)

    # XLA's log1p rational approximation (Cephes) for |x| < sqrt(2) - 1, highest degree first.
    _LOG1P_NUM = (4.5270000862445199635215E-5, 4.9854102823193375972212E-1, 6.5787325942061044846969E0,
                  2.9911919328553073277375E1, 6.0949667980987787057556E1, 5.7112963590585538103336E1,
                  2.0039553499201281259648E1)
    _LOG1P_DEN = (1.0, 1.5062909083469192043167E1, 8.3047565967967209469434E1, 2.2176239823732856465394E2,
                  3.0909872225312059774938E2, 2.1642788614495947685003E2, 6.0118660497603843919306E1)

    def in_f32(self, fn, x):
        """``fn`` of a half ``x`` computed in f32 and rounded back (what XLA:CPU does for the f16 exp, log
        and tanh inside its f16 formulas); other types as they are."""
        if isinstance(x.type, ir.HalfType):
            return self.b.fptrunc(fn(self.b.fpext(x, t.F32)), t.F16)
        return fn(x)

    def log1p(self, x, paired: bool = False):
        """XLA's log1p intrinsic: x + (-x²/2 + x³·P(x)/Q(x)) for |x| < sqrt(2) - 1 (Cephes' rational
        approximation, each Horner step an FMA), else log(x + 1) with XLA's log (self.log). f64 too (up to
        ~100 ulps from libm's near |x| = 0.41, as TF's XLA); f16 in half arithmetic (XLA:CPU keeps f16 ops in
        f16: each step rounds to f16), its log in f32. Under DAZ a ±denormal x gives ±0 (libm's log1p would
        return x itself).

        XLA's backend contracts the sum's -x²/2 product into an FMA; ``paired`` (log1p(x) and log1p(-x) in
        one loop, as atanh has them) is where LLVM has merged the two -x²/2 products: with two uses it is
        rounded and the x³·ratio product is fused instead."""
        b, ty = self.b, x.type
        x2 = b.fmul(x, x)
        num = den = self.fconst(ty, 0.0)
        for cn, cd in zip(self._LOG1P_NUM, self._LOG1P_DEN):
            num = self.mul_add(num, x, self.fconst(ty, cn))
            den = self.mul_add(den, x, self.fconst(ty, cd))
        x3, ratio = b.fmul(x, x2), b.fdiv(num, den)
        if paired and not isinstance(ty, ir.HalfType):
            small = b.fadd(x, self.mul_add(x3, ratio, b.fmul(x2, self.fconst(ty, -0.5))))
        else:
            small = b.fadd(x, self.mul_add(self.fconst(ty, -0.5), x2, b.fmul(x3, ratio)))
        large = self.in_f32(self.log, b.fadd(x, self.fconst(ty, 1.0)))
        is_small = b.fcmp_ordered("<", self.fabs(x), self.fconst(ty, 0.41421356237309504880))
        return b.select(is_small, small, large)

    def log1p_paired(self, et: T, x):
        """LOG1P of ``x`` where its loop also takes log1p of -x (see :meth:`log1p`)."""
        return _f16_native(lambda s, v: s.log1p(v, paired=True))(self, et, x)

    def expm1(self, x):
        """XLA's ElementalIrEmitter::EmitExpm1: exp(x) - 1 for |x| > 1/2, else tanh(x/2) * (exp(x) + 1) with
        XLA's own tanh and exp (self.tanh/self.exp); x itself where x/2 compares equal to 0 (±0, a ±denormal
        under DAZ, bits unchanged). f16 in half arithmetic, its exp and tanh in f32."""
        b, ty = self.b, x.type
        half = self.fconst(ty, 0.5)
        one = self.fconst(ty, 1.0)
        x2 = b.fmul(x, half)
        e = self.in_f32(self.exp, x)
        small = b.fmul(self.in_f32(self.tanh, x2), b.fadd(e, one))
        large = b.fcmp_ordered(">", self.fabs(x), half)
        res = b.select(large, b.fsub(e, one), small)
        return b.select(b.fcmp_ordered("==", x2, self.fconst(ty, 0.0)), x, res)

    # XLA's f32 erf (Eigen's rational interpolant): odd numerator, even denominator in x², lowest first.
    _ERF_ALPHA = (1.128379143519084, 0.18520832239976145, 0.050955695062380861, 0.0034082910107109506,
                  0.00022905065861350646)
    _ERF_BETA = (1.0, 0.49746925110067538, 0.11098505178285362, 0.014070470171167667, 0.0010179625278914885,
                 0.000023547966471313185, -1.1791602954361697e-7)

    def erf(self, x):
        """XLA:CPU's f32 erf intrinsic: x·P(x²)/Q(x²) with every Horner step an explicit FMA (llvm.fma, on any
        target), ±1 from |x| >= 3.8325 (erf⁻¹(1 - ulp/2)). f16/bf16 reach it in f32; f64 erf is lowered to
        other ops by tf2xla; any other f64 erf goes to libm."""
        if not isinstance(x.type, ir.FloatType):
            return self.call_libm("erf", x)
        self.fast(x)  # a compute-bound polynomial: the loop gets the full vector width
        b, ty = self.b, x.type
        c = lambda v: self.fconst(ty, v)  # noqa: E731
        fma = lambda a, m, d: self.call_intrinsic("fma", a, m, d)  # noqa: E731
        x2 = b.fmul(x, x)
        alpha, beta = self._ERF_ALPHA[::-1], self._ERF_BETA[::-1]
        p = fma(x2, c(alpha[0]), c(alpha[1]))
        for a in alpha[2:]:
            p = fma(x2, p, c(a))
        q = fma(x2, c(beta[0]), c(beta[1]))
        for a in beta[2:]:
            q = fma(x2, q, c(a))
        r = b.fdiv(b.fmul(x, p), q)
        clamp = b.fcmp_ordered("<=", c(3.832506856900711), self.fabs(x))
        return b.select(clamp, self.call_intrinsic("copysign", c(1.0), x), r)

    def tanh(self, x):
        if isinstance(x.type, ir.DoubleType):
            return self._tanh_f64(x)
        if not self.fast(x):
            return self.call_libm("tanh", x)
        # Eigen's (and XLA:CPU's EmitFastTanh) rational tanh approximation, the input clamped where the
        # approximation is exactly ±1 — a different point when LLVM contracts it into FMAs.
        b, ty = self.b, x.type
        clamp = 7.99881172180175781 if self.mctx.options.cpu_target.info.fma else 7.90531110763549805
        xc = self.clamp_keep_nan(x, -clamp, clamp)
        x2 = self.fmul(xc, xc)
        p = self.fmul(xc, self.poly(x2, [-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                         5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                         4.89352455891786e-03]))
        q = self.poly(x2, [1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                           4.89352518554385e-03])
        res = b.fdiv(p, q)
        # At the clamp XLA's approximation is exactly ±1 when contracted as XLA:CPU's LLVM does; ours is
        # made so whatever LLVM contracts here (saturated inputs give ±1, as TF's XLA).
        sat = b.fcmp_ordered(">=", self.fabs(x), self.fconst(ty, clamp))
        res = b.select(sat, self.call_intrinsic("copysign", self.fconst(ty, 1.0), x), res)
        small = b.fcmp_ordered("<", self.fabs(x), self.fconst(ty, 0.0004))
        return b.select(small, x, res)

    def _tanh_f64(self, x):
        """XLA:CPU's ``xla.tanh.f64`` (its f64 tanh everywhere, never libm's): x·P(x²)/Q(x²) on x clamped to
        ±17.714…, two degree-9 Horner polynomials (contracted into FMAs like XLA's, whose backend fuses with
        AllowFPOpFusion=Fast), and ±1 where |x| >= 20. libm's tanh differs by an ulp, which 1 + tanh(x)
        (gelu_tanh) turns into thousands."""
        b, ty = self.b, x.type
        clamp = _f64_bits(0x4031B6D58F246197)
        xc = self.clamp_keep_nan(x, -clamp, clamp)
        x2 = self.fmul(xc, xc)
        p = self.fmul(xc, self.poly(x2, [_f64_bits(c) for c in _TANH_F64_P] + [1.0]))
        q = self.poly(x2, [_f64_bits(c) for c in _TANH_F64_Q] + [1.0])
        res = b.fdiv(p, q)
        sat = b.fcmp_ordered(">=", self.fabs(x), self.fconst(ty, 20.0))
        return b.select(sat, self.call_intrinsic("copysign", self.fconst(ty, 1.0), x), res)

    # ---------------------------------------------------------------- generic entry points
    def unary(self, op: O, et: T, x: ir.Value) -> ir.Value:
        if et.is_complex:
            return complex_ops.unary(self, op, et, x)
        fn = UNARY.get(op)
        if fn is None:
            raise UnimplementedError(f"native code for {op.text} is not implemented")
        return fn(self, et, x)

    def binary(self, op: O, et: T, a: ir.Value, c: ir.Value) -> ir.Value:
        if et.is_complex:
            return complex_ops.binary(self, op, et, a, c)
        fn = BINARY.get(op)
        if fn is None:
            raise UnimplementedError(f"native code for {op.text} is not implemented")
        return fn(self, et, a, c)

    def is_nonzero(self, et: T, v):
        b = self.b
        if et is T.PRED:
            return v
        if et.is_float:
            v = self.to_compute(et, v)
            return b.fcmp_unordered("!=", v, self.fconst(v.type, 0.0))
        return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))

    def compare(self, direction: D, ctype: ComparisonType | None, et: T, a, c):
        b = self.b
        if et.is_complex:
            return complex_ops.compare(self, direction, et, a, c)
        ctype = ctype or default_comparison_type(et)
        sym = _CMP[direction]
        if et.is_float and ctype is ComparisonType.TOTALORDER:
            a, c = self._total_order_key(et, a), self._total_order_key(et, c)
            return b.icmp_signed(sym, a, c)
        if et.is_float:
            a, c = self.to_compute(et, a), self.to_compute(et, c)
            return b.fcmp_unordered(sym, a, c) if direction is D.NE else b.fcmp_ordered(sym, a, c)
        if et is T.PRED:
            return b.icmp_unsigned(sym, a, c)
        if ctype is ComparisonType.SIGNED:
            return b.icmp_signed(sym, a, c)
        return b.icmp_unsigned(sym, a, c)

    def _total_order_key(self, et: T, v):
        b = self.b
        width = et.bit_width
        ity = ir.IntType(width)
        s = v if et is T.BF16 else b.bitcast(v, ity)
        mask = b.and_(b.ashr(s, ir.Constant(ity, width - 1)), ir.Constant(ity, (1 << (width - 1)) - 1))
        return b.xor(s, mask)

    def select(self, p, a, c):
        return self.b.select(p, a, c)

    def clamp(self, et: T, lo, x, hi, lo_first: bool = True):
        """``lo_first``: XLA:CPU's min(max(lo, x), hi) (its emitters' decomposition), else
        min(max(x, lo), hi) — MLIR's canonicalization moves a constant ``lo`` fused in as a broadcast
        to the right of the commutative max."""
        if et.is_float:
            xl = self.to_compute(et, lo)
            xx = self.to_compute(et, x)
            xh = self.to_compute(et, hi)
            b = self.b
            if self.mctx.options.fast_min_max:
                # Fast min/max (select(fcmp uge/ule)) returns its lhs on ties and on any NaN: with lo
                # first, clamp(0, -0, 6) is +0 and clamp(0, NaN, 6) is 0; with x first, -0 and NaN.
                r = _fmax(self, xl, xx) if lo_first else _fmax(self, xx, xl)
                return self.from_compute(et, _fmin(self, r, xh))
            # numpy's maximum/minimum (the evaluator's) return the second operand on ties (±0).
            r = b.select(b.fcmp_ordered(">", xx, xl), xx, xl)
            r = b.select(b.fcmp_ordered("<", xh, r), xh, r)
            # NaN priority: low, then operand, then high (HandleClamp).
            r = self.b.select(self.isnan(xh), xh, r)
            r = self.b.select(self.isnan(xx), xx, r)
            r = self.b.select(self.isnan(xl), xl, r)
            return self.from_compute(et, r)
        return _int_min(self, et, _int_max(self, et, x, lo), hi)

    # ---------------------------------------------------------------- conversions
    def convert(self, src: T, dst: T, v):
        b = self.b
        if src is dst:
            return v
        if src.is_complex or dst.is_complex:
            return complex_ops.convert(self, src, dst, v)
        if dst is T.PRED:
            return self.is_nonzero(src, v)
        if src is T.PRED:
            if dst.is_float:
                f = b.uitofp(v, t.F32)
                return self._float_from_f32(dst, f)
            return b.zext(v, t.value_type(dst))
        if src.is_float and dst.is_float:
            f = self.to_compute(src, v)
            if dst is T.F64:
                return b.fpext(f, t.F64) if f.type != t.F64 else f
            if f.type == t.F64:  # f64 -> f32 first (f16/bf16 are reached through f32, as in XLA)
                f = b.fptrunc(f, t.F32)
            return self._float_from_f32(dst, f)
        if src.is_integral and dst.is_float:
            if dst is T.F64:
                return b.sitofp(v, t.F64) if src.is_signed_int else b.uitofp(v, t.F64)
            f = b.sitofp(v, t.F32) if src.is_signed_int else b.uitofp(v, t.F32)
            return self._float_from_f32(dst, f)
        if src.is_integral and dst.is_integral:
            sw, dw = src.bit_width, dst.bit_width
            ty = t.value_type(dst)
            if sw == dw:
                return v
            if sw > dw:
                return b.trunc(v, ty)
            return b.sext(v, ty) if src.is_signed_int else b.zext(v, ty)
        if src.is_float and dst.is_integral:
            return self._float_to_int(src, dst, v)
        raise UnimplementedError(f"native convert from {src.value} to {dst.value} is not implemented")

    def _float_from_f32(self, dst: T, f):
        if dst is T.F32:
            return f
        if dst is T.F64:
            return self.b.fpext(f, t.F64)
        return self.from_compute(dst, f)

    def _float_to_int(self, src: T, dst: T, v):
        b = self.b
        y = self.to_compute(src, v)
        info = np.iinfo(dst.dtype)
        # The bounds as the source type rounds them (static_cast<NativeSrcT>(max) in literal.cc).
        hi = float(np.asarray(info.max).astype(src.dtype))
        lo = float(np.asarray(info.min).astype(src.dtype))
        ty = t.value_type(dst)
        hic, loc = self.fconst(y.type, hi), self.fconst(y.type, lo)
        inside = b.and_(b.fcmp_ordered(">", y, loc), b.fcmp_ordered("<", y, hic))
        safe = b.select(inside, y, self.fconst(y.type, 0.0))
        tr = b.fptosi(safe, ty) if dst.is_signed_int else b.fptoui(safe, ty)
        tr = b.select(b.fcmp_ordered(">=", y, hic), t.int_constant(dst, int(info.max)), tr)
        return b.select(b.fcmp_ordered("<=", y, loc), t.int_constant(dst, int(info.min)), tr)

    def flush_denormal(self, et: T, v):
        """A ±denormal register value → ±0 (what an x86 max/min instruction returns for it under DAZ): |x| <
        the smallest normal gives copysign(0, x), a compare LLVM cannot fold away (true for denormals with or
        without DAZ). f32, f64 and bf16 (whose denormals are f32's); other types unchanged."""
        if et not in (T.F32, T.F64, T.BF16):
            return v
        b = self.b
        x = self.to_compute(et, v)
        tiny = self.fconst(x.type, float(np.finfo(np.float64 if et is T.F64 else np.float32).tiny))
        small = b.fcmp_ordered("<", self.call_intrinsic("fabs", x), tiny)
        r = b.select(small, self.call_intrinsic("copysign", self.fconst(x.type, 0.0), x), x)
        return self.from_compute(et, r)

    def minmax_keeping_bits(self, op: O, et: T, x, y):
        """f32/f64 ``maximum``/``minimum`` (``binary``'s semantics) that returns the chosen operand's bits, for
        where TF's XLA compares and blends: the select's operands pass through an empty inline asm, so they
        are no longer the compared values and LLVM cannot make the pair an x86 max/min instruction (which
        under DAZ returns a ±denormal as ±0; a select of bitcast integers is folded back to floats)."""
        b = self.b
        fast = self.mctx.options.fast_min_max
        if fast:
            pick_x = b.fcmp_unordered(">=" if op is O.MAXIMUM else "<=", x, y)
        else:
            beaten = b.fcmp_ordered("<", x, y) if op is O.MAXIMUM else b.fcmp_ordered("<", y, x)
            pick_x = b.or_(self.isnan(x), b.and_(b.not_(beaten), b.not_(self.isnan(y))))
        ftype = ir.FunctionType(x.type, [x.type])
        return b.select(pick_x, *(b.asm(ftype, "", "=x,0", [v], False, name="bits") for v in (x, y)))

    def bitcast_value(self, src: T, dst: T, v):
        """Same-width reinterpretation of a register value."""
        b = self.b
        if src is dst:
            return v
        raw = t.to_storage(b, src, v)
        if raw.type != t.storage_type(dst):
            raw = b.bitcast(raw, t.storage_type(dst))
        return t.from_storage(b, dst, raw)

    def reduce_precision(self, et: T, v, exponent_bits: int, mantissa_bits: int):
        """HandleReducePrecision's bit recipe (round-to-nearest-even mantissa, exponent clamping)."""
        b = self.b
        width = et.bit_width
        ity = ir.IntType(width)
        c = lambda k: ir.Constant(ity, k & ((1 << width) - 1))  # noqa: E731
        src_m, src_e = et.mantissa_bits, et.exponent_bits
        bits = v if et is T.BF16 else b.bitcast(v, ity)
        x = bits
        if mantissa_bits < src_m:
            shift = src_m - mantissa_bits
            last = b.lshr(b.and_(x, c(1 << shift)), c(shift))
            bias = c((1 << (shift - 1)) - 1)
            x = b.and_(b.add(x, b.add(last, bias)), c(~((1 << shift) - 1)))
        if exponent_bits < src_e:
            sign_mask = c(1 << (width - 1))
            exp_mask = c(((1 << src_e) - 1) << src_m)
            bias = (1 << (src_e - 1)) - 1
            reduced_bias = (1 << (exponent_bits - 1)) - 1
            max_exp = c((bias + reduced_bias) << src_m)
            min_exp = c((bias - reduced_bias) << src_m)
            x_exp = b.and_(x, exp_mask)
            signed_zero = b.and_(x, sign_mask)
            x = b.select(b.icmp_unsigned(">", x_exp, max_exp), b.or_(signed_zero, exp_mask), x)
            x = b.select(b.icmp_unsigned("<=", x_exp, min_exp), signed_zero, x)
        out = x if et is T.BF16 else b.bitcast(x, v.type)
        nan = self.isnan(self.to_compute(et, v))
        if mantissa_bits > 0:
            return b.select(nan, v, out)
        inf = t.constant(et, np.inf)
        return b.select(nan, inf, out)


_CMP = {D.EQ: "==", D.NE: "!=", D.LT: "<", D.LE: "<=", D.GT: ">", D.GE: ">="}


# ---------------------------------------------------------------- helpers for the tables
def _float_unary(fn):
    """A float op done in the compute type (f32 for f16/bf16), rounded back."""
    def emit(s: ScalarOps, et: T, x):
        if not et.is_float:
            raise UnimplementedError(f"this op is only defined for floats, not {et.value}")
        return s.from_compute(et, fn(s, s.to_compute(et, x)))
    return emit


def _f16_native(fn):
    """A float op XLA:CPU emits as a formula of several LLVM ops: f16 is not normalized to f32 on CPU (only
    bf16 is), so each step rounds to f16 (native half arithmetic, or LLVM's promotion op by op); bf16
    and f32 are computed in f32."""
    def emit(s: ScalarOps, et: T, x):
        if et is T.F16:
            return fn(s, x)
        return _float_unary(fn)(s, et, x)
    return emit


def _int_or_float_unary(int_fn, float_fn, pred_fn=None):
    def emit(s: ScalarOps, et: T, x):
        if et is T.PRED:
            if pred_fn is None:
                raise UnimplementedError(f"this op is not defined for pred")
            return pred_fn(s, x)
        if et.is_float:
            return s.from_compute(et, float_fn(s, s.to_compute(et, x)))
        if et.is_integral:
            return int_fn(s, et, x)
        raise UnimplementedError(f"no native code for element type {et.value}")
    return emit


def _abs_int(s, et, x):
    if et.is_unsigned_int:
        return x
    b = s.b
    return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)


def _sign_float(s, x):
    b, ty = s.b, x.type
    one = b.select(b.fcmp_unordered("!=", x, s.fconst(ty, 0.0)), s.fconst(ty, 1.0), s.fconst(ty, 0.0))
    r = s.call_intrinsic("copysign", one, x)
    return b.select(s.isnan(x), x, r)


def _sign_int(s, et, x):
    b, zero = s.b, ir.Constant(x.type, 0)
    if et.is_unsigned_int:
        return b.zext(b.icmp_unsigned("!=", x, zero), x.type)
    pos = b.zext(b.icmp_signed(">", x, zero), x.type)
    neg = b.zext(b.icmp_signed("<", x, zero), x.type)
    return b.sub(pos, neg)


def _not(s, et, x):
    return s.b.not_(x)


def _is_finite(s, et, x):
    if not et.is_float:
        raise UnimplementedError("is-finite is only defined for floats")
    y = s.to_compute(et, x)
    return s.b.fcmp_ordered("<", s.fabs(y), s.fconst(y.type, np.inf))


def _int_only(fn):
    def emit(s, et, x):
        if not et.is_integral:
            raise UnimplementedError(f"this op is only defined for integers, not {et.value}")
        return fn(s, et, x)
    return emit


def _logistic(s, x):
    one = s.fconst(x.type, 1.0)
    return s.b.fdiv(one, s.fadd(one, s.exp(s.b.fneg(x))), flags=s.flags)


UNARY = {
    O.ABS: _int_or_float_unary(_abs_int, lambda s, x: s.fabs(x)),
    O.NEGATE: _int_or_float_unary(lambda s, et, x: s.b.neg(x), lambda s, x: s.b.fneg(x), lambda s, x: x),
    O.SIGN: _int_or_float_unary(_sign_int, _sign_float),
    O.NOT: _not,
    O.POPCNT: _int_only(lambda s, et, x: s.call_intrinsic("ctpop", x)),
    O.CLZ: _int_only(lambda s, et, x: s.b.call(s.mctx.function(f"llvm.ctlz.i{x.type.width}", x.type,
                                                               [x.type, t.I1]), [x, ir.Constant(t.I1, 0)])),
    O.COPY: lambda s, et, x: x,
    O.IS_FINITE: _is_finite,
    O.EXP: _float_unary(lambda s, x: s.exp(x)),
    O.EXPM1: _f16_native(lambda s, x: s.expm1(x)),
    O.LOG: _float_unary(lambda s, x: s.log(x)),
    O.LOG1P: _f16_native(lambda s, x: s.log1p(x)),
    O.SQRT: _float_unary(lambda s, x: s.call_intrinsic("sqrt", x)),
    O.RSQRT: _f16_native(lambda s, x: s.rsqrt(x)),
    O.CBRT: _float_unary(lambda s, x: s.call_libm("cbrt", x)),
    O.SIN: _float_unary(lambda s, x: s.call_intrinsic("sin", x)),
    O.COS: _float_unary(lambda s, x: s.call_intrinsic("cos", x)),
    O.TAN: _float_unary(lambda s, x: s.call_libm("tan", x)),
    O.TANH: _float_unary(lambda s, x: s.tanh(x)),
    O.LOGISTIC: _float_unary(_logistic),
    O.FLOOR: _float_unary(lambda s, x: s.call_intrinsic("floor", x)),
    O.CEIL: _float_unary(lambda s, x: s.call_intrinsic("ceil", x)),
    O.ROUND_NEAREST_EVEN: _float_unary(lambda s, x: s.call_intrinsic("roundeven", x)),
    O.ROUND_NEAREST_AFZ: _float_unary(lambda s, x: s.call_intrinsic("round", x)),
    O.ERF: _float_unary(lambda s, x: s.erf(x)),
}


# ---------------------------------------------------------------- binary
def _arith(float_fn, int_fn, pred_fn=None):
    def emit(s: ScalarOps, et: T, a, c):
        if et is T.PRED:
            if pred_fn is None:
                raise UnimplementedError("this op is not defined for pred")
            return pred_fn(s, a, c)
        if et.is_float:
            return s.from_compute(et, float_fn(s, s.to_compute(et, a), s.to_compute(et, c)))
        if et.is_integral:
            return int_fn(s, et, a, c)
        raise UnimplementedError(f"no native code for element type {et.value}")
    return emit


def _safe_divisor(s, et, a, c):
    """(divisor with the trapping cases replaced by 1, is-zero, is-overflow)."""
    b = s.b
    ty = a.type
    zero = b.icmp_unsigned("==", c, ir.Constant(ty, 0))
    special = zero
    overflow = None
    if et.is_signed_int:
        int_min = ir.Constant(ty, 1 << (ty.width - 1))
        overflow = b.and_(b.icmp_unsigned("==", a, int_min), b.icmp_signed("==", c, ir.Constant(ty, -1)))
        special = b.or_(zero, overflow)
    return b.select(special, ir.Constant(ty, 1), c), zero


def _int_divide(s, et, a, c):
    b = s.b
    safe, zero = _safe_divisor(s, et, a, c)
    if et.is_signed_int:
        q = b.sdiv(a, safe)  # INT_MIN / 1 == INT_MIN, the overflow result
        return b.select(zero, ir.Constant(a.type, -1), q)
    return b.select(zero, ir.Constant(a.type, -1), b.udiv(a, safe))


def _int_remainder(s, et, a, c):
    b = s.b
    safe, zero = _safe_divisor(s, et, a, c)
    r = b.srem(a, safe) if et.is_signed_int else b.urem(a, safe)
    return b.select(zero, a, r)


def _fmax(s, x, y, nan=True):
    b = s.b
    if s.mctx.options.fast_min_max:  # EmitFloatMax's fast path: select(fcmp uge)
        return b.select(b.fcmp_unordered(">=", x, y), x, y)
    r = b.select(b.fcmp_ordered("<", x, y), y, x)
    if nan:
        r = b.select(s.isnan(y), y, r)
        r = b.select(s.isnan(x), x, r)
    return r


def _fmin(s, x, y, nan=True):
    b = s.b
    if s.mctx.options.fast_min_max:  # EmitFloatMin's fast path: select(fcmp ule)
        return b.select(b.fcmp_unordered("<=", x, y), x, y)
    r = b.select(b.fcmp_ordered("<", y, x), y, x)
    if nan:
        r = b.select(s.isnan(y), y, r)
        r = b.select(s.isnan(x), x, r)
    return r


def _int_max(s, et, x, y):
    lt = s.b.icmp_signed("<", x, y) if et.is_signed_int else s.b.icmp_unsigned("<", x, y)
    return s.b.select(lt, y, x)


def _int_min(s, et, x, y):
    lt = s.b.icmp_signed("<", y, x) if et.is_signed_int else s.b.icmp_unsigned("<", y, x)
    return s.b.select(lt, y, x)


def _fpow(s, x, y):
    # XLA:CPU calls libm's pow as it is: x^±0 = 1 and 1^y = 1 (NaN included) are libm's, decided on the
    # bits, so a denormal exponent under DAZ is not 0 (pow(0, -denormal) = inf). No select of ours here:
    # LLVM would rewrite a bit test of y into fcmp y == 0, which DAZ makes true for a denormal.
    return s.call_intrinsic("pow", x, y)


def _ipow(s, et, a, c):
    """Exponentiation by squaring, unrolled over the exponent's bits (wraps like the evaluator)."""
    b = s.b
    ty = a.type
    one, zero = ir.Constant(ty, 1), ir.Constant(ty, 0)
    e = c
    if et.is_signed_int:
        e = b.select(b.icmp_signed("<", c, zero), zero, c)
    result, base = one, a
    # XLA:CPU's EmitIntegerPow unrolls 6 squarings: only the exponent's low 6 bits count (any larger
    # exponent overflows anyway unless |base| <= 1), so pow(10, 2**63 - 1) is 10**63 wrapped.
    for _ in range(6):
        odd = b.trunc(e, t.I1)
        result = b.select(odd, b.mul(result, base), result)
        base = b.mul(base, base)
        e = b.lshr(e, one)
    is_one = b.icmp_unsigned("==", a, one)
    if et.is_signed_int:
        # negative exponent: 1^y = 1, (-1)^y = ±1 by parity, else 0 (as XLA:CPU)
        minus_one = ir.Constant(ty, -1)
        parity = b.select(b.trunc(c, t.I1), minus_one, one)
        negative = b.select(is_one, one, b.select(b.icmp_signed("==", a, minus_one), parity, zero))
        result = b.select(b.icmp_signed("<", c, zero), negative, result)
    return b.select(b.or_(is_one, b.icmp_unsigned("==", c, zero)), one, result)


def _shift(kind: str):
    def emit(s, et, a, c):
        if not et.is_integral:
            raise UnimplementedError("shifts are only defined for integers")
        b = s.b
        ty = a.type
        out = b.icmp_unsigned(">=", c, ir.Constant(ty, ty.width))
        safe = b.select(out, ir.Constant(ty, 0), c)
        if kind == "left":
            return b.select(out, ir.Constant(ty, 0), b.shl(a, safe))
        if kind == "logical":
            return b.select(out, ir.Constant(ty, 0), b.lshr(a, safe))
        fill = b.ashr(a, ir.Constant(ty, ty.width - 1))
        return b.select(out, fill, b.ashr(a, safe))
    return emit


def _bitwise(name):
    def emit(s, et, a, c):
        if et.is_float:
            raise UnimplementedError("bitwise ops are not defined for floats")
        return getattr(s.b, name)(a, c)
    return emit


def _fpow_pred(s, a, c):
    return s.b.or_(a, s.b.not_(c))


BINARY = {
    O.ADD: _arith(lambda s, x, y: s.fadd(x, y), lambda s, et, x, y: s.b.add(x, y), lambda s, x, y: s.b.or_(x, y)),
    O.SUBTRACT: _arith(lambda s, x, y: s.fsub(x, y), lambda s, et, x, y: s.b.sub(x, y),
                       lambda s, x, y: s.b.xor(x, y)),
    O.MULTIPLY: _arith(lambda s, x, y: s.fmul(x, y), lambda s, et, x, y: s.b.mul(x, y),
                       lambda s, x, y: s.b.and_(x, y)),
    O.DIVIDE: _arith(lambda s, x, y: s.fdiv(x, y), _int_divide),
    O.REMAINDER: _arith(lambda s, x, y: s.b.frem(x, y), _int_remainder),
    O.MAXIMUM: _arith(_fmax, _int_max, lambda s, x, y: s.b.or_(x, y)),
    O.MINIMUM: _arith(_fmin, _int_min, lambda s, x, y: s.b.and_(x, y)),
    O.POWER: _arith(_fpow, _ipow, _fpow_pred),
    O.ATAN2: _arith(lambda s, x, y: s.call_libm("atan2", x, y),
                    lambda s, et, x, y: (_ for _ in ()).throw(UnimplementedError("atan2 needs floats"))),
    O.AND: _bitwise("and_"),
    O.OR: _bitwise("or_"),
    O.XOR: _bitwise("xor"),
    O.SHIFT_LEFT: _shift("left"),
    O.SHIFT_RIGHT_LOGICAL: _shift("logical"),
    O.SHIFT_RIGHT_ARITHMETIC: _shift("arithmetic"),
}

# Reducers the reduction emitter may reassociate and vectorise: opcode -> float accumulate function.
REASSOCIABLE = frozenset({O.ADD, O.MULTIPLY, O.MAXIMUM, O.MINIMUM, O.AND, O.OR, O.XOR})
