"""`graph-subsample-strided-conv`: a strided 1x1 convolution reads only every s-th pixel;
make it a strided `graph.slice` (done once) followed by a stride-1 1x1 convolution.

    conv2d(x, w) {stride = [sh, sw]}, w of shape O x C/g x 1 x 1, no padding
      ->  conv2d(slice(x) {steps = [1, 1, sh, sw]}, w)

Why: the convolution kernel re-reads its input once per tile of output channels, and a
strided read moves one element per DMA burst (a 2x subsample wastes 15/16 of each 64-byte
burst). After the rewrite the subsample is paid once and every conv tile reads contiguous
rows. (ResNet-50's three downsample shortcuts are such convs.) Larger strided kernels are left
alone: their windows overlap.

Opt-in (`infer-opt -p graph-subsample-strided-conv,compile-npu{...}`), not part of
graph-prepare-tiling: whether it pays depends on the target's tiles. Measured on ResNet-50:
edge 142.8 M -> 124.5 M cycles (small tiles: the input is re-read per output-channel tile),
server 3.02 M -> 3.91 M (large tiles read it about once, and the slice itself moves one
element per burst). Deciding per conv belongs in graph-to-tile's cost model, which knows
the tiles, and it now does: a strided conv's input can be prepared once as subsampled bf16
planes in DRAM (`Planes.preparable`, docs/tiling.md "Subsampled planes for strided convs"),
chosen per conv against windows built on chip. This pass stays as the graph-level rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from infer.dialects import graph as g


@dataclass
class SubsampleStridedPointwiseConv(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.Conv2dOp, rewriter: PatternRewriter, /):
        x_ty, w_ty = op.input.type, op.weight.type
        if not isinstance(x_ty, TensorType) or not isinstance(w_ty, TensorType):
            return
        stride = list(g.i64_values(op.stride))
        padding = list(g.i64_values(op.padding))
        if stride == [1, 1] or any(padding) or tuple(w_ty.get_shape()[2:]) != (1, 1):
            return
        n, c, h, w = x_ty.get_shape()
        oh, ow = op.output.type.get_shape()[2:]  # type: ignore[union-attr]
        if min(n, c, h, w, oh, ow) < 0:  # dynamic shapes: leave it
            return
        sliced_ty = TensorType(x_ty.element_type, [n, c, oh, ow])
        sliced = g.SliceOp.create(
            operands=[op.input], result_types=[sliced_ty],
            properties={"starts": g.i64_array([0, 0, 0, 0]),
                        "ends": g.i64_array([n, c, (oh - 1) * stride[0] + 1, (ow - 1) * stride[1] + 1]),
                        "steps": g.i64_array([1, 1, stride[0], stride[1]])})
        props = {k: v for k, v in op.properties.items() if k not in ("stride", "dilation")}
        conv = g.Conv2dOp.create(operands=[sliced.output, *op.operands[1:]],
                                 result_types=[op.output.type], properties=props,
                                 attributes=dict(op.attributes))
        rewriter.replace(op, [sliced, conv])


@dataclass(frozen=True)
class GraphSubsampleStridedConvPass(ModulePass):
    """Strided 1x1 convolutions -> strided slice + stride-1 convolution."""

    name = "graph-subsample-strided-conv"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(SubsampleStridedPointwiseConv()).rewrite_module(op)
