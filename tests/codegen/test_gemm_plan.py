"""The GEMM strategy table of codegen/gemm.py (``plan_gemm``): each row picked on the shape class it is
for, block boundaries on multiples of the host BLAS's ``split_rule``, one OpenBLAS thread per task unless forced;
and every
strategy, forced on small odd shapes (threshold lowered with ``parallel_min_cost=1``), against TF's XLA
and bit-identical to the others (splitting rows or columns never changes an element's sum)."""
import numpy as np
import pytest
import tensorflow as tf

from tests.codegen.cg_helpers import module_of
from tfxla_cluster.codegen import CodegenOptions, compile_module, gemm
from tfxla_cluster.codegen.gemm import (GEMM_FLOPS_PER_BYTE, GEMM_OVERSPLIT, GEMM_TASK_MIN_COST, STRATEGIES,
    plan_gemm, split_rule)
from tfxla_cluster.codegen.native_runtime import blas_available

RNG = np.random.default_rng(16)
MIN = 1 << 18   # CodegenOptions.parallel_min_cost's default


@pytest.mark.parametrize("shape, threads, strategy", [
    ((1, 16, 16, 16), 2, "serial"),            # tiny: no pool, no thread launch
    ((1, 128, 128, 128), 2, "serial"),         # under two tasks' worth of flops
    ((48, 128, 128, 64), 2, "batch"),          # BERT's per-head products
    ((1, 512, 3072, 768), 2, "cols"),          # BERT FFN1: wider than tall
    ((1, 256, 512, 512), 2, "cols"),           # the MLP's dense layer
    ((1, 512, 768, 3072), 2, "cols"),
    ((1, 3072, 768, 512), 2, "rows"),          # taller than wide
    ((1, 1024, 1024, 1024), 2, "rows"),        # square
    ((1, 2, 1024, 1024), 2, "cols"),           # batch-2 dense layer (weight-bound): a column split
    ((1, 2, 64, 256), 2, "serial"),           # a small one
    ((1, 1024, 1024, 1024), 1, "serial"),      # one thread
])
def test_table(shape, threads, strategy):
    B, M, N, K = shape
    p = plan_gemm(B, M, N, K, threads, MIN, True)
    rule = split_rule(True)
    if strategy == "cols" and not rule.cols_keep_sums([M]):
        strategy = "rows"     # this host's OpenBLAS: column blocks of M rows would change sums
    assert p.strategy == strategy
    assert p.blas_threads == 1                       # only our pool's threads ever run
    # ranges: one per thread, up to GEMM_OVERSPLIT per thread for batches (claimed one at a time)
    assert 1 <= p.tasks <= threads * (GEMM_OVERSPLIT if strategy == "batch" else 1)
    assert p.nblk * p.row_block >= M and (p.nblk - 1) * p.row_block < M
    assert p.ncb * p.col_block >= N and (p.ncb - 1) * p.col_block < N
    if p.nblk > 1:
        assert p.row_block % rule.rows == 0
    if p.ncb > 1:
        assert rule.cols and p.col_block % rule.cols == 0
    if strategy == "serial":
        assert p.tasks == 1 and p.nblk == p.ncb == 1
    # the threshold: two tasks' worth of flops (operand bytes count as GEMM_FLOPS_PER_BYTE flops each)
    work = max(2 * B * M * N * K, GEMM_FLOPS_PER_BYTE * 4 * B * (M * K + K * N))
    assert (work >= 2 * GEMM_TASK_MIN_COST * MIN) == (p.strategy != "serial") or threads == 1


def test_forced_blas_is_the_only_multithreaded_blas():
    assert plan_gemm(1, 512, 512, 512, 2, MIN, True, "blas").blas_threads == 2
    assert all(plan_gemm(1, 512, 512, 512, 2, MIN, True, s).blas_threads == 1 for s in STRATEGIES if s != "blas")


@pytest.fixture(scope="module")
def cases():
    out = []
    for batch, m, k, n, tb in [((), 37, 50, 150, False), ((), 90, 41, 70, True), ((3,), 40, 33, 29, False)]:
        x = RNG.standard_normal(batch + (m, k)).astype(np.float32)
        y = RNG.standard_normal(batch + ((n, k) if tb else (k, n))).astype(np.float32)
        want = tf.function(lambda a, b: tf.linalg.matmul(a, b, transpose_b=tb), jit_compile=True)(x, y).numpy()
        nb = len(batch)
        bd = tuple(range(nb))
        mod = module_of(lambda bb, p, q: bb.dot(p, q, (nb + 1,), (nb + 1,) if tb else (nb,), bd, bd), x, y)
        out.append((mod, x, y, want))
    return out


@pytest.mark.parametrize("threads", [2, 3])
def test_every_strategy_vs_tf_xla(cases, threads, monkeypatch):
    for mod, x, y, want in cases:
        got = {}
        for s in STRATEGIES:
            monkeypatch.setattr(gemm, "FORCE_STRATEGY", s)
            exe = compile_module(mod, CodegenOptions(bounds_checks=True, threads=threads, parallel_min_cost=1))
            [k] = [kk for kk in exe.kernels if kk.kind == "gemm"]
            assert (k.tasks > 1) == (s not in ("serial", "blas") and k.work_items > 1)
            got[s] = exe(x, y)[0]
            scale = max(1.0, float(np.max(np.abs(want))))
            np.testing.assert_allclose(got[s], want, rtol=1e-5, atol=1e-5 * scale, err_msg=s)
        if blas_available():
            for s in STRATEGIES:
                np.testing.assert_array_equal(got[s], got["serial"], err_msg=s)


def test_old_openblas_without_thread_local_count_runs_single_threaded():
    import ctypes

    from tfxla_cluster.codegen.native_runtime import single_thread_blas
    got = []
    setter = ctypes.CFUNCTYPE(None, ctypes.c_int)(got.append)
    addr = ctypes.cast(setter, ctypes.c_void_p).value
    assert single_thread_blas({"s": 1, "d": 1, "global_threads": addr}) and got == [1]
    assert not single_thread_blas({"s": 1, "d": 1, "threads": 5, "global_threads": addr}) and got == [1]
    assert not single_thread_blas({})
