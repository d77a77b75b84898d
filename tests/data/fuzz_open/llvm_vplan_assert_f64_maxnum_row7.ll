; LLVM (llvmlite's build, assertions on) aborts the process optimizing this loop with JitEngine.optimize's lite
; pipeline (ir_size >= LITE_PIPELINE_IR_SIZE: O2 + vectorisers, no unroll/interleave): LoopVectorize.cpp
; computeBestVF: 'VPlan cost model and legacy cost model disagreed'. f64 maxnum/minnum row reductions of 6 or 7
; elements (f32, llvm.maximum, other lengths, and the full pipeline are fine). Found by tools/fuzz.py: a merged batch
; (a module > 64 KiB) holding a float64[2,7] softmax (seed 41 batch 41001893..902, old generator).
; Worked around in our code: reduction loops with a static trip count below loops.SMALL_REDUCTION_TRIPS carry
; llvm.loop.vectorize.enable=false (tests/codegen/test_small_reduction_loops.py). This raw IR still aborts LLVM.

define void @k(ptr noalias %buf0, ptr noalias %buf1, i64 %lo, i64 %hi) {
setup:
  %acc = alloca double
  br label %oh
oh:
  %o = phi i64 [%lo, %setup], [%on, %rd]
  %c = icmp slt i64 %o, %hi
  br i1 %c, label %ob, label %od
ob:
  store double 0xFFF0000000000000, ptr %acc
  br label %rh
od:
  ret void
rh:
  %r = phi i64 [0, %ob], [%rn, %rb]
  %c2 = icmp slt i64 %r, 7
  br i1 %c2, label %rb, label %rd
rb:
  %a = load double, ptr %acc
  %m = mul nsw nuw i64 %o, 7
  %i = add nsw nuw i64 %m, %r
  %p = getelementptr inbounds double, ptr %buf0, i64 %i
  %x = load double, ptr %p
  %y = call double @llvm.maxnum.f64(double %a, double %x)
  store double %y, ptr %acc
  %rn = add nsw i64 %r, 1
  br label %rh
rd:
  %z = load double, ptr %acc
  %q = getelementptr inbounds double, ptr %buf1, i64 %o
  store double %z, ptr %q
  %on = add nsw i64 %o, 1
  br label %oh
}
declare double @llvm.maxnum.f64(double, double)
