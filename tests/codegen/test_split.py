"""Split LLVM modules (codegen/split.py) compiled on several threads (engine.JitEngine): same results as the
whole module, the same object code whatever the thread count, the parts' LLVM work overlapping in time."""
import numpy as np
import pytest
import tensorflow as tf

from tfxla_cluster.codegen import CodegenOptions, compile_module, engine, split
from tfxla_cluster.codegen.engine import JitEngine, pack_objects, unpack_objects
from tfxla_cluster.hlo.builder import HloBuilder
from tfxla_cluster.hlo.ir import HloModule
from tfxla_cluster.hlo.opcode import HloOpcode as O
from tfxla_cluster.hlo.parser import parse_module
from tfxla_cluster.hlo.shape import PrimitiveType, Shape

# IEEE-exact ops, each its own kernel (the module is not fused): TF gives the same bits.
CHAIN = [O.ADD, O.MULTIPLY, O.SUBTRACT, O.MAXIMUM, O.MINIMUM, O.ADD, O.MULTIPLY, O.SUBTRACT]
TF_OPS = {O.ADD: tf.add, O.MULTIPLY: tf.multiply, O.SUBTRACT: tf.subtract, O.MAXIMUM: tf.maximum,
          O.MINIMUM: tf.minimum}


def _module(chain=CHAIN) -> HloModule:
    b = HloBuilder("main")
    shape = Shape.array(PrimitiveType.F32, (64, 48))
    x, y = b.parameter(0, shape, "x"), b.parameter(1, shape, "y")
    v = x
    for k, op in enumerate(chain):
        v = b.binary(op, b.unary(O.ABS if k % 2 else O.NEGATE, v), y)
    m = HloModule("chain")
    m.add_entry_computation(b.build(v))
    return parse_module(m.to_string())


def _tf_chain(x, y, chain=CHAIN):
    v = tf.constant(x)
    for k, op in enumerate(chain):
        v = TF_OPS[op](tf.abs(v) if k % 2 else tf.negative(v), y)
    return v.numpy()


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(7)
    return [rng.standard_normal((64, 48)).astype(np.float32) for _ in range(2)]


@pytest.fixture
def small_parts(monkeypatch):
    monkeypatch.setattr(split, "PART_IR_SIZE", 1)   # every module is big enough to split


def _compile(options: CodegenOptions, chain=CHAIN):
    eng = JitEngine(options.opt_level, target=options.cpu_target)
    # Splitting is about a module's own kernels: shared across the process (kernel_share.py), the kernels of a
    # module compiled just before would be imported and leave nothing to split. (Not through the environment:
    # the process's engine, made on first use, reads it once.)
    eng.share_kernels = False
    return compile_module(_module(chain), options, eng)


@pytest.mark.parametrize("pool", [False, True], ids=["direct-calls", "pool-kernels"])
def test_split_module_runs_as_tf_and_as_whole(small_parts, inputs, pool):
    # parallel_min_cost=1 hands every kernel to tfxla_parallel_for: their addresses cross parts.
    extra = dict(parallel_min_cost=1, threads=2) if pool else {}
    whole = _compile(CodegenOptions(split_count=1, **extra))
    parts = _compile(CodegenOptions(split_count=4, **extra))
    assert whole.library.stats.parts == 1 and parts.library.stats.parts == 4
    assert len(unpack_objects(parts.library.object_code)) == 4
    want = _tf_chain(*inputs)
    np.testing.assert_array_equal(whole(*inputs)[0], want)
    np.testing.assert_array_equal(parts(*inputs)[0], want)
    assert parts.optimized_ir.count("; ---- part ") == 4


def test_object_code_does_not_depend_on_threads(small_parts, monkeypatch, inputs):
    blobs = []
    for threads in ("1", "2"):
        monkeypatch.setenv("TFXLA_COMPILE_THREADS", threads)
        exe = _compile(CodegenOptions(split_count=3))
        assert exe.library.stats.threads == int(threads)
        blobs.append(exe.library.object_code)
    assert blobs[0] == blobs[1]
    again = JitEngine().load_object(blobs[0], ["tfxla_entry"])   # what a persistent-cache hit does
    assert again.address_of("tfxla_entry")


def test_parts_compile_concurrently(small_parts, monkeypatch):
    # llvmlite's own lock would serialise the parts' pass pipelines; ours run side by side.
    monkeypatch.setenv("TFXLA_COMPILE_THREADS", "2")
    exe = _compile(CodegenOptions(split_count=4))
    spans = sorted(exe.library.stats.spans)
    assert len(spans) == 4
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans


def test_part_count_follows_size_and_idle_threads():
    big, mid = 2 * split.PART_IR_SIZE, 2 * split.MIN_PART_IR_SIZE
    assert split.part_count(big, 32) == 2 and split.part_count(big, 1) == 1
    assert split.part_count(big, 32, threads=4) == 4     # more idle threads: smaller parts
    assert split.part_count(mid, 32) == 1                 # one thread: a mid-size module stays whole
    assert split.part_count(mid, 32, threads=2) == 2 and split.part_count(mid, 32, threads=8) == 2
    assert split.part_count(mid - 1, 32, threads=2) == 1 and split.part_count(mid, 1, threads=2) == 1


def test_mid_size_module_is_split_for_idle_threads_with_the_same_results(monkeypatch, inputs):
    # No size patched: a longer chain's IR is split in two only when two threads are free for it.
    parts = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("TFXLA_COMPILE_THREADS", threads)
        exe = _compile(CodegenOptions(parallel_min_cost=1, threads=2), CHAIN * 8)
        assert len(exe.ir) >= 2 * split.MIN_PART_IR_SIZE
        parts[threads] = exe
    assert parts["1"].library.stats.parts == 1 and parts["2"].library.stats.parts == 2
    want = _tf_chain(*inputs, CHAIN * 8)
    for exe in parts.values():
        np.testing.assert_array_equal(exe(*inputs)[0], want)


def test_thunks_and_external_kernels(small_parts):
    text = compile_module(_module(), CodegenOptions(split_count=1)).ir
    parts = split.split_module(text, 3)
    assert len(parts) == 3
    defined = [set(split.parse_functions(p)[1]) for p in parts]
    kernels = set(split.parse_functions(text)[1]) - {"tfxla_entry"}
    assert set().union(*defined) >= kernels and sum(len(d & kernels) for d in defined) == len(kernels)
    # The entry calls the kernels of other parts through thunks on the same constant range.
    assert '.r0_' in parts[0] and 'declare void @"' in parts[0]


def test_text_with_a_global_is_not_split():
    text = '@"g" = global i32 0\ndefine void @"f"() {\nentry:\n  ret void\n}\n' \
           'define internal void @"k"(ptr %"t", i64 %"lo", i64 %"hi") {\nentry:\n  ret void\n}\n'
    assert split.split_module(text, 4) == [text]


def test_pack_objects_round_trip_and_truncation():
    objs = [b"\x7fELF-one", b"\x7fELF-two-longer", b""]
    blob = pack_objects(objs)
    assert unpack_objects(blob) == objs
    assert unpack_objects(b"\x7fELF-single") == [b"\x7fELF-single"] and pack_objects([b"x"]) == b"x"
    with pytest.raises(ValueError):
        unpack_objects(blob[:-1])
    assert engine.compile_threads() >= 1
