"""Runtime behaviour of executables: bounds checks catch a bad kernel, big kernels split across threads
give the same results, concurrent calls are safe, inputs are validated, zero-copy where possible."""

import numpy as np
import pytest

from tests.codegen.cg_helpers import CHECKED, check, module_of, parsed, random_array, run_threads
from tfxla_cluster.codegen import CodegenOptions, compile_module, elemental
from tfxla_cluster.codegen.engine import JitEngine
from tfxla_cluster.codegen.loops import Index
from tfxla_cluster.codegen.native_runtime import split_range
from tfxla_cluster.errors import InternalError, InvalidArgumentError
from tfxla_cluster.hlo.evaluator import evaluate
from tfxla_cluster.hlo.opcode import HloOpcode as O

RNG = np.random.default_rng(41)


def test_bounds_checks_report_an_out_of_range_read(monkeypatch):
    def off_by_one_reverse(em, instr):
        x = em.gen(instr.operands[0])
        n = instr.shape.dimensions[0]

        def g(index):
            i = index.get_dims(em.b)[0]
            from tfxla_cluster.codegen import irtypes as t
            return x(Index([em.b.sub(t.i64(n), i)], instr.operands[0].shape))  # should be n - 1 - i
        return g
    monkeypatch.setitem(elemental.GENERATORS, O.REVERSE, off_by_one_reverse)
    x = np.arange(5, dtype=np.float32)
    exe = compile_module(module_of(lambda b, p: b.reverse(p, (0,)), x), CHECKED)
    with pytest.raises(InternalError, match=r"accessed element 5 of a buffer of 5 elements"):
        exe(x)


def test_big_kernels_run_split_across_threads():
    x = random_array((512, 1031), np.float32, RNG, specials=False)
    y = random_array((1031,), np.float32, RNG, specials=False)

    def build(b, p, q):
        return b.tanh(b.add(b.multiply(p, p), b.broadcast(q, p.shape.dimensions, (1,))))
    m = module_of(build, x, y)
    par, _ = check(m, x, y, rtol=5e-6, atol=1e-6, options=CodegenOptions(bounds_checks=True, threads=2))
    assert max(k.tasks for k in par.kernels) == 2
    seq = compile_module(m, CodegenOptions(threads=1))
    assert max(k.tasks for k in seq.kernels) == 1
    # Separately compiled kernels may contract a*b+c into FMAs differently: equal to an ulp.
    np.testing.assert_allclose(par(x, y)[0], seq(x, y)[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(par(x, y)[0], par(x, y)[0])


def test_small_kernels_stay_single_threaded():
    x = random_array((8, 8), np.float32, RNG)
    exe = compile_module(module_of(lambda b, p: b.negate(p), x), CodegenOptions(threads=8))
    assert [k.tasks for k in exe.kernels] == [1]


def test_split_range_covers_everything_once():
    for n, k in [(10, 3), (2, 8), (1000, 7), (5, 1)]:
        ranges = split_range(n, k)
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_concurrent_calls_of_one_executable():
    x0 = random_array((300, 257), np.float32, RNG, specials=False)
    m = module_of(lambda b, p: b.exp(b.tanh(p)), x0)
    exe = compile_module(m, CodegenOptions(threads=2, parallel_min_cost=1 << 16))
    inputs = [random_array((300, 257), np.float32, np.random.default_rng(k), specials=False) for k in range(8)]
    wants = [evaluate(m, a) for a in inputs]

    def work(k):
        for _ in range(5):
            np.testing.assert_allclose(exe(inputs[k])[0], wants[k], rtol=5e-6)
    run_threads(work, 8)
    assert exe.calls == 40


def test_argument_validation_and_coercion():
    x = np.ones((2, 3), np.float32)
    exe = compile_module(module_of(lambda b, p: b.add(p, p), x))
    with pytest.raises(InvalidArgumentError, match="takes 1 arguments"):
        exe()
    with pytest.raises(InvalidArgumentError, match="expected f32, got numpy float64"):
        exe(np.ones((2, 3)))
    with pytest.raises(InvalidArgumentError, match=r"expected dimensions \[2, 3\]"):
        exe(np.ones((3, 2), np.float32))
    np.testing.assert_array_equal(exe([[1, 2, 3], [4, 5, 6]])[0], [[2, 4, 6], [8, 10, 12]])
    strided = np.ones((2, 6), np.float32)[:, ::2]  # non-contiguous input is copied, still right
    np.testing.assert_array_equal(exe(strided)[0], 2 * np.ones((2, 3)))


def test_column_major_entry_parameter_and_result():
    text = """HloModule cm
ENTRY %main (a: f32[3,4]) -> f32[3,4] {
  %a = f32[3,4]{0,1} parameter(0)
  ROOT %n = f32[3,4]{0,1} negate(%a)
}
"""
    a = random_array((3, 4), np.float32, RNG)
    _, got = check(parsed(text), a)
    assert got[0].shape == (3, 4)


def test_describe_lists_kernels():
    x = np.ones((4,), np.float32)
    exe = compile_module(module_of(lambda b, p: b.add(p, p), x))
    assert "k_add" in exe.describe() and exe.compile_seconds > 0


def test_elementwise_chain_reuses_its_operand_buffers():
    x = random_array((1000,), np.float32, RNG, specials=False)

    def build(b, p):
        a = b.negate(p)
        c = b.exp(b.tanh(a))
        return b.add(b.abs(c), p)
    exe, _ = check(module_of(build, x), x, rtol=1e-6, atol=1e-6)
    # The root updates its operand in place, so the chain is computed straight into the output buffer.
    assert exe.arena_bytes == 0


def test_in_place_chain_keeps_a_value_that_is_read_later():
    x = random_array((1000,), np.float32, RNG, specials=False)

    def build(b, p):
        a = b.negate(p)
        return b.add(b.abs(b.exp(a)), a)   # a is read again after exp: exp must not overwrite it
    exe, _ = check(module_of(build, x), x, rtol=1e-6, atol=1e-6)
    # a lives in the output (the root add rewrites it); exp and abs share the one temp.
    assert exe.arena_bytes == 4032


def test_llvm_ir_dumps_with_xla_file_names(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to={tmp_path}")
    x = np.ones((4,), np.float32)
    compile_module(module_of(lambda b, p: b.add(p, p), x, name="dumped"))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith(".dumped.ir-no-opt.ll") for n in names)
    dumped = [n for n in names if n.endswith(".dumped.ir-with-opt.ll")]
    assert len(dumped) == 1
    # Without dumps the compile prints no optimised IR; read later, it is the text the dump holds.
    monkeypatch.delenv("XLA_FLAGS")
    exe = compile_module(module_of(lambda b, p: b.add(p, p), x, name="dumped"), engine=JitEngine())
    assert exe.library._optimized_ir is None
    assert exe.optimized_ir == (tmp_path / dumped[0]).read_text(encoding="utf-8")


MARK_KERNEL = """
define void @mark(ptr %t, i64 %lo, i64 %hi) {
entry:
  %p = load ptr, ptr %t
  br label %h
h:
  %i = phi i64 [%lo, %entry], [%i1, %b]
  %c = icmp slt i64 %i, %hi
  br i1 %c, label %b, label %d
b:
  %q = getelementptr i64, ptr %p, i64 %i
  %v = atomicrmw add ptr %q, i64 1 seq_cst
  %i1 = add i64 %i, 1
  br label %h
d:
  ret void
}"""


@pytest.mark.parametrize("pool", ["native", "python"])
def test_thread_pools_run_every_item_exactly_once(pool):
    """Both fork-join pools (native pthreads + futex, and the Python fallback), also from 8 threads."""
    import ctypes
    from tfxla_cluster.codegen import native_runtime
    from tfxla_cluster.codegen.engine import get_engine
    native_runtime.ensure_registered()
    assert native_runtime.pool_kind() == "native"
    library = get_engine().compile(MARK_KERNEL, ["mark"])  # keep it: dropping it unmaps the code
    kernel = library.address_of("mark")
    if pool == "native":
        from tfxla_cluster.codegen.native_pool import ENTRY
        fn = native_runtime._native_pool.get_function(ENTRY, None, ctypes.c_void_p, ctypes.c_void_p,
                                                      ctypes.c_int64, ctypes.c_int64)
    else:
        fn = native_runtime._parallel_for_c

    def work(seed):
        for n, tasks in [(1, 1), (7, 5), (1000 + seed, 2), (3, 8), (50000, 3)]:
            out = np.zeros(n, np.int64)
            table = np.array([out.ctypes.data], np.uint64)
            fn(kernel, table.ctypes.data, n, tasks)
            assert (out == 1).all(), (n, tasks)
    run_threads(work, 8)


def test_a_python_pool_failure_is_kept_for_the_caller_not_swallowed(monkeypatch):
    """An exception inside the Python pool's ctypes callback cannot cross the C frame: it is kept per
    buffer table, and the executable raises it after the call (as an InternalError with the cause)."""
    from tfxla_cluster.codegen import native_runtime
    from tfxla_cluster.codegen.engine import get_engine
    library = get_engine().compile(MARK_KERNEL, ["mark"])  # keep it: dropping it unmaps the code

    def broken(n, tasks):
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(native_runtime, "split_range", broken)
    out = np.zeros(4, np.int64)
    table = np.array([out.ctypes.data], np.uint64)
    native_runtime._parallel_for_c(library.address_of("mark"), table.ctypes.data, 4, 2)
    failed = native_runtime.take_callback_error(table.ctypes.data)
    assert isinstance(failed, RuntimeError) and "new thread" in str(failed)
    assert native_runtime.take_callback_error(table.ctypes.data) is None


def test_one_long_row_is_split_in_chunks():
    """[1, N] results have one row: the innermost dim is chunked so both threads get work."""
    x = random_array((1, 100003), np.float32, RNG, specials=False)
    v = random_array((100003,), np.float32, RNG, specials=False)

    def build(b, p, q):
        return b.tanh(b.add(p, b.broadcast(q, (1, 100003), (1,))))  # a broadcast: not a flat loop
    exe, _ = check(module_of(build, x, v), x, v, rtol=5e-6, atol=1e-6,
                   options=CodegenOptions(bounds_checks=True, threads=2, parallel_min_cost=1 << 12))
    split = [k for k in exe.kernels if k.instruction.startswith("broadcast")]
    assert split and split[0].tasks == 2 and split[0].work_items == 8, exe.describe()


def test_the_native_pool_is_kept_in_the_native_cache_directory_with_the_compile_cache_off(tmp_path, monkeypatch):
    """With the compile cache off the pool's object code is kept per install (as the launch op's library):
    a later process loads it instead of compiling it; a torn file is compiled again and replaced."""
    from tfxla_cluster.codegen import native_runtime
    from tfxla_cluster.codegen.engine import get_engine
    from tfxla_cluster.codegen.native_pool import ENTRY, build_module
    monkeypatch.setenv("TFXLA_NATIVE_CACHE", str(tmp_path))
    engine, ir_text = get_engine(), build_module(max_workers=2)
    store = native_runtime._InstalledPoolStore()
    assert store.load(ir_text, engine, "pool", (ENTRY,)) is None
    compiled_before = engine.compiles
    store.store(ir_text, engine.compile(ir_text, [ENTRY], name="pool"))
    (path,) = tmp_path.glob("native_pool-*.o")
    pool = store.load(ir_text, engine, "pool", (ENTRY,))
    assert pool is not None and engine.compiles == compiled_before + 1   # loaded, not compiled again
    # Loaded, not run: a second pool's worker threads would outlive this test's library (unmapped code).
    assert pool.address_of(ENTRY) and pool.object_code == path.read_bytes()[-len(pool.object_code):]
    assert store.load(build_module(max_workers=3), engine, "pool", (ENTRY,)) is None   # other IR, other file
    path.write_bytes(path.read_bytes()[:-64])
    assert store.load(ir_text, engine, "pool", (ENTRY,)) is None
