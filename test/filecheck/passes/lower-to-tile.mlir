// RUN: infer-opt %s -p 'lower-to-tile{target=edge}' | filecheck %s --check-prefix=EDGE
// RUN: infer-opt %s -p 'lower-to-tile{target=server}' | filecheck %s --check-prefix=SERVER
// RUN: infer-opt %s -p 'lower-to-tile{target=edge debug-tiling=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=DEBUG

// The named graph -> tile pipeline: fusion, lowering with cost-model tiles, and
// memory planning, for one target. The tiles and the plan differ per config.

func.func @main(%x: tensor<128x256xf32> {graph.name = "x"}) -> (tensor<128x256xf32> {graph.name = "y"}) {
  %w1 = graph.constant dense<0.01> : tensor<512x256xf32>
  %b1 = graph.constant dense<0.1> : tensor<512xf32>
  %w2 = graph.constant dense<0.02> : tensor<256x512xf32>
  %h = graph.linear %x, %w1, %b1 : (tensor<128x256xf32>, tensor<512x256xf32>, tensor<512xf32>) -> tensor<128x512xf32>
  %g = graph.gelu %h : (tensor<128x512xf32>) -> tensor<128x512xf32>
  %o = graph.linear %g, %w2 : (tensor<128x512xf32>, tensor<256x512xf32>) -> tensor<128x256xf32>
  %y = graph.add %o, %x : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
  func.return %y : tensor<128x256xf32>
}

// EDGE: builtin.module attributes {{.*}}tile.target = "edge"{{.*}}tile.arena_bytes = [[ARENA:[0-9]+]] : i64
// EDGE: func.func @main(%{{.*}}: memref<128x256xf32, "dram"> {graph.name = "x"}, %{{.*}}: memref<128x256xf32, "dram"> {graph.name = "y", tile.output})
// EDGE: tile.alloc {tile.layer = {{[0-9]+}} : i64, offset = 0 : i64} : memref<128x512xf32, "dram">
// EDGE: scf.for
// EDGE: tile.matmul

// SERVER: tile.target = "server"
// SERVER: scf.for
// SERVER: tile.matmul

// DEBUG: kernel0
// DEBUG: kernel1
