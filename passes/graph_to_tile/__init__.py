"""`graph-to-tile`: lower graph-level functions to the tile dialect.

    graph-to-tile{target=edge precision=fp32|bf16 overrides="" debug-tiling=false}

Each func.func becomes a destination-passing function on DRAM memrefs; intermediates are
`tile.alloc` in "dram" (offsets are left to memory planning), weights are `tile.weight` ops on
pre-packed copies added to the module's weight store, and the module gets `tile.target`.
See docs/tiling.md for the schemes and the cost model.

Where things are:

  driver.py          the pass, the function boundary (signature, bufferisation to DRAM, value
                     map, layer tags), graph.kernel regions, dispatch through the table
  lowerings.py       the table: graph op type -> lowering function
  context.py         LoweringContext, what a lowering function receives
  builder.py         Emitter, the tile IR builder (index arithmetic, loops, tile ops)
  gemm.py            linear / matmul (+ bias + elementwise epilogue) on the matrix unit
  conv.py            conv2d (NCHW) as a sum over taps of strided windows x weight blocks
  attention.py       flash attention (online softmax, GQA, causal band, masks)
  matrix_unit.py     what those three share: bf16 hi/lo operands, array-sized matmuls
  elementwise.py     elementwise ops and where, alone and as matrix-kernel epilogues
  pooling.py         max/avg pooling, global pooling
  norms.py           layer/rms norm, softmax, batch_norm
  reductions.py      reduce_sum/mean/max/min
  copies.py          reshape, slice, concat, broadcast, pad, copies through the scratchpad
  transpose.py       transpose as permuted block copies
  gather.py          gather (tile.gather_rows for runtime indices)
  rotary.py          rotary position embeddings
  casts.py           f32 -> bf16/i32 -> f32 cast round trips
  integer_inputs.py  integer model inputs: gather indices, casts to f32, attention masks

Precision: the matrix unit takes bf16. `precision=bf16` rounds matmul inputs to bf16 (fp32
accumulation); `precision=fp32` emulates fp32 products with three bf16 passes
(hi*hi + hi*lo + lo*hi): activations are split on the vector unit, weights at compile time.
Vector math is fp32.

Tile sizes come from the cost model in `infer.passes.tiling_cost`; each lowered op gets a
stable name `kernel<N>` (N counts lowered ops in program order), which
`overrides="kernel3=64x64x32,kernel5=8"` keys and `debug-tiling=true` prints.
"""

from infer.dialects.ir_io import LoweringError
from infer.passes.graph_to_tile.driver import GraphToTilePass

__all__ = ["GraphToTilePass", "LoweringError"]
