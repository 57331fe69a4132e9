// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s

// Attention (grouped-query heads, causal, boolean and additive masks, explicit
// scale), rotary embedding (full and partial, interleaved) and gather.

func.func @attention(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>, %m: tensor<1x1x4x6xi1>, %am: tensor<4x6xf32>) {
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
  %1 = graph.attention %q, %k, %v {causal = true} : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
  %2 = graph.attention %q, %k, %v, %m {scale = 0.125 : f64} : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<1x1x4x6xi1>) -> tensor<1x8x4x32xf32>
  %3 = graph.attention %q, %k, %v, %am {causal = true, scale = 1.0 : f64} : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<4x6xf32>) -> tensor<1x8x4x32xf32>
  func.return
}

func.func @rotary(%x: tensor<1x8x4x16xf16>, %cos: tensor<4x16xf16>, %sin: tensor<4x16xf16>, %cp: tensor<4x8xf16>) {
  %0 = graph.rotary %x, %cos, %sin : (tensor<1x8x4x16xf16>, tensor<4x16xf16>, tensor<4x16xf16>) -> tensor<1x8x4x16xf16>
  %1 = graph.rotary %x, %cp, %cp {interleaved = true} : (tensor<1x8x4x16xf16>, tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<1x8x4x16xf16>
  func.return
}

func.func @gather(%table: tensor<100x64xbf16>, %ids: tensor<2x7xi64>, %x: tensor<3x5x4xf32>, %idx: tensor<2xi32>) {
  %0 = graph.gather %table, %ids : (tensor<100x64xbf16>, tensor<2x7xi64>) -> tensor<2x7x64xbf16>
  %1 = graph.gather %x, %idx {axis = 1 : i64} : (tensor<3x5x4xf32>, tensor<2xi32>) -> tensor<3x2x4xf32>
  %2 = graph.gather %x, %idx {axis = -1 : i64} : (tensor<3x5x4xf32>, tensor<2xi32>) -> tensor<3x5x2xf32>
  func.return
}

// CHECK:      builtin.module {
// CHECK-NEXT: func.func @attention(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>, %m: tensor<1x1x4x6xi1>, %am: tensor<4x6xf32>) {
// CHECK-NEXT: %0 = graph.attention %q, %k, %v : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
// CHECK-NEXT: %1 = graph.attention %q, %k, %v {causal = true} : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
// CHECK-NEXT: %2 = graph.attention %q, %k, %v, %m {scale = 1.250000e-01 : f64} : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<1x1x4x6xi1>) -> tensor<1x8x4x32xf32>
// CHECK-NEXT: %3 = graph.attention %q, %k, %v, %am {causal = true, scale = 1.000000e+00 : f64} : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<4x6xf32>) -> tensor<1x8x4x32xf32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @rotary(%x: tensor<1x8x4x16xf16>, %cos: tensor<4x16xf16>, %sin: tensor<4x16xf16>, %cp: tensor<4x8xf16>) {
// CHECK-NEXT: %0 = graph.rotary %x, %cos, %sin : (tensor<1x8x4x16xf16>, tensor<4x16xf16>, tensor<4x16xf16>) -> tensor<1x8x4x16xf16>
// CHECK-NEXT: %1 = graph.rotary %x, %cp, %cp {interleaved = true} : (tensor<1x8x4x16xf16>, tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<1x8x4x16xf16>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @gather(%table: tensor<100x64xbf16>, %ids: tensor<2x7xi64>, %x: tensor<3x5x4xf32>, %idx: tensor<2xi32>) {
// CHECK-NEXT: %0 = graph.gather %table, %ids : (tensor<100x64xbf16>, tensor<2x7xi64>) -> tensor<2x7x64xbf16>
// CHECK-NEXT: %1 = graph.gather %x, %idx {axis = 1 : i64} : (tensor<3x5x4xf32>, tensor<2xi32>) -> tensor<3x2x4xf32>
// CHECK-NEXT: %2 = graph.gather %x, %idx {axis = -1 : i64} : (tensor<3x5x4xf32>, tensor<2xi32>) -> tensor<3x5x2xf32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: }
