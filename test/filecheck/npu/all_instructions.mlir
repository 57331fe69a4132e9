// Every instruction in npu IR: -t npu-bin hex words disassemble to exactly -t npu-asm.
// RUN: infer-opt %s -t npu-asm > %t.s
// RUN: infer-opt %s -t npu-bin > %t.hex
// RUN: infer disasm %t.hex -o %t2.s
// RUN: diff %t.s %t2.s
// RUN: filecheck %s --input-file %t.s --match-full-lines
// RUN: filecheck %s --input-file %t.hex --check-prefix=HEX

npu.program {
  npu.nop wait=s7, signal=s20, signal2=s6
  npu.halt wait=s14, signal=s26, signal2=s31
  npu.li rd=r28, imm=-139310528704029, wait=s5, signal=s7, signal2=s18
  npu.addi rd=r6, rs=r28, imm=-22392609860338, wait=s25, signal=s16, signal2=s22
  npu.add rd=r22, rs=r24, rt=r4, wait=s21, signal=s5, signal2=s18
  npu.sub rd=r18, rs=r29, rt=r9, wait=s19, signal=s1, signal2=s23
  npu.mul rd=r23, rs=r29, rt=r27, wait=s5, signal=s25, signal2=s31
  npu.muli rd=r7, rs=r27, imm=83401783914573, wait=s16, signal=s26, signal2=s30
  npu.ld rd=r1, addr=r14-0x3df3dcc4, wait=s3, signal=s6, signal2=s27
  npu.loop count=r30-1535826372, body=1, wait=s14, signal=s7, signal2=s29
  npu.nop
  npu.fence wait=s30, signal=s16, signal2=s25
  npu.dma.load dram=r19+0x75317358, local=r25+0x376ebbc, n0=212370, n1=19293, n2=3408, ds1=163517476, ds2=-2067795720, ls1=-7277648, ls2=-3360688, wait=s29, signal=s31, signal2=s23
  npu.dma.store dram=r12+0x52d34a0, local=r31+0x3bbb630, n0=536103, n1=50247, n2=3385, ds1=2123063596, ds2=1582519264, ls1=-7260512, ls2=1344496, wait=s20, signal=s29, signal2=s6
  npu.mx.loadw w=r28+0x2121610, k=1856, n=3777, stride=383880, dtype=fp8e5m2, wait=s30, signal=s4, signal2=s17
  npu.mx.matmul act=r31+0x2f60610, acc=r6+0x18e836c, m=783865, astride=862580, cstride=306936, dtype=fp8e5m2, accum=0, wait=s5, signal2=s28
  npu.vec.add dst=r5+0x1972018, a=r15+0xf76fe4, b=r2+0x225f66c, rows=43810, cols=49655, dstride=749208, astride=324556, bstride=10760, dt=fp32, at=fp8e5m2, bt=fp8e4m3, bmode=imm, imm=-1.5955683e+29, wait=s14, signal=s30, signal2=s8
  npu.vec.sub dst=r18+0xaceb50, a=r26+0x147edc8, b=r8+0x272b264, rows=33273, cols=27004, dstride=818740, astride=311500, bstride=412500, dt=bf16, at=int8, bt=int8, bmode=imm, imm=-3.6329826e+21, wait=s3, signal=s22, signal2=s22
  npu.vec.mul dst=r1+0x34647c, a=r30+0x29f40a8, b=r19+0x399e330, rows=21368, cols=59898, dstride=254536, astride=1043476, bstride=978492, dt=fp8e4m3, at=fp8e4m3, bt=int32, bmode=row, imm=4.7127077e-07, wait=s21, signal=s29, signal2=s14
  npu.vec.max dst=r4+0x3317940, a=r2+0x1905f1c, b=r11+0x5ca500, rows=42483, cols=35702, dstride=101056, astride=947536, bstride=395372, dt=bf16, at=fp8e5m2, bt=fp8e5m2, bmode=tile, imm=-2.5567046e-34, wait=s8, signal=s10, signal2=s11
  npu.vec.min dst=r24+0x22eb560, a=r27+0x3500cb8, b=r5+0x310c378, rows=19983, cols=12269, dstride=721556, astride=366360, bstride=552480, dt=bf16, at=bf16, bt=bf16, bmode=col, imm=7.59423e+33, wait=s20, signal=s30, signal2=s28
  npu.vec.copy dst=r7+0x230cf2c, a=r6+0x1b6f328, rows=15161, cols=322, dstride=195284, astride=952344, dt=fp8e5m2, at=fp32, wait=s26, signal=s11, signal2=s1
  npu.vec.neg dst=r22+0x1410aec, a=r22+0x1bb7a98, rows=7189, cols=40684, dstride=588192, astride=449700, dt=fp8e4m3, at=fp32, wait=s17, signal=s8, signal2=s6
  npu.vec.abs dst=r16+0xc57d78, a=r27+0x15ec578, rows=6950, cols=44863, dstride=126720, astride=747116, dt=fp8e5m2, at=int32, wait=s6, signal=s20, signal2=s17
  npu.vec.relu dst=r4+0x2540ac0, a=r20+0x14a874c, rows=17096, cols=16786, dstride=131864, astride=29088, dt=bf16, at=fp32, wait=s26, signal2=s3
  npu.vec.gelu dst=r6+0x1e1bdd8, a=r1+0x27ab6a4, rows=8063, cols=6152, dstride=734644, astride=660548, dt=bf16, at=fp8e4m3, wait=s2, signal=s25, signal2=s20
  npu.vec.silu dst=r13+0x3b38c3c, a=r27+0xf49d14, rows=44989, cols=24521, dstride=527596, astride=815888, dt=fp32, at=fp32, wait=s3, signal=s27, signal2=s1
  npu.vec.sigmoid dst=r18+0x2a4f660, a=r18+0xfa8068, rows=19461, cols=50325, dstride=873748, astride=668744, dt=fp8e4m3, at=int8, wait=s21, signal=s12, signal2=s3
  npu.vec.tanh dst=r7+0x14c07bc, a=r7+0xf23e54, rows=2446, cols=8237, dstride=742476, astride=633844, dt=int8, at=bf16, wait=s8, signal=s22, signal2=s26
  npu.vec.exp dst=r24+0x3047814, a=r15+0x35e2d9c, rows=43424, cols=14390, dstride=262580, astride=384756, dt=fp8e4m3, at=int8, wait=s25, signal=s16, signal2=s9
  npu.vec.sqrt dst=r14+0x2fd868, a=r1+0x236f374, rows=35465, cols=31382, dstride=876356, astride=553260, dt=fp32, at=int32, wait=s5, signal=s11, signal2=s2
  npu.vec.rsqrt dst=r16+0x2b9c7bc, a=r20+0x733634, rows=43115, cols=55093, dstride=23924, astride=509200, dt=bf16, at=int8, wait=s14, signal=s9, signal2=s25
  npu.vec.recip dst=r23+0x1dc2fa0, a=r17+0x2bfdf74, rows=56441, cols=13172, dstride=785856, astride=753104, dt=bf16, at=fp8e5m2, wait=s29, signal=s30, signal2=s19
  npu.vec.rsum dst=r12+0x1442fc0, a=r26+0x13af0d0, rows=31776, cols=58576, dstride=11136, astride=743296, dt=fp8e4m3, at=fp8e5m2, wait=s26, signal=s2, signal2=s11
  npu.vec.rmax dst=r5+0x2646d18, a=r23+0x21ec01c, rows=9042, cols=46840, dstride=211288, astride=38484, dt=fp8e4m3, at=int32, wait=s19, signal=s2, signal2=s25
  npu.vec.rdot dst=r3+0x1442fc0, a=r26+0x13af0d0, b=r9+0x2000, rows=31776, cols=58576, dstride=11136, astride=743296, bstride=128, dt=fp32, at=bf16, bt=fp32, bmode=row, imm=0.0, wait=s4, signal=s2, signal2=s11
  npu.vec.mask dst=r7+0x3000, a=r2+0x1a40, b=r11+0x2000100, rows=64, cols=512, dstride=2048, astride=1024, bstride=2048, dt=fp32, at=bf16, bt=fp32, bmode=tile, imm=0.0, wait=s3, signal=s9, signal2=s1
  npu.vec.requant dst=r13+0x32e2ba8, a=r7+0x3a8aecc, b=r22+0xc9a800, rows=27287, cols=15402, dstride=673596, astride=651384, bstride=7212, dt=int8, at=int8, bt=fp32, bmode=row, imm=3.6809906e+25, wait=s6, signal=s12, signal2=s31
  npu.vec.dequant dst=r9+0x1f4e0c0, q=r30+0x13579b, s=r4+0x2468ac, rows=4064, cols=52817, dstride=631846, qstride=999999, sstride=87652, dt=bf16, fmt=q4_1, blocks=col, wait=s11, signal=s3, signal2=s17
}

// CHECK: nop wait=s7, signal=s20, signal2=s6
// CHECK-NEXT: halt wait=s14, signal=s26, signal2=s31
// CHECK-NEXT: li rd=r28, imm=-139310528704029, wait=s5, signal=s7, signal2=s18
// CHECK-NEXT: addi rd=r6, rs=r28, imm=-22392609860338, wait=s25, signal=s16, signal2=s22
// CHECK-NEXT: add rd=r22, rs=r24, rt=r4, wait=s21, signal=s5, signal2=s18
// CHECK-NEXT: sub rd=r18, rs=r29, rt=r9, wait=s19, signal=s1, signal2=s23
// CHECK-NEXT: mul rd=r23, rs=r29, rt=r27, wait=s5, signal=s25, signal2=s31
// CHECK-NEXT: muli rd=r7, rs=r27, imm=83401783914573, wait=s16, signal=s26, signal2=s30
// CHECK-NEXT: ld rd=r1, addr=r14-0x3df3dcc4, wait=s3, signal=s6, signal2=s27
// CHECK-NEXT: loop count=r30-1535826372, body=1, wait=s14, signal=s7, signal2=s29
// CHECK-NEXT: nop
// CHECK-NEXT: fence wait=s30, signal=s16, signal2=s25
// CHECK-NEXT: dma.load dram=r19+0x75317358, local=r25+0x376ebbc, n0=212370, n1=19293, n2=3408, ds1=163517476, ds2=-2067795720, ls1=-7277648, ls2=-3360688, wait=s29, signal=s31, signal2=s23
// CHECK-NEXT: dma.store dram=r12+0x52d34a0, local=r31+0x3bbb630, n0=536103, n1=50247, n2=3385, ds1=2123063596, ds2=1582519264, ls1=-7260512, ls2=1344496, wait=s20, signal=s29, signal2=s6
// CHECK-NEXT: mx.loadw w=r28+0x2121610, k=1856, n=3777, stride=383880, dtype=fp8e5m2, wait=s30, signal=s4, signal2=s17
// CHECK-NEXT: mx.matmul act=r31+0x2f60610, acc=r6+0x18e836c, m=783865, astride=862580, cstride=306936, dtype=fp8e5m2, accum=0, wait=s5, signal2=s28
// CHECK-NEXT: vec.add dst=r5+0x1972018, a=r15+0xf76fe4, b=r2+0x225f66c, rows=43810, cols=49655, dstride=749208, astride=324556, bstride=10760, dt=fp32, at=fp8e5m2, bt=fp8e4m3, bmode=imm, imm=-1.5955683e+29, wait=s14, signal=s30, signal2=s8
// CHECK-NEXT: vec.sub dst=r18+0xaceb50, a=r26+0x147edc8, b=r8+0x272b264, rows=33273, cols=27004, dstride=818740, astride=311500, bstride=412500, dt=bf16, at=int8, bt=int8, bmode=imm, imm=-3.6329826e+21, wait=s3, signal=s22, signal2=s22
// CHECK-NEXT: vec.mul dst=r1+0x34647c, a=r30+0x29f40a8, b=r19+0x399e330, rows=21368, cols=59898, dstride=254536, astride=1043476, bstride=978492, dt=fp8e4m3, at=fp8e4m3, bt=int32, bmode=row, imm=4.7127077e-07, wait=s21, signal=s29, signal2=s14
// CHECK-NEXT: vec.max dst=r4+0x3317940, a=r2+0x1905f1c, b=r11+0x5ca500, rows=42483, cols=35702, dstride=101056, astride=947536, bstride=395372, dt=bf16, at=fp8e5m2, bt=fp8e5m2, bmode=tile, imm=-2.5567046e-34, wait=s8, signal=s10, signal2=s11
// CHECK-NEXT: vec.min dst=r24+0x22eb560, a=r27+0x3500cb8, b=r5+0x310c378, rows=19983, cols=12269, dstride=721556, astride=366360, bstride=552480, dt=bf16, at=bf16, bt=bf16, bmode=col, imm=7.59423e+33, wait=s20, signal=s30, signal2=s28
// CHECK-NEXT: vec.copy dst=r7+0x230cf2c, a=r6+0x1b6f328, rows=15161, cols=322, dstride=195284, astride=952344, dt=fp8e5m2, at=fp32, wait=s26, signal=s11, signal2=s1
// CHECK-NEXT: vec.neg dst=r22+0x1410aec, a=r22+0x1bb7a98, rows=7189, cols=40684, dstride=588192, astride=449700, dt=fp8e4m3, at=fp32, wait=s17, signal=s8, signal2=s6
// CHECK-NEXT: vec.abs dst=r16+0xc57d78, a=r27+0x15ec578, rows=6950, cols=44863, dstride=126720, astride=747116, dt=fp8e5m2, at=int32, wait=s6, signal=s20, signal2=s17
// CHECK-NEXT: vec.relu dst=r4+0x2540ac0, a=r20+0x14a874c, rows=17096, cols=16786, dstride=131864, astride=29088, dt=bf16, at=fp32, wait=s26, signal2=s3
// CHECK-NEXT: vec.gelu dst=r6+0x1e1bdd8, a=r1+0x27ab6a4, rows=8063, cols=6152, dstride=734644, astride=660548, dt=bf16, at=fp8e4m3, wait=s2, signal=s25, signal2=s20
// CHECK-NEXT: vec.silu dst=r13+0x3b38c3c, a=r27+0xf49d14, rows=44989, cols=24521, dstride=527596, astride=815888, dt=fp32, at=fp32, wait=s3, signal=s27, signal2=s1
// CHECK-NEXT: vec.sigmoid dst=r18+0x2a4f660, a=r18+0xfa8068, rows=19461, cols=50325, dstride=873748, astride=668744, dt=fp8e4m3, at=int8, wait=s21, signal=s12, signal2=s3
// CHECK-NEXT: vec.tanh dst=r7+0x14c07bc, a=r7+0xf23e54, rows=2446, cols=8237, dstride=742476, astride=633844, dt=int8, at=bf16, wait=s8, signal=s22, signal2=s26
// CHECK-NEXT: vec.exp dst=r24+0x3047814, a=r15+0x35e2d9c, rows=43424, cols=14390, dstride=262580, astride=384756, dt=fp8e4m3, at=int8, wait=s25, signal=s16, signal2=s9
// CHECK-NEXT: vec.sqrt dst=r14+0x2fd868, a=r1+0x236f374, rows=35465, cols=31382, dstride=876356, astride=553260, dt=fp32, at=int32, wait=s5, signal=s11, signal2=s2
// CHECK-NEXT: vec.rsqrt dst=r16+0x2b9c7bc, a=r20+0x733634, rows=43115, cols=55093, dstride=23924, astride=509200, dt=bf16, at=int8, wait=s14, signal=s9, signal2=s25
// CHECK-NEXT: vec.recip dst=r23+0x1dc2fa0, a=r17+0x2bfdf74, rows=56441, cols=13172, dstride=785856, astride=753104, dt=bf16, at=fp8e5m2, wait=s29, signal=s30, signal2=s19
// CHECK-NEXT: vec.rsum dst=r12+0x1442fc0, a=r26+0x13af0d0, rows=31776, cols=58576, dstride=11136, astride=743296, dt=fp8e4m3, at=fp8e5m2, wait=s26, signal=s2, signal2=s11
// CHECK-NEXT: vec.rmax dst=r5+0x2646d18, a=r23+0x21ec01c, rows=9042, cols=46840, dstride=211288, astride=38484, dt=fp8e4m3, at=int32, wait=s19, signal=s2, signal2=s25
// CHECK-NEXT: vec.rdot dst=r3+0x1442fc0, a=r26+0x13af0d0, b=r9+0x2000, rows=31776, cols=58576, dstride=11136, astride=743296, bstride=128, dt=fp32, at=bf16, bt=fp32, bmode=row, imm=0.0, wait=s4, signal=s2, signal2=s11
// CHECK-NEXT: vec.mask dst=r7+0x3000, a=r2+0x1a40, b=r11+0x2000100, rows=64, cols=512, dstride=2048, astride=1024, bstride=2048, dt=fp32, at=bf16, bt=fp32, bmode=tile, imm=0.0, wait=s3, signal=s9, signal2=s1
// CHECK-NEXT: vec.requant dst=r13+0x32e2ba8, a=r7+0x3a8aecc, b=r22+0xc9a800, rows=27287, cols=15402, dstride=673596, astride=651384, bstride=7212, dt=int8, at=int8, bt=fp32, bmode=row, imm=3.6809906e+25, wait=s6, signal=s12, signal2=s31
// CHECK-NEXT: vec.dequant dst=r9+0x1f4e0c0, q=r30+0x13579b, s=r4+0x2468ac, rows=4064, cols=52817, dstride=631846, qstride=999999, sstride=87652, dt=bf16, fmt=q4_1, blocks=col, wait=s11, signal=s3, signal2=s17

// HEX: 00000000000000000000000000000000000000000000000000000000001a8700
// HEX-NEXT: 00000000000000000000000000000000000000000000000000000000007f4e01
// HEX-NEXT: 0000000000000000000000000000000000000000000102987ad8a3c7c048e502
// HEX-NEXT: 0000000000000000000000000000000000000000003ae8941c6543b8605a1903
// HEX-NEXT: 000000000000000000000000000000000000000000000000000001316048b504
// HEX-NEXT: 0000000000000000000000000000000000000000000000000000027b205c3305
// HEX-NEXT: 000000000000000000000000000000000000000000000000000006fb707f2506
// HEX-NEXT: 00000000000000000000000000000000000000000012f69f6d0c1376707b5007
// HEX-NEXT: 0000000000000000000000000000000000000000000000308308cf1c106cc308
// HEX-NEXT: 00000000000000000000000000000000000000000000000348ea4c79e074ee09
// HEX-NEXT: 0000000000000000000000000000000000000000000000000000000000000000
// HEX-NEXT: 0000000000000000000000000000000000000000000000000000000000661e0a
// HEX-NEXT: ccb85090f3b084bff0f809bf1424d504b5d33d92ddbaef32ea62e6b1305ffd10
// HEX-NEXT: 1483f09136a05e5353e07e8b612cd39c44782e27eeed8c3e0a5a6940c01bb411
// HEX-NEXT: 00000000000000000000000000000000000002aedc4760ba04242c21c0449e20
// HEX-NEXT: 0000000000000000000000000152bbe34a5d2fd7e58e836c35ec0c21f0700521
// HEX-NEXT: f000e394e54054109e7996dd3183ef564512fb3608f76fe47b2e40305023ce40
// HEX-NEXT: e344f1c3c06c96a8981998fc68d2f903f33959322147edc8d159d6a1205ac341
// HEX-NEXT: 34fd02f64c9ddc79fd8287c491d3f4a6f1ccf1984e9f40a8f068c8f8103bb542
// HEX-NEXT: 87a9ec132d6c10d9ceaa03158116ed4be62e52802d905f1c1662f280402d4843
// HEX-NEXT: 77bb36549b70dc40b2e31605285fda9c1f8861bc17500cb8dc5d6ac18073d444
// HEX-NEXT: 000000000000000000000057a2060beb500508ece5b6f32834619e5870057a45
// HEX-NEXT: 000000000000000000000051b72923e6827bb07055bb7a98b28215d960191146
// HEX-NEXT: 000000000000000000000036d99b07bc02bcfc6c995ec578d98afaf100468647
// HEX-NEXT: 00000000000000000000004c1c68080c6106490b214a874ca4a81580400c1a48
// HEX-NEXT: 00000000000000000000008e85112cd6d060207dfe7ab6a40bc37bb060532249
// HEX-NEXT: 00000000000000000000004b1cc42033b17f26bef4f49d14df671878d007634a
// HEX-NEXT: 0000000000000000000000128d1235545312553014fa80689549ecc1200d954b
// HEX-NEXT: 0000000000000000000000626afd2d513080b42638f23e543a980f78706ac84c
// HEX-NEXT: 00000000000000000000001177bd1006d0e0daa6835e2d9c7e08f0298026194d
// HEX-NEXT: 00000000000000000000002a1c4b357d11ea5a2a2636f374085fb0d0e009654e
// HEX-NEXT: 00000000000000000000000df1440175d35cd6a1ac733634a5738f7900652e4f
// HEX-NEXT: 0000000000000000000000aedf742ff700cdd371e6bfdf748bb85f41704fdd50
// HEX-NEXT: 0000000000000000000000b2d5e000ae039341f0813af0d0d2885f80c02c5a51
// HEX-NEXT: 00000000000000000000003025950ce562dbe08d4a1ec01cbcc8da3050645352
// HEX-NEXT: 00000000534001016af0005701c9a0f840001000253af0d0d2885f80302c445a
// HEX-NEXT: 00000000134010000080001000040000810000802c001a40100060007005235b
// HEX-NEXT: 69f39668500038593e0f148e787854d52e64d4005ba8aecc3e5c5750d07d8653
// HEX-NEXT: 000000000162acc9e847f3484d9ca21fc01234561013579bf3e9c18090446b60
