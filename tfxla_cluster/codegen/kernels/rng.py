"""``rng-bit-generator`` in native code, bit-exact with the evaluator (XLA's RngBitGeneratorExpander with
prng.cc): Philox4x32-10 (``rng_philox`` and ``rng_default``) and ThreeFry2x32-20 (``rng_three_fry``);
and ``rng-get-and-update-state``, the per-instruction counter the RngExpander's stateful ``rng`` reads.

The values are generated elementally — element ``e`` recomputes the block of 4 (Philox) or 2 (ThreeFry)
words it belongs to and picks its word — so the loop has no cross-iteration state and vectorises; the
new state is written by the same kernel. Narrow outputs are the low bits of 32-bit words, 64-bit
outputs pair two words (low first), as in the evaluator.
"""
from __future__ import annotations

from math import prod

from llvmlite import ir

from tfxla_cluster.codegen import irtypes as t
from tfxla_cluster.codegen.buffers import leaves
from tfxla_cluster.codegen.kernel_builder import KernelBuilder, array_operands, thunk
from tfxla_cluster.codegen.loops import emit_loop_nest, work_items
from tfxla_cluster.errors import UnimplementedError
from tfxla_cluster.hlo.attrs import RandomAlgorithm
from tfxla_cluster.hlo.eval_random import RNG_STATE_INITIAL_VALUE, _split_halves
from tfxla_cluster.hlo.opcode import HloOpcode as O


def _c32(v):
    return ir.Constant(t.I32, v & 0xFFFFFFFF)


def _c64(v):
    return ir.Constant(t.I64, v & 0xFFFFFFFFFFFFFFFF)


def _lo(b, x):
    return b.trunc(x, t.I32)


def _hi(b, x):
    return b.trunc(b.lshr(x, _c64(32)), t.I32)


def philox4x32(b, x, key):
    x0, x1, x2, x3 = x
    k0, k1 = key
    for _ in range(10):
        p0 = b.mul(b.zext(x0, t.I64), _c64(0xD2511F53))
        p1 = b.mul(b.zext(x2, t.I64), _c64(0xCD9E8D57))
        hi0, lo0, hi1, lo1 = _hi(b, p0), _lo(b, p0), _hi(b, p1), _lo(b, p1)
        x0, x1, x2, x3 = b.xor(b.xor(hi1, x1), k0), lo1, b.xor(b.xor(hi0, x3), k1), lo0
        k0, k1 = b.add(k0, _c32(0x9E3779B9)), b.add(k1, _c32(0xBB67AE85))
    return x0, x1, x2, x3


def threefry2x32(b, x, key):
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = [key[0], key[1], b.xor(b.xor(_c32(0x1BD11BDA), key[0]), key[1])]
    x0, x1 = b.add(x[0], ks[0]), b.add(x[1], ks[1])
    for i in range(5):
        for r in rot[(i % 2) * 4:(i % 2) * 4 + 4]:
            x0 = b.add(x0, x1)
            x1 = b.xor(b.or_(b.shl(x1, _c32(r)), b.lshr(x1, _c32(32 - r))), x0)
        x0 = b.add(x0, ks[(i + 1) % 3])
        x1 = b.add(b.add(x1, ks[(i + 2) % 3]), _c32(i + 1))
    return x0, x1


def _to_out(b, word32, out_ty):
    """A 32-bit word → the output element (low bits for narrow types)."""
    return word32 if out_ty.width == 32 else b.trunc(word32, out_ty)


@thunk(O.RNG_BIT_GENERATOR)
def emit_rng_bit_generator(prog, instr, operands, out) -> None:
    (state_ref,) = array_operands(instr, operands)
    new_state_ref, values_ref = leaves(out)
    kb = KernelBuilder(prog, instr.name)
    b = kb.builder
    state, new_state, values = kb.array(state_ref), kb.array(new_state_ref), kb.array(values_ref)
    n_words = state_ref.shape.num_elements
    out_shape = values_ref.shape
    dims = list(out_shape.dimensions)
    bits = out_shape.element_type.bit_width
    out_ty = ir.IntType(bits)
    words = [state.load_offset(t.i64(k)) for k in range(n_words)]
    key = words[0]
    kpair = (_lo(b, key), _hi(b, key))
    alg = instr.rng_algorithm or RandomAlgorithm.DEFAULT
    n = prod(dims)
    if alg in (RandomAlgorithm.PHILOX, RandomAlgorithm.DEFAULT):
        lo, hi = (words[1], words[2]) if n_words >= 3 else (words[1], words[0])
        per_draw = 4 if bits <= 32 else 2

        def value(e):
            g = b.udiv(e, t.i64(per_draw))
            new_lo = b.add(lo, g)
            new_hi = b.add(hi, b.zext(b.icmp_unsigned("<", new_lo, lo), t.I64))
            o = philox4x32(b, (_lo(b, new_lo), _hi(b, new_lo), _lo(b, new_hi), _hi(b, new_hi)), kpair)
            lane = b.urem(e, t.i64(per_draw))
            if bits <= 32:
                w = b.select(b.icmp_unsigned("==", lane, t.i64(0)), o[0],
                             b.select(b.icmp_unsigned("==", lane, t.i64(1)), o[1],
                                      b.select(b.icmp_unsigned("==", lane, t.i64(2)), o[2], o[3])))
                return _to_out(b, w, out_ty)
            first = b.icmp_unsigned("==", lane, t.i64(0))
            w_lo, w_hi = b.select(first, o[0], o[2]), b.select(first, o[1], o[3])
            return b.or_(b.zext(w_lo, t.I64), b.shl(b.zext(w_hi, t.I64), _c64(32)))
        draws = -(-(n if bits <= 32 else 2 * n) // 4)
        end_lo = b.add(lo, t.i64(draws))
        end_hi = b.add(hi, b.zext(b.icmp_unsigned("<", end_lo, lo), t.I64))
        updated = [key, end_lo, end_hi] if n_words >= 3 else [key, end_lo]
        updated += words[len(updated):]
    elif alg is RandomAlgorithm.THREE_FRY:
        counter = words[1]
        if bits == 64:
            def value(e):
                x = b.add(counter, e)
                o0, o1 = threefry2x32(b, (_lo(b, x), _hi(b, x)), kpair)
                return b.or_(b.zext(o0, t.I64), b.shl(b.zext(o1, t.I64), _c64(32)))
            advance = n
        else:
            half, split, _ = _split_halves(dims)
            advance = prod(half)

            def value(e):
                if not dims:
                    x = counter
                    o0, _ = threefry2x32(b, (_lo(b, x), _hi(b, x)), kpair)
                    return _to_out(b, o0, out_ty)
                # Element index i along the split dim sits at (i // 2, i % 2) of the concatenated halves.
                idx = _delinearize(b, e, dims)
                i = idx[split]
                hidx = list(idx[:split]) + [b.udiv(i, t.i64(2)), t.i64(0)] + list(idx[split + 1:])
                lin = _linearize(b, hidx, half)
                x = b.add(counter, lin)
                o0, o1 = threefry2x32(b, (_lo(b, x), _hi(b, x)), kpair)
                w = b.select(b.trunc(b.urem(i, t.i64(2)), t.I1), o1, o0)
                return _to_out(b, w, out_ty)
        updated = [key, b.add(counter, t.i64(advance))] + words[2:]
    else:
        raise UnimplementedError(f"rng-bit-generator algorithm {alg.value} is not implemented")
    # Read the whole state before writing it (the output may not alias, but be safe and simple).
    for k, w in enumerate(updated):
        new_state.store_offset(t.i64(k), w)
    if n:
        def body(idx):  # element e is the row-major position in the output
            e = idx.linear if out_shape.is_default_layout else _linearize(b, idx.get_dims(b), dims)
            values.store(idx, value(e))
        emit_loop_nest(kb.kctx, out_shape, body, 0, work_items(out_shape, True), True, "rng")
    prog.call_kernel(kb, instr.name, "rng-bit-generator", 1)


def _delinearize(b, lin, dims):
    out = [None] * len(dims)
    rem = lin
    for k in range(len(dims) - 1, -1, -1):
        if k == 0:
            out[k] = rem
        else:
            out[k] = b.urem(rem, t.i64(dims[k]))
            rem = b.udiv(rem, t.i64(dims[k]))
    return out


def _linearize(b, idx, dims):
    v = t.i64(0)
    for x, d in zip(idx, dims):
        v = b.add(b.mul(v, t.i64(d)), x)
    return v


@thunk(O.RNG_GET_AND_UPDATE_STATE)
def emit_rng_get_and_update_state(prog, instr, operands, out) -> None:
    """XLA:CPU's RngGetAndUpdateStateThunk: a u128 counter owned by this instruction's code (an
    internal global of the LLVM module, starting at 0x7012395) is returned as u64[2] (low word first)
    and advanced by ``delta`` with atomic adds, so concurrent runs get disjoint counters."""
    mctx = prog.mctx
    state = ir.GlobalVariable(mctx.module, ir.ArrayType(t.I64, 2), mctx.unique_name("rng_state_" + instr.name))
    state.linkage = "internal"
    state.initializer = ir.Constant(ir.ArrayType(t.I64, 2), [RNG_STATE_INITIAL_VALUE, 0])
    kb = KernelBuilder(prog, instr.name)
    b = kb.builder
    lo_ptr = b.gep(state, [t.i64(0), t.i64(0)], inbounds=True, source_etype=state.value_type)
    hi_ptr = b.gep(state, [t.i64(0), t.i64(1)], inbounds=True, source_etype=state.value_type)
    delta = _c64(int(instr.delta))
    old_lo = b.atomic_rmw("add", lo_ptr, delta, "monotonic")
    carry = b.zext(b.icmp_unsigned("<", b.add(old_lo, delta), old_lo), t.I64)
    old_hi = b.atomic_rmw("add", hi_ptr, carry, "monotonic")
    arr = kb.array(out)
    arr.store_offset(t.i64(0), old_lo)
    arr.store_offset(t.i64(1), old_hi)
    prog.call_kernel(kb, instr.name, "rng-get-and-update-state", 1)
