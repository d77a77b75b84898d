"""FFT/IFFT/RFFT/IRFFT in 1, 2 and 3 dimensions against TF's own XLA and TF eager. The programs build their
complex input with tf.complex and return real/imag parts (the harness's arguments and results are real;
complex arguments and results are tested in test_tf2hlo_complex)."""
from __future__ import annotations

import pytest
import tensorflow as tf

from tests.tf2hlo.tf2hlo_harness import Case, run_batch, values


def cplx(fn):
    def f(re, im):
        y = fn(tf.complex(re, im))
        return tf.math.real(y), tf.math.imag(y)
    return f
def real_in(fn):
    def f(x):
        y = fn(x)
        return tf.math.real(y), tf.math.imag(y)
    return f
T = dict(rtol=1e-5, atol=1e-5)
T64 = dict(rtol=1e-12, atol=1e-12)


def cases():
    return [
     Case("FFT", cplx(tf.signal.fft), [values("f32",(2,8)), values("f32",(2,8),seed=1)], **T),
     Case("IFFT f64", cplx(tf.signal.ifft), [values("f64",(3,5)), values("f64",(3,5),seed=1)], **T64),
     Case("FFT2D", cplx(tf.signal.fft2d), [values("f32",(2,4,6)), values("f32",(2,4,6),seed=1)], **T),
     Case("IFFT2D", cplx(tf.signal.ifft2d), [values("f32",(3,5)), values("f32",(3,5),seed=1)], **T),
     Case("FFT3D", cplx(tf.signal.fft3d), [values("f32",(2,3,4)), values("f32",(2,3,4),seed=1)], **T),
     Case("IFFT3D f64", cplx(tf.signal.ifft3d), [values("f64",(1,2,3,4)), values("f64",(1,2,3,4),seed=1)], **T64),
     Case("RFFT", real_in(lambda x: tf.signal.rfft(x)), [values("f32",(2,8))], **T),
     Case("RFFT crop/pad", real_in(lambda x: tf.signal.rfft(x, fft_length=[5])), [values("f32",(3,7))], **T),
     Case("RFFT pad", real_in(lambda x: tf.signal.rfft(x, fft_length=[10])), [values("f64",(7,))], **T64),
     Case("RFFT2D", real_in(lambda x: tf.signal.rfft2d(x, fft_length=[4, 6])), [values("f32",(2,3,7))], **T),
     Case("RFFT3D", real_in(lambda x: tf.signal.rfft3d(x)), [values("f32",(2,3,4))], **T),
     Case("IRFFT", lambda re, im: tf.signal.irfft(tf.complex(re, im)), [values("f32",(2,5)), values("f32",(2,5),seed=1)], **T),
     Case("IRFFT odd length", lambda re, im: tf.signal.irfft(tf.complex(re, im), fft_length=[7]), [values("f64",(3,4)), values("f64",(3,4),seed=1)], **T64),
     Case("IRFFT2D", lambda re, im: tf.signal.irfft2d(tf.complex(re, im), fft_length=[4, 6]), [values("f32",(3,4,4)), values("f32",(3,4,4),seed=1)], **T),
     Case("IRFFT3D", lambda re, im: tf.signal.irfft3d(tf.complex(re, im), fft_length=[2, 3, 5]), [values("f32",(2,3,3)), values("f32",(2,3,3),seed=1)], **T),
    ]


@pytest.mark.parametrize("reference", ["tf_xla", "tf"])
def test_fft_ops(reference: str) -> None:
    run_batch(cases(), reference=reference)
