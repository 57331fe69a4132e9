// RUN: infer-opt %s --split-input-file --verify-diagnostics

npu.program {
  // expected-error @+1 {{npu.mx.matmul: acc = 33554434 is not aligned to 4 bytes}}
  npu.mx.matmul act=0x0, acc=0x2000002, m=16, astride=16, cstride=64, dtype=int8, accum=0
}

// -----

npu.program {
  // expected-error @+1 {{npu.mx.matmul: m must be positive, got 0}}
  npu.mx.matmul act=0x0, acc=0x2000000, m=0, astride=16, cstride=64, dtype=int8, accum=0
}

// -----

npu.program {
  // expected-error @+1 {{npu.li: rd = 40 out of range [0, 31] (5-bit unsigned)}}
  "npu.li"() <{rd = 40 : i64, imm = 0 : i64}> : () -> ()
}

// -----

npu.program {
  // expected-error @+1 {{npu.nop: wait = 32 out of range [0, 31]}}
  "npu.nop"() <{wait = 32 : i64}> : () -> ()
}

// -----

npu.program {
  // expected-error @+1 {{npu.dma.load: n0 = 2000000 out of range [0, 1048575] (20-bit unsigned)}}
  npu.dma.load dram=0x0, local=0x0, n0=2000000, n1=1, n2=1
}

// -----

npu.program {
  // expected-error @+1 {{npu.vec.add: dst = 2 is not aligned to 4 bytes}}
  npu.vec.add dst=0x2, a=0x0, b=0x0, rows=1, cols=1, dt=fp32, at=fp32, bt=fp32, bmode=tile, imm=0.0
}

// -----

npu.program {
  // expected-error @+1 {{npu.vec.add: astride = 6 is not aligned to 4 bytes}}
  npu.vec.add dst=0x0, a=0x0, b=0x0, rows=1, cols=1, astride=6, dt=fp32, at=fp32, bt=fp32, bmode=tile, imm=0.0
}

// -----

npu.program {
  // expected-error @+1 {{npu.vec.relu: dt = 7 is a reserved dtype code}}
  "npu.vec.relu"() <{dst_base = 0 : i64, dst = 0 : i64, a_base = 0 : i64, a = 0 : i64, rows = 1 : i64, cols = 1 : i64, dstride = 0 : i64, astride = 0 : i64, dt = 7 : i64, at = 2 : i64}> : () -> ()
}

// -----

npu.program {
  // expected-error @+1 {{npu.vec.requant: requant needs dt = int8 and bt = fp32}}
  npu.vec.requant dst=0x0, a=0x0, b=0x0, rows=1, cols=1, dt=fp32, at=int32, bt=fp32, bmode=row, imm=0.0
}

// -----

npu.program {
  // expected-error @+1 {{npu.vec.dequant: rows = 48 is not a multiple of the 32-element block (blocks=col)}}
  npu.vec.dequant dst=0x0, q=0x0, s=0x0, rows=48, cols=16, dt=fp32, fmt=q4_0, blocks=col
}

// -----

npu.program {
  // expected-error @+1 {{npu.vec.dequant: s = 2 is not aligned to the 4-byte q4_1 scale entry}}
  npu.vec.dequant dst=0x0, q=0x0, s=0x2, rows=1, cols=32, dt=bf16, fmt=q4_1, blocks=row
}

// -----

npu.program {
  // expected-error @+1 {{fmt: unknown qfmt 'q4_k' (q4_0, q4_1, q8_0)}}
  npu.vec.dequant dst=0x0, q=0x0, s=0x0, rows=1, cols=32, dt=bf16, fmt=q4_k, blocks=row
}

// -----

npu.program {
  // expected-error @+1 {{npu.mx.loadw: w = 1 is not aligned to 2 bytes}}
  npu.mx.loadw w=0x1, k=16, n=16, stride=32, dtype=bf16
}

// -----

// expected-error @+1 {{loop body runs past the end of the program}}
npu.program {
  npu.loop count=4, body=3
  npu.nop
}

// -----

// expected-error @+1 {{expects parent op 'npu.program'}}
npu.mx.matmul act=0x0, acc=0x2000000, m=1, astride=16, cstride=64, dtype=int8, accum=0
