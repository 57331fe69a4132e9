// Not a test (lit skips Inputs/): a two-instruction npu.program.
npu.program {
  npu.li rd=r1, imm=5
  npu.halt
}
