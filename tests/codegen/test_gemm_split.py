"""GEMM kernels (codegen/gemm.py) split over threads by row blocks and, when rows are too few (a dense
layer at batch 2), by column blocks too, and by column blocks only when wider than tall (each thread packs
half of B) — where the host's OpenBLAS keeps every sum so (``split_rule``): results against numpy for
plain and transposed operands."""
import numpy as np
import pytest

from tests.codegen.cg_helpers import module_of, random_array
from tfxla_cluster.codegen import CodegenOptions, compile_module
from tfxla_cluster.codegen.gemm import split_rule
from tfxla_cluster.codegen.native_runtime import blas_available

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("tb", [False, True], ids=["B", "B^T"])
@pytest.mark.parametrize("m", [1, 2, 5, 40])
def test_few_rows_split_by_columns(m, tb):
    k, n = 300, 701
    x = random_array((m, k), np.float32, RNG, specials=False)
    y = random_array((n, k) if tb else (k, n), np.float32, RNG, specials=False)
    mod = module_of(lambda b, p, q: b.dot(p, q, (1,), (1,) if tb else (0,)), x, y)
    want = x.astype(np.float64) @ (y.T if tb else y).astype(np.float64)
    for threads in (1, 2, 3):
        exe = compile_module(mod, CodegenOptions(bounds_checks=True, threads=threads, parallel_min_cost=1))
        np.testing.assert_allclose(exe(x, y)[0], want, rtol=2e-5, atol=2e-4)
        if blas_available():
            [gemm] = [kk for kk in exe.kernels if kk.kind == "gemm"]
            # work items: row blocks (of at least 16 rows) × column blocks (of at least 64 columns); n > m
            # here, so a split over threads is by columns only (as many items as threads either way)
            # — when this host's OpenBLAS keeps the sums of column blocks of m rows (``split_rule``);
            # else by rows only, at its row alignment
            rule = split_rule(True)
            rows = max(1, min(threads, -(-m // 16)))
            if rule.cols_keep_sums([m]):
                assert gemm.work_items == rows * max(1, min(threads // rows, n // 64) if rows < threads else 1)
            else:
                size = min(m, -(-(-(-m // rows)) // rule.rows) * rule.rows)   # rows / block, aligned
                assert gemm.work_items == -(-m // size)


def test_batched_gemm_has_more_ranges_than_threads():
    # Per-head products: the batch is split into up to two ranges per thread, handed out one at a time
    # (a thread a busy core slows down leaves the rest to the other); every batch still computed once.
    x = random_array((5, 20, 30), np.float32, RNG, specials=False)
    y = random_array((5, 30, 40), np.float32, RNG, specials=False)
    mod = module_of(lambda b, p, q: b.dot(p, q, (2,), (1,), (0,), (0,)), x, y)
    want = np.einsum("bmk,bkn->bmn", x.astype(np.float64), y.astype(np.float64))
    for threads in (1, 2, 3):
        exe = compile_module(mod, CodegenOptions(bounds_checks=True, threads=threads, parallel_min_cost=1))
        np.testing.assert_allclose(exe(x, y)[0], want, rtol=2e-5, atol=2e-4)
        [gemm] = [kk for kk in exe.kernels if kk.kind == "gemm"]
        assert gemm.work_items == 5 and gemm.tasks == (1 if threads == 1 else min(5, 2 * threads))
