"""Which products of XLA's elemental convolution loop LLVM leaves unfused, found by compiling XLA's loop.

Stage: codegen helper of ``conv_exact.py`` (its exact kernel for the convolutions XLA:CPU runs as its
elemental loop: F32 or F64, every buffer row-major, no batch groups). Guarantee: :func:`rounded_taps` is,
per output element (row-major) and contraction index (window positions row-major, then the group's input
features: XLA's loop order), whether TF's XLA adds that tap's product rounded instead of fused into the
sum — as this process's LLVM decides for XLA's own kernel IR, not as a rule about shapes.

Why: XLA's ``ElementalIrEmitter::EmitConvolution`` emits, per output element, one ``fmul`` and one
``fadd reassoc`` per tap inside a bounds check; XLA's backend contracts them into one FMA (fp-contract=fast)
where both stay in one basic block. LLVM's middle end sometimes moves a multiply out: a bounds check that
folds to one output position (``2i + j - 3 u< 2`` is ``2i + j - 3 == 1`` when the parity is known) makes the
tap's addresses constants there, and LICM hoists its loads and multiply out of the output loop, so that
product is rounded (``vmulsd`` before the loop, ``vaddsd`` in it). Which taps it hoists depends on value
numbering and jump threading (in TF 2.21's dump of fuzz seed 137001111, a 2×3 f64 depthwise filter over a
5×1 image, stride 2, SAME, swapped by algsimp: the taps at lhs position 1 for the first batch element, but not
the ones at position 0). This module writes XLA's unoptimised kernel IR (as TF's dump shows it:
``convolution_elemental_kernel_module.ir-no-opt.ll``), runs LLVM's O3 pipeline on it (llvmlite's LLVM 22
reproduces TF's ``ir-with-opt`` hoists), code-generates it with fp-contract=fast as XLA's backend does
(``xla_llvm.compile_like_xla``), and runs it once per contraction index on probe operands: the input all
``max``, the filter ``max`` at that index and ``-inf`` elsewhere, so an output holds NaN exactly where that tap's ``max·max``
was rounded to +inf and added to the ``-inf`` of an earlier tap (fused it stays ``-inf``). The first valid tap
of an output is never reported: there (sum +0) a rounded and a fused product agree.

Limits: convolutions of at most :data:`MAX_WORK` output-tap pairs (larger loops are not unrolled, so nothing
is hoisted; reported as none); the sums are taken in program order (LLVM may reassociate the ``fadd
reassoc`` chain; not seen in the dumps).
"""
from __future__ import annotations

import functools
import threading
from math import prod

import numpy as np

from tfxla_cluster.codegen.xla_llvm import LLVM_TYPES, KernelIR, aligned, compile_like_xla
from tfxla_cluster.hlo.shape import PrimitiveType as T

# Output elements × contraction depth above which no probe runs (LLVM does not unroll such loops).
MAX_WORK = 1 << 14
_probe_lock = threading.Lock()   # clusters compile on several threads; one probe at a time


def _array_type(dims, lty: str) -> str:
    s = lty
    for d in reversed(dims):
        s = f"[{d} x {s}]"
    return s


def xla_kernel_ir(instr) -> str:
    """XLA:CPU's unoptimised elemental kernel IR for convolution ``instr`` (TF 2.21's emitter: output loops
    major to minor, unrolling disabled on all but the innermost; window loops k0.., then the group's input
    features; one bounds-checked ``fmul``/``fadd reassoc`` per tap; size-1 dimensions indexed by 0)."""
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    oshape = instr.shape
    lshape, rshape = (o.shape for o in instr.operands)
    lty, nbytes, _ = LLVM_TYPES[oshape.element_type]
    od, ld, rd = oshape.dimensions, lshape.dimensions, rshape.dimensions
    G = instr.feature_group_count
    kin = rd[dn.kernel_input_feature_dimension]
    O_ = od[dn.output_feature_dimension]
    ir = KernelIR("convolution_kernel",
                  [f"%acc = alloca {lty}, align 8", *(f"%od{i}.a = alloca i64, align 8" for i in range(len(od))),
                   *(f"%k{i}.a = alloca i64, align 8" for i in range(len(window))), "%iz.a = alloca i64, align 8"],
                  [s.num_elements * nbytes for s in (lshape, rshape, oshape)])
    emit = ir.emit
    scope = ir.result_scope
    n = iter(range(1 << 30))

    def tmp():
        return f"%t{next(n)}"

    def tap_body():
        ov = [f"%od{i}" for i in range(len(od))]
        grp = tmp()
        emit(f"  {grp} = sdiv i64 {ov[dn.output_feature_dimension]}, {O_ // G}")
        base = tmp()
        emit(f"  {base} = mul nsw i64 {grp}, {kin}")
        feat = tmp()
        emit(f"  {feat} = add nsw i64 %iz, {base}")
        pos = []
        for i, w in enumerate(window):
            a, c, s, p = tmp(), tmp(), tmp(), tmp()
            emit(f"  {a} = mul nsw i64 {ov[dn.output_spatial_dimensions[i]]}, {w.stride}")
            emit(f"  {c} = mul nsw i64 %k{i}, {w.window_dilation}")
            emit(f"  {s} = add nsw i64 {a}, {c}")
            emit(f"  {p} = sub nsw i64 {s}, {w.padding_low}")
            pos.append(p)
        ok = "true"
        for i, w in enumerate(window):
            n_in = ld[dn.input_spatial_dimensions[i]]
            u, r, e, a1, a2 = tmp(), tmp(), tmp(), tmp(), tmp()
            emit(f"  {u} = icmp ult i64 {pos[i]}, {(n_in - 1) * w.base_dilation + 1}")
            emit(f"  {r} = srem i64 {pos[i]}, {w.base_dilation}")
            emit(f"  {e} = icmp eq i64 {r}, 0")
            emit(f"  {a1} = and i1 {u}, {e}")
            emit(f"  {a2} = and i1 {ok}, {a1}")
            ok = a2
        q = []
        for i, w in enumerate(window):
            d = tmp()
            emit(f"  {d} = sdiv i64 {pos[i]}, {w.base_dilation}")
            q.append(d)
        emit(f"  br i1 {ok}, label %inb.t, label %inb.a")
        emit("inb.t:")
        kidx = []
        for i, w in enumerate(window):
            if w.window_reversal:
                r = tmp()
                emit(f"  {r} = sub nsw i64 {w.size - 1}, %k{i}")
                kidx.append(r)
            else:
                kidx.append(f"%k{i}")
        li = [None] * len(ld)
        li[dn.input_batch_dimension] = ov[dn.output_batch_dimension]
        li[dn.input_feature_dimension] = feat
        for i, d in enumerate(dn.input_spatial_dimensions):
            li[d] = q[i]
        ri = [None] * len(rd)
        ri[dn.kernel_output_feature_dimension] = ov[dn.output_feature_dimension]
        ri[dn.kernel_input_feature_dimension] = "%iz"
        for i, d in enumerate(dn.kernel_spatial_dimensions):
            ri[d] = kidx[i]
        vals = []
        for a, dims, idx in ((0, ld, li), (1, rd, ri)):
            g, v = tmp(), tmp()
            ix = ", ".join(f"i64 {x if size != 1 else 0}" for x, size in zip(idx, dims))
            emit(f"  {g} = getelementptr inbounds {_array_type(dims, lty)}, ptr %arg{a}, i64 0, {ix}")
            emit(f"  {v} = load {lty}, ptr {g}, align {nbytes}, !invariant.load !0, !noalias {scope}")
            vals.append(v)
        s0, m, s1 = tmp(), tmp(), tmp()
        emit(f"  {s0} = load {lty}, ptr %acc, align 8")
        emit(f"  {m} = fmul {lty} {vals[0]}, {vals[1]}")
        emit(f"  {s1} = fadd reassoc {lty} {s0}, {m}")
        emit(f"  store {lty} {s1}, ptr %acc, align 8")
        emit("  br label %inb.a")
        emit("inb.a:")

    def inner(level):
        if level == len(window):
            return lambda: ir.loop("iz", "iz", kin, tap_body)
        return lambda: ir.loop(f"kl{level}", f"k{level}", window[level].size, inner(level + 1))

    def output(level):
        if level == len(od):
            def body():
                emit(f"  store {lty} 0.0, ptr %acc, align 8")
                inner(0)()
                v, g = tmp(), tmp()
                ix = ", ".join(f"i64 {f'%od{i}' if size != 1 else 0}" for i, size in enumerate(od))
                emit(f"  {v} = load {lty}, ptr %acc, align 8")
                emit(f"  {g} = getelementptr inbounds {_array_type(od, lty)}, ptr %arg2, i64 0, {ix}")
                emit(f"  store {lty} {v}, ptr {g}, align {nbytes}, !alias.scope {scope}")
            return body
        return lambda: ir.loop(f"ol{level}", f"od{level}", od[level], output(level + 1),
                               unroll_disabled=level < len(od) - 1)

    output(0)()
    return ir.text()


def supported(instr) -> bool:
    """Whether :func:`rounded_taps` models ``instr``: F32/F64, no batch groups, every buffer row-major."""
    shapes = [instr.shape, *(o.shape for o in instr.operands)]
    return instr.shape.element_type in LLVM_TYPES and instr.batch_group_count == 1 and all(
        s.element_type is instr.shape.element_type and s.is_default_layout for s in shapes)


def _valid(instr) -> np.ndarray:
    """[outputs, depth] bool: whether a tap reads a real input element (XLA's bounds check)."""
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    lshape, rshape = (o.shape for o in instr.operands)
    kin = rshape.dimensions[dn.kernel_input_feature_dimension]
    od = instr.shape.dimensions
    idx = np.indices(od).reshape(len(od), -1)
    sizes = [w.size for w in window]
    taps = np.indices(sizes).reshape(len(sizes), -1) if sizes else np.zeros((0, 1), int)
    ok = np.ones((idx.shape[1], taps.shape[1]), bool)
    for i, w in enumerate(window):
        o = idx[dn.output_spatial_dimensions[i]][:, None]
        p = o * w.stride + taps[i][None, :] * w.window_dilation - w.padding_low
        n_in = lshape.dimensions[dn.input_spatial_dimensions[i]]
        ok &= (p >= 0) & (p <= (n_in - 1) * w.base_dilation) & (p % w.base_dilation == 0)
    return np.repeat(ok, kin, axis=1)


@functools.lru_cache(maxsize=64)
def _probe(ir_text: str, key: tuple) -> bytes:
    """Per (output, contraction index), packed: whether XLA's kernel ``ir_text``, optimised and contracted
    as XLA's backend does, gives NaN with the input all ``max`` and the filter ``max`` at that index,
    ``-inf`` elsewhere (cached by the IR; ``key``: element type, element counts, depth and the filter's
    layout of the contraction index)."""
    et, lshape_n, rshape_n, out_n, depth, kin, rshape_dims, kdims, kin_dim = key
    kernel = compile_like_xla(ir_text, "convolution_kernel")
    np_t = LLVM_TYPES[et][2]
    big = np.finfo(np_t).max
    lhs, rhs, out = (aligned(n, np_t) for n in (lshape_n, rshape_n, out_n))
    lhs[:] = big
    # Contraction index of every filter element: window position (row-major) * kin + input feature.
    kidx = np.indices(rshape_dims).reshape(len(rshape_dims), -1)
    wpos = np.zeros(rshape_n, np.int64)
    for d, size, reversed_ in kdims:
        wpos = wpos * size + (size - 1 - kidx[d] if reversed_ else kidx[d])
    cidx = wpos * kin + kidx[kin_dim]
    nan = np.zeros((out_n, depth), bool)
    for k in range(depth):
        rhs[:] = np.where(cidx == k, big, -np.inf).astype(np_t)
        kernel(lhs, rhs, out)
        nan[:, k] = np.isnan(out)
    return np.packbits(nan).tobytes()


def rounded_taps(instr) -> np.ndarray | None:
    """[outputs (row-major), depth] bool: the taps TF's XLA adds as rounded products (see the module
    docstring), or None when there are none or ``instr`` is not modelled."""
    if not supported(instr):
        return None
    dn, window = instr.convolution_dimension_numbers, instr.window.dimensions
    lshape, rshape = (o.shape for o in instr.operands)
    kin = rshape.dimensions[dn.kernel_input_feature_dimension]
    depth = kin * prod(w.size for w in window)
    outs = instr.shape.num_elements
    if outs * depth == 0 or outs * depth > MAX_WORK:
        return None
    valid = _valid(instr)
    kdims = tuple((d, rshape.dimensions[d], w.window_reversal)
                  for d, w in zip(dn.kernel_spatial_dimensions, window))
    key = (instr.shape.element_type, lshape.num_elements, rshape.num_elements, outs, depth, kin,
           tuple(rshape.dimensions), kdims, dn.kernel_input_feature_dimension)
    with _probe_lock:
        bits = _probe(xla_kernel_ir(instr), key)
    nan = np.unpackbits(np.frombuffer(bits, np.uint8))[:outs * depth].reshape(outs, depth).astype(bool)
    # Only taps after an output's first valid one tell (and matter).
    first = np.argmax(valid, axis=1)
    later = valid & (np.arange(depth)[None, :] > first[:, None])
    rounded = nan & later
    return rounded if rounded.any() else None
