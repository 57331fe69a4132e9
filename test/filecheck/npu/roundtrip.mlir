// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// A double-buffered tile step: DMA in, weights, a hardware loop over k, vector epilogue, DMA out.
npu.program attributes {target = "edge"} {
  npu.nop signal=s2, signal2=s4
  npu.li rd=r1, imm=65536
  npu.dma.load dram=r0+0x1000, local=r1+0x0, n0=4096, n1=1, n2=1, wait=s2, signal=s1
  npu.mx.loadw w=r1+0x0, k=16, n=16, stride=16, dtype=int8, wait=s1
  npu.loop count=r3-1, body=2
  npu.addi rd=r1, rs=r1, imm=256
  npu.mx.matmul act=r2+0x40, acc=r0+0x2000000, m=512, astride=256, cstride=64, dtype=int8, accum=1, signal=s3
  npu.vec.requant dst=0x100, a=0x2000000, b=r4+0x200, rows=512, cols=16, dstride=16, astride=64, bstride=0, dt=int8, at=int32, bt=fp32, bmode=row, imm=0.0, wait=s3
  npu.vec.mul dst=0x0, a=0x0, rows=4, cols=8, dstride=32, astride=32, dt=fp32, at=fp32, bt=fp32, bmode=imm, imm=1.0e-05
  npu.vec.exp dst=0x0, a=0x0, rows=4, cols=8, dstride=32, astride=32, dt=bf16, at=bf16
  npu.vec.dequant dst=r5+0x4000, q=r6+0x0, s=0x3000, rows=128, cols=16, dstride=32, qstride=16, sstride=64, dt=bf16, fmt=q4_1, blocks=col, wait=s1, wait2=s3
  npu.halt
}

// CHECK:      npu.program attributes {target = "edge"} {
// CHECK-NEXT:   npu.nop signal=s2, signal2=s4
// CHECK-NEXT:   npu.li rd=r1, imm=65536
// CHECK-NEXT:   npu.dma.load dram=r0+0x1000, local=r1+0x0, n0=4096, n1=1, n2=1, ds1=0, ds2=0, ls1=0, ls2=0, wait=s2, signal=s1
// CHECK-NEXT:   npu.mx.loadw w=r1+0x0, k=16, n=16, stride=16, dtype=int8, wait=s1
// CHECK-NEXT:   npu.loop count=r3-1, body=2
// CHECK-NEXT:   npu.addi rd=r1, rs=r1, imm=256
// CHECK-NEXT:   npu.mx.matmul act=r2+0x40, acc=r0+0x2000000, m=512, astride=256, cstride=64, dtype=int8, accum=1, signal=s3
// CHECK-NEXT:   npu.vec.requant dst=r0+0x100, a=r0+0x2000000, b=r4+0x200, rows=512, cols=16, dstride=16, astride=64, bstride=0, dt=int8, at=int32, bt=fp32, bmode=row, imm=0.0, wait=s3
// CHECK-NEXT:   npu.vec.mul dst=r0+0x0, a=r0+0x0, b=r0+0x0, rows=4, cols=8, dstride=32, astride=32, bstride=0, dt=fp32, at=fp32, bt=fp32, bmode=imm, imm=1.0e-05
// CHECK-NEXT:   npu.vec.exp dst=r0+0x0, a=r0+0x0, rows=4, cols=8, dstride=32, astride=32, dt=bf16, at=bf16
// CHECK-NEXT:   npu.vec.dequant dst=r5+0x4000, q=r6+0x0, s=r0+0x3000, rows=128, cols=16, dstride=32, qstride=16, sstride=64, dt=bf16, fmt=q4_1, blocks=col, wait=s1, wait2=s3
// CHECK-NEXT:   npu.halt
// CHECK-NEXT: }

// GENERIC:      "npu.program"() ({
// GENERIC:        "npu.mx.matmul"() <{act_base = 2 : i64, act = 64 : i64, acc_base = 0 : i64, acc = 33554432 : i64, m = 512 : i64, astride = 256 : i64, cstride = 64 : i64, dtype = 0 : i64, accum = 1 : i64, signal = 3 : i64}> : () -> ()
// GENERIC:        "npu.vec.mul"() <{{.*}}imm = 925353388 : i64}> : () -> ()
// GENERIC:        "npu.vec.dequant"() <{{.*}}dt = 3 : i64, fmt = 1 : i64, blocks = 0 : i64, wait = 1 : i64, wait2 = 3 : i64}> : () -> ()
