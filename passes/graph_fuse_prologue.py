"""`graph-fuse-norm-prologue`: an RMSNorm kernel whose every user is a product on packed
(GGUF block-quantized) weights joins each of those products as its prologue.

A Llama layer normalises the residual stream twice and feeds each normalised row to several
products (q, k, v; gate, up), and the LM head after the last norm. After graph-fuse each norm is
a kernel of its own: its result goes to DRAM and every product loads it back, a DRAM round trip
on the critical path of a decode step (docs/paged-kv.md). This pass, run after graph-fuse,
rewrites

    %h = graph.kernel "norm" (%x, %g) { rms_norm }
    %q = graph.kernel "matmul" (%h, %wq) { linear }
    %k = graph.kernel "matmul" (%h, %wk) { linear }

into

    %q = graph.kernel "matmul" (%x, %g, %wq) { %n = rms_norm ; linear %n, ... }
    %k = graph.kernel "matmul" (%x, %g, %wk) { %n = rms_norm ; linear %n, ... }

(graph.KernelOp allows an rms_norm prologue feeding a "matmul" anchor's activations). The
graph-to-tile lowering of a resident packed product (packed_gemm.py) normalises the rows on
chip where it loads the activations, so the normalised rows never leave the scratchpad; a
product that is not resident (tiled, e.g. on edge) lowers the prologue as the norm kernel it
was, once for all the products that share it (graph_to_tile/driver.py). Every product recomputes
the norm from the same f32 input with the same vector instructions, so the results are bit
for bit those of the norm kernel.

Matched: a "norm" kernel holding only `graph.rms_norm` over the last dim (no epilogue), every
user a "matmul" kernel whose anchor is a linear/matmul on a packed weight
(`graph.dequantize_blocks` of a `graph.weight`) and reads the norm only as its activations.
Products on dense weights (a Hugging Face model's prefill) keep their norm kernel: their
tiled lowering would normalise the rows again per product.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of


def _lone_rms_norm(kernel: g.KernelOp) -> g.RmsNormOp | None:
    """The rms_norm of a "norm" kernel that holds nothing else (normalising the last dim)."""
    if kernel.kind.data != "norm":
        return None
    ops = [o for o in kernel.body.block.ops if o is not kernel.yield_op]
    if len(ops) != 1 or not isinstance(ops[0], g.RmsNormOp):
        return None
    norm = ops[0]
    rank = len(shape_of(norm.input))
    if norm.axis.value.data % rank != rank - 1:
        return None
    return norm


def _packed_activation_arg(kernel: g.KernelOp, value: SSAValue) -> BlockArgument | None:
    """The block argument of `kernel` for `value` when the kernel is a "matmul" on a packed
    weight, without a prologue, reading `value` only as its activations; else None."""
    if kernel.kind.data != "matmul" or kernel.prologue():
        return None
    anchor = kernel.anchor()
    if not isinstance(anchor, g.LinearOp | g.MatmulOp):
        return None
    if isinstance(anchor, g.MatmulOp) and (not anchor.transpose_b.value.data or anchor.transpose_a.value.data):
        return None
    weight = anchor.operands[1]
    if not isinstance(weight, BlockArgument):
        return None
    dq = kernel.inputs[weight.index].owner
    if not isinstance(dq, g.DequantizeBlocksOp) or not isinstance(dq.input.owner, g.WeightOp):
        return None
    return sole_activation_arg(kernel, anchor, value)


def sole_activation_arg(kernel: g.KernelOp, anchor: Operation, value: SSAValue) -> BlockArgument | None:
    """The block argument of `kernel` for `value` when it is `kernel`'s only operand `value` and
    read only as `anchor`'s activations (operand 0); else None."""
    args = [a for a, v in zip(kernel.body.block.args, kernel.inputs, strict=True) if v is value]
    if len(args) != 1:
        return None
    uses = list(args[0].uses)
    if len(uses) != 1 or uses[0].operation is not anchor or uses[0].index != 0:
        return None
    return args[0]


@dataclass
class FuseNormPrologue(RewritePattern):
    """A lone rms_norm kernel -> a prologue of each packed product that reads it."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.KernelOp, rewriter: PatternRewriter, /):
        norm = _lone_rms_norm(op)
        if norm is None or len(op.outputs) != 1:
            return
        result = op.outputs[0]
        users = {use.operation for use in result.uses}
        if not users or not all(isinstance(u, g.KernelOp) and _packed_activation_arg(u, result) is not None
                                for u in users):
            return
        for user in users:
            assert isinstance(user, g.KernelOp)
            _with_prologue(user, op, norm, result, rewriter)
        rewriter.erase(op)


def _with_prologue(user: g.KernelOp, norm_kernel: g.KernelOp, norm: g.RmsNormOp, normed: SSAValue,
                   rewriter: PatternRewriter) -> None:
    """Replace `user` by the same kernel with `norm` cloned in front of its anchor: the norm
    kernel's inputs replace `normed` among the operands."""
    inputs: dict[SSAValue, None] = {}
    for v in norm_kernel.inputs:
        inputs.setdefault(v)
    for v in user.inputs:
        if v is not normed:
            inputs.setdefault(v)
    block = Block(arg_types=[v.type for v in inputs])
    outside = dict(zip(inputs, block.args, strict=True))
    for v, arg in outside.items():
        arg.name_hint = v.name_hint
    norm_map = {a: outside[v] for a, v in zip(norm_kernel.body.block.args, norm_kernel.inputs, strict=True)}
    new_norm = norm.clone(value_mapper=norm_map)
    block.add_op(new_norm)
    user_map: dict[SSAValue, SSAValue] = {}
    for a, v in zip(user.body.block.args, user.inputs, strict=True):
        user_map[a] = new_norm.results[0] if v is normed else outside[v]
    for inner in user.body.block.ops:
        block.add_op(inner.clone(value_mapper=user_map))
    fused = g.KernelOp("matmul", list(inputs), [r.type for r in user.outputs], Region(block))
    rewriter.replace(user, fused)


@dataclass(frozen=True)
class GraphFuseNormProloguePass(ModulePass):
    """Fuse RMSNorm kernels into the packed-weight products that read them (as a prologue)."""

    name = "graph-fuse-norm-prologue"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseNormPrologue(), apply_recursively=False).rewrite_module(op)
