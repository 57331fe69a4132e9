# RUN: infer sim %s -t edge | filecheck %s
# RUN: infer sim %s -t server --json | filecheck %s --check-prefix=JSON
# RUN: not infer sim %s -t nope 2>&1 | filecheck %s --check-prefix=ERR
# RUN: echo "dma.load dram=0x100000, local=0, n0=64, n1=1, n2=1" > %t.s
# RUN: not infer sim %t.s --dram-size 1048576 2>&1 | filecheck %s --check-prefix=FAULT
# RUN: echo "li rd=r1, imm=" > %t2.s
# RUN: not infer asm %t2.s -o %t.bin 2>&1 | filecheck %s --check-prefix=ASM

li rd=r1, imm=4
loop count=r1+0, body=2
  dma.load dram=r2+0, local=0, n0=256, n1=1, n2=1, signal=s1
  vec.relu dst=0x100, a=0, rows=16, cols=4, dstride=16, astride=16, dt=fp32, at=fp32, wait=s1
halt

# CHECK: config edge: {{[0-9]+}} cycles
# CHECK: vector    busy {{ *}}16 cycles
# JSON: "config": "server"
# JSON: "instructions": 11
# ERR: infer sim: error: unknown hardware config 'nope'
# FAULT: infer sim: error: fault [out-of-bounds] at instruction 0 (dma.load dram=r0+0x100000, {{.*}}): dma.load DRAM range [1048576, 1048640) outside DRAM (1048576 bytes)
# ASM: infer asm: error: {{.*}}2.s: line 1: imm: bad value
