"""FFT ops (tf2xla's fft_ops.cc): FFT/IFFT/RFFT/IRFFT in 1, 2 and 3 dimensions.

Stage: lowering. Complex tensors are (re, im) pairs of real HLO arrays inside a cluster
(``complex_ops.ComplexValue``) and our HLO pipeline compiles real element types only, so an FFT is not
one HLO ``fft`` instruction but its documented expansion: a discrete Fourier transform per transformed
axis as real ``dot``s with host cos/sin matrices (computed in f64, rounded to the part type):

    forward  Re' = re·C + im·S,  Im' = im·C - re·S      (C = cos 2πjk/n, S = sin 2πjk/n)
    inverse  Re' = (re·C - im·S)/n,  Im' = (im·C + re·S)/n

RFFT crops or zero-pads the real input to ``fft_length`` and keeps the ``n//2 + 1`` non-negative
frequencies of the innermost axis; IRFFT crops/pads the innermost axis to ``n//2 + 1`` coefficients and
sums the Hermitian half spectrum (weight 1 for DC and, for even n, Nyquist, 2 otherwise; their imaginary
parts are ignored). The O(n²) transform agrees with XLA:CPU's FFT to float rounding.
"""
from __future__ import annotations

import numpy as np

from tfxla_cluster.errors import InvalidArgumentError
from tfxla_cluster.tf2hlo import xla_lib as xl
from tfxla_cluster.tf2hlo.complex_ops import ComplexValue, parts
from tfxla_cluster.tf2hlo.registry import lowers


def _along(b, x, m: np.ndarray, axis: int):
    """``x`` contracted on ``axis`` with matrix ``m`` [n_in, n_out]; the new axis stays at ``axis``."""
    r = x.shape.rank
    c = b.constant(m.astype(x.shape.element_type.dtype), x.shape.element_type)
    y = b.dot(x, c, (axis,), (0,))                                   # axis moves last
    perm = list(range(axis)) + [r - 1] + list(range(axis, r - 1))
    return y if axis == r - 1 else b.transpose(y, perm)


def _dft(b, re, im, axis: int, n_out: int, inverse: bool):
    n = re.shape.dimensions[axis]
    j = np.arange(n)[:, None]
    k = np.arange(n_out)[None, :]
    theta = 2.0 * np.pi * ((j * k) % max(n, 1)) / max(n, 1)
    cos, sin = np.cos(theta), np.sin(theta)
    if inverse:
        cos, sin = cos / n, sin / n
        return (b.subtract(_along(b, re, cos, axis), _along(b, im, sin, axis)),
                b.add(_along(b, im, cos, axis), _along(b, re, sin, axis)))
    return (b.add(_along(b, re, cos, axis), _along(b, im, sin, axis)),
            b.subtract(_along(b, im, cos, axis), _along(b, re, sin, axis)))


def _fit(b, x, axis: int, size: int):
    """Crop or zero-pad ``x`` along ``axis`` to ``size`` (TF's fft_length handling)."""
    d = x.shape.dimensions[axis]
    if d > size:
        lim = list(x.shape.dimensions)
        lim[axis] = size
        return b.slice(x, [0] * x.shape.rank, lim)
    if d < size:
        cfg = [(0, 0)] * x.shape.rank
        cfg[axis] = (0, size - d)
        return b.pad(x, xl.scalar(b, 0, x.shape.element_type), cfg)
    return x


def _rank_check(ctx, rank: int, k: int):
    if rank < k:
        raise InvalidArgumentError(f"input must be at least rank {k} but is rank {rank}")


def _complex_fft(k: int, inverse: bool):
    def lower(ctx, node):
        b = ctx.b
        re, im = parts(ctx, 0)
        r = re.shape.rank
        _rank_check(ctx, r, k)
        for axis in range(r - k, r):
            re, im = _dft(b, re, im, axis, re.shape.dimensions[axis], inverse)
        return [ComplexValue(re, im)]
    return lower


def _lengths(ctx, k: int) -> list[int]:
    n = ctx.const_ints(1)
    if len(n) != k:
        raise InvalidArgumentError(f"fft_length must be length {k} vector")
    if any(v < 0 for v in n):
        raise InvalidArgumentError(f"fft_length must be non-negative: {n}")
    return n


def _rfft(k: int):
    def lower(ctx, node):
        b = ctx.b
        x = ctx.input(0)
        r = x.shape.rank
        _rank_check(ctx, r, k)
        lengths = _lengths(ctx, k)
        for axis, n in zip(range(r - k, r), lengths):
            x = _fit(b, x, axis, n)
        re, im = x, xl.zeros_like(b, x)
        # innermost axis first, keeping n//2 + 1 frequencies; the outer axes transform fully
        re, im = _dft(b, re, im, r - 1, lengths[-1] // 2 + 1, False)
        for axis in range(r - k, r - 1):
            re, im = _dft(b, re, im, axis, re.shape.dimensions[axis], False)
        return [ComplexValue(re, im)]
    return lower


def _irfft(k: int):
    def lower(ctx, node):
        b = ctx.b
        re, im = parts(ctx, 0)
        r = re.shape.rank
        _rank_check(ctx, r, k)
        lengths = _lengths(ctx, k)
        for axis, n in zip(range(r - k, r - 1), lengths[:-1]):
            re, im = _fit(b, re, axis, n), _fit(b, im, axis, n)
        n = lengths[-1]
        half = n // 2 + 1
        re, im = _fit(b, re, r - 1, half), _fit(b, im, r - 1, half)
        for axis in range(r - k, r - 1):
            re, im = _dft(b, re, im, axis, re.shape.dimensions[axis], True)
        # c2r on the innermost axis: x_j = 1/n Σ_k w_k (Re X_k cos θ - Im X_k sin θ)
        kk = np.arange(half)[:, None]
        j = np.arange(n)[None, :]
        w = np.where((kk == 0) | ((n % 2 == 0) & (kk == n // 2)), 1.0, 2.0)
        theta = 2.0 * np.pi * ((kk * j) % max(n, 1)) / max(n, 1)
        cos, sin = w * np.cos(theta) / max(n, 1), w * np.sin(theta) / max(n, 1)
        out = b.subtract(_along(b, re, cos, r - 1), _along(b, im, sin, r - 1))
        return [xl.convert(b, out, ctx.output_type(0))]
    return lower


for _k, _suffix in ((1, ""), (2, "2D"), (3, "3D")):
    lowers(f"FFT{_suffix}")(_complex_fft(_k, False))
    lowers(f"IFFT{_suffix}")(_complex_fft(_k, True))
    lowers(f"RFFT{_suffix}")(_rfft(_k))
    lowers(f"IRFFT{_suffix}")(_irfft(_k))
