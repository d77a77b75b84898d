"""A fork-join thread pool in native code (LLVM IR built here, compiled once per process by the JIT).

XLA:CPU splits kernels with ``__xla_cpu_runtime_ParallelForkJoin`` on Eigen's thread pool; a Python
pool would cost tens of microseconds per split (GIL hand-offs, thread wake-ups), more than a medium
kernel takes. This pool never touches Python:

    void tfxla_native_parallel_for(ptr kernel, ptr table, i64 n, i64 tasks)

runs ``kernel(table, lo, hi)`` on ``tasks`` even ranges of [0, n): the caller takes ranges itself and
up to ``tasks - 1`` pthreads (started on first use, never stopped; at most one fewer than the CPUs)
take the others.

Protocol (sequentially consistent atomics throughout):
- one job at a time: callers serialise on a pthread mutex (concurrent executables queue up);
- the job is published as one 64-bit word ``generation:32 | next:16 | tasks:16``; a thread claims
  range ``next`` with a compare-and-swap that also checks the generation, so a worker that wakes up
  late can never take a range of a later job; ``done`` counts finished ranges;
- workers spin briefly on the generation word, then sleep on it with ``futex``; the caller waits for
  ``done == tasks`` (spinning, then yielding) before it releases the mutex — so the job's fields stay
  valid while any range of it runs.
"""
from __future__ import annotations

from llvmlite import ir

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()
VOID = ir.VoidType()
SYS_FUTEX, FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 202, 128, 129
WORKER_SPINS = 4000
CALLER_SPINS = 1 << 14
ENTRY = "tfxla_native_parallel_for"


def _c(ty, v):
    return ir.Constant(ty, v)


def _store(b: ir.IRBuilder, value, ptr) -> None:
    """A sequentially consistent store (llvmlite's store_atomic wants typed pointers: use xchg)."""
    b.atomic_rmw("xchg", ptr, value, "seq_cst")


def build_module(triple: str = "", max_workers: int = 0) -> str:
    """The pool's IR. ``max_workers`` > 0 caps the pthreads (a job of more ranges than threads has its
    ranges claimed one at a time by whichever thread is free: load balancing, not more threads)."""
    m = ir.Module("tfxla_native_pool")
    if triple:
        m.triple = triple

    def glob(name, ty, init=None):
        g = ir.GlobalVariable(m, ty, name)
        g.initializer = ir.Constant(ty, init if init is not None else None)
        g.linkage = "internal"
        return g

    mutex = glob("pool_mutex", ir.ArrayType(I8, 64), bytearray(64))  # PTHREAD_MUTEX_INITIALIZER is zeros
    mutex.align = 16
    gen = glob("pool_gen", I32, 0)
    word = glob("pool_word", I64, 0)
    done = glob("pool_done", I64, 0)
    fn_g = glob("pool_fn", PTR)
    table_g = glob("pool_table", PTR)
    n_g = glob("pool_n", I64, 0)
    started = glob("pool_started", I32, 0)

    kernel_ty = ir.FunctionType(VOID, [PTR, I64, I64])
    syscall = ir.Function(m, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
    pthread_create = ir.Function(m, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]), "pthread_create")
    lock = ir.Function(m, ir.FunctionType(I32, [PTR]), "pthread_mutex_lock")
    unlock = ir.Function(m, ir.FunctionType(I32, [PTR]), "pthread_mutex_unlock")
    sched_yield = ir.Function(m, ir.FunctionType(I32, []), "sched_yield")
    pause = ir.Function(m, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")

    # ---- run_ranges(my_gen): claim and run ranges of job ``my_gen`` until none are left
    run = ir.Function(m, ir.FunctionType(VOID, [I32]), "pool_run_ranges")
    run.linkage = "internal"
    b = ir.IRBuilder(run.append_basic_block("entry"))
    my_gen = run.args[0]
    head, claim, work, out = (run.append_basic_block(x) for x in ("head", "claim", "work", "out"))
    b.branch(head)
    b.position_at_end(head)
    w = b.load_atomic(word, "seq_cst", 8, typ=I64)
    w_gen = b.trunc(b.lshr(w, _c(I64, 32)), I32)
    nxt = b.and_(b.lshr(w, _c(I64, 16)), _c(I64, 0xFFFF))
    tasks = b.and_(w, _c(I64, 0xFFFF))
    ok = b.and_(b.icmp_unsigned("==", w_gen, my_gen), b.icmp_unsigned("<", nxt, tasks))
    b.cbranch(ok, claim, out)
    b.position_at_end(claim)
    res = b.cmpxchg(word, w, b.add(w, _c(I64, 1 << 16)), "seq_cst", "seq_cst")
    b.cbranch(b.extract_value(res, 1), work, head)
    b.position_at_end(work)
    n = b.load_atomic(n_g, "seq_cst", 8, typ=I64)
    base, rem = b.udiv(n, tasks), b.urem(n, tasks)
    lo = b.add(b.mul(nxt, base), b.select(b.icmp_unsigned("<", nxt, rem), nxt, rem))
    hi = b.add(b.add(lo, base), b.zext(b.icmp_unsigned("<", nxt, rem), I64))
    # A typed-pointer view of the kernel pointer gives llvmlite the callee's type (LLVM reads it as ptr).
    fn = b.load_atomic(fn_g, "seq_cst", 8, typ=ir.PointerType(kernel_ty))
    table = b.load_atomic(table_g, "seq_cst", 8, typ=PTR)
    b.call(fn, [table, lo, hi])
    b.atomic_rmw("add", done, _c(I64, 1), "seq_cst")
    b.branch(head)
    b.position_at_end(out)
    b.ret_void()

    # ---- worker(arg): wait for a new generation, run its ranges, repeat forever
    worker = ir.Function(m, ir.FunctionType(PTR, [PTR]), "pool_worker")
    worker.linkage = "internal"
    b = ir.IRBuilder(worker.append_basic_block("entry"))
    local = b.alloca(I32)
    spins = b.alloca(I32)
    b.store(b.load_atomic(gen, "seq_cst", 4, typ=I32), local)
    wait, spin, sleep, wake = (worker.append_basic_block(x) for x in ("wait", "spin", "sleep", "wake"))
    b.branch(wait)
    b.position_at_end(wait)
    b.store(_c(I32, 0), spins)
    check = worker.append_basic_block("check")
    b.branch(check)
    b.position_at_end(check)
    g = b.load_atomic(gen, "seq_cst", 4, typ=I32)
    b.cbranch(b.icmp_unsigned("!=", g, b.load(local)), wake, spin)
    b.position_at_end(spin)
    k = b.load(spins)
    b.store(b.add(k, _c(I32, 1)), spins)
    do_sleep = b.icmp_unsigned(">=", k, _c(I32, WORKER_SPINS))
    pause_bb = worker.append_basic_block("pause")
    b.cbranch(do_sleep, sleep, pause_bb)
    b.position_at_end(pause_bb)
    b.call(pause, [])
    b.branch(check)
    b.position_at_end(sleep)
    b.call(syscall, [_c(I64, SYS_FUTEX), gen, _c(I32, FUTEX_WAIT_PRIVATE), b.load(local), ir.Constant(PTR, None),
                     ir.Constant(PTR, None), _c(I32, 0)])
    b.store(_c(I32, 0), spins)
    b.branch(check)
    b.position_at_end(wake)
    g2 = b.load_atomic(gen, "seq_cst", 4, typ=I32)
    b.store(g2, local)
    b.call(run, [g2])
    b.branch(wait)

    # ---- parallel_for(fn, table, n, tasks)
    pf = ir.Function(m, ir.FunctionType(VOID, [PTR, PTR, I64, I64]), ENTRY)
    fn_a, table_a, n_a, tasks_a = pf.args
    b = ir.IRBuilder(pf.append_basic_block("entry"))
    tid = b.alloca(I64)
    tasks_c = b.select(b.icmp_unsigned(">", tasks_a, _c(I64, 0xFFFF)), _c(I64, 0xFFFF), tasks_a)
    b.call(lock, [mutex])
    # Start workers up to tasks - 1 (they live for the rest of the process).
    grow_head, grow, ready = (pf.append_basic_block(x) for x in ("grow.head", "grow", "ready"))
    b.branch(grow_head)
    b.position_at_end(grow_head)
    have = b.load(started)
    want = b.trunc(b.sub(tasks_c, _c(I64, 1)), I32)
    if max_workers > 0:
        want = b.select(b.icmp_signed(">", want, _c(I32, max_workers)), _c(I32, max_workers), want)
    b.cbranch(b.icmp_signed("<", have, want), grow, ready)
    b.position_at_end(grow)
    b.call(pthread_create, [tid, ir.Constant(PTR, None), worker, ir.Constant(PTR, None)])
    b.store(b.add(have, _c(I32, 1)), started)
    b.branch(grow_head)
    b.position_at_end(ready)
    _store(b, fn_a, fn_g)
    _store(b, table_a, table_g)
    _store(b, n_a, n_g)
    _store(b, _c(I64, 0), done)
    new_gen = b.add(b.load_atomic(gen, "seq_cst", 4, typ=I32), _c(I32, 1))
    _store(b, b.or_(b.shl(b.zext(new_gen, I64), _c(I64, 32)), tasks_c), word)
    _store(b, new_gen, gen)
    b.call(syscall, [_c(I64, SYS_FUTEX), gen, _c(I32, FUTEX_WAKE_PRIVATE), _c(I32, 0x7FFFFFFF),
                     ir.Constant(PTR, None), ir.Constant(PTR, None), _c(I32, 0)])
    b.call(run, [new_gen])
    spins = b.alloca(I32)
    b.store(_c(I32, 0), spins)
    wait, spin, yld, finish = (pf.append_basic_block(x) for x in ("wait", "spin", "yield", "finish"))
    b.branch(wait)
    b.position_at_end(wait)
    d = b.load_atomic(done, "seq_cst", 8, typ=I64)
    b.cbranch(b.icmp_unsigned(">=", d, tasks_c), finish, spin)
    b.position_at_end(spin)
    k = b.load(spins)
    b.store(b.add(k, _c(I32, 1)), spins)
    pause_bb = pf.append_basic_block("pause")
    b.cbranch(b.icmp_unsigned(">=", k, _c(I32, CALLER_SPINS)), yld, pause_bb)
    b.position_at_end(pause_bb)
    b.call(pause, [])
    b.branch(wait)
    b.position_at_end(yld)
    b.call(sched_yield, [])
    b.branch(wait)
    b.position_at_end(finish)
    b.call(unlock, [mutex])
    b.ret_void()
    return str(m)
