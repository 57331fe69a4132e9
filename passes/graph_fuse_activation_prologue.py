"""`graph-fuse-activation-prologue{target=...}`: on a latency-bound target, an activation last in a
product's kernel moves into the product that reads it, as that product's prologue.

A transformer's FFN multiplies by the up projection, applies GELU and multiplies by the down
projection. After graph-fuse the GELU is the up projection's epilogue: the vector unit computes
it over the whole output tile after the last matmul, and the down projection's first matmul
waits for all of it (MiniLM on the server config: 1.55 K cycles of `vec.gelu_erf` on a
128 x 1536 tile, in series between the two kernels, every layer). As the down projection's
prologue it is applied where the down projection stages each k step's activations: the copy
that rounds a [TM, TK] slice to bf16 becomes the activation instruction writing bf16, so the
matrix unit waits for one slice's activation and the vector unit computes the next slices
while the array multiplies. The bits are the same: the activation of the same fp32 value,
rounded to bf16 (or split into two bf16 parts) by the same store (graph_to_tile/gemm.py).

    %h = graph.kernel "matmul" (%x, %w1) { %y = linear ; %a = gelu %y ; yield %a }
    %o = graph.kernel "matmul" (%h, %w2) { %z = linear %h ; yield %z }

becomes

    %y = graph.kernel "matmul" (%x, %w1) { %y = linear ; yield %y }
    %o = graph.kernel "matmul" (%y, %w2) { %a = gelu %y ; %z = linear %a ; yield %z }

Where the activation reads the producer's `graph.linear` directly and that linear's bias is a
kernel input read by nothing else, the bias moves too: the producer's linear loses it, and the
consumer takes it as one more input, added to its block argument before the activation (the
add leaves the producer's epilogue: 400 cycles on MiniLM's 128 x 1536 up projection; the
consumer adds each k step's slice beside its products, the same fp32 sums).

Matched: a "matmul" kernel with one result, the last op before its yield a unary activation
with one vector instruction (`vector_math.activation_instruction`) of a value computed in the kernel, whose
only user is a "matmul" kernel without a prologue, on a dense weight, reading it only as its
anchor's activations (operand 0). Only on latency-bound targets (`context.latency_bound`: the
server config), where a kernel boundary is in series: on edge a product of several output-column
tiles would stage, and so activate, its rows once per tile.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from infer.dialects import graph as g
from infer.passes.graph_fuse_prologue import sole_activation_arg
from infer.passes.graph_to_tile.vector_math import activation_instruction


def _trailing_activation(kernel: g.KernelOp) -> Operation | None:
    """The activation last in a one-result "matmul" kernel of a float linear/matmul (its input
    made in the kernel, read by nothing else)."""
    yield_op = kernel.yield_op
    if kernel.kind.data != "matmul" or yield_op is None or len(yield_op.values) != 1 \
            or not isinstance(kernel.anchor(), g.LinearOp | g.MatmulOp):
        return None
    last = yield_op.prev_op
    if last is None or activation_instruction(last) is None or last.results[0] is not yield_op.values[0]:
        return None
    source = last.operands[0]
    if isinstance(source, BlockArgument) or not source.has_one_use():
        return None
    return last


def _dense_activation_arg(kernel: g.KernelOp, value: SSAValue) -> BlockArgument | None:
    """The block argument of `kernel` for `value` when the kernel is a "matmul" on a dense
    weight without a prologue that reads `value` only as its anchor's activations."""
    if kernel.kind.data != "matmul" or kernel.prologue():
        return None
    anchor = kernel.anchor()
    if not isinstance(anchor, g.LinearOp | g.MatmulOp):
        return None
    weight = anchor.operands[1]
    if isinstance(weight, BlockArgument) and isinstance(kernel.inputs[weight.index].owner, g.DequantizeBlocksOp):
        return None  # packed products take an rms_norm prologue only (packed_gemm.py)
    return sole_activation_arg(kernel, anchor, value)


def _bias_before(kernel: g.KernelOp, activation: Operation) -> BlockArgument | None:
    """The block argument of the bias of the linear whose result `activation` reads directly,
    when that bias is a kernel input read by nothing else: it moves with the activation, added
    where the consumer stages its activations, so that the add leaves the producer's epilogue
    too (on the path from its last matmul to the consumer's first)."""
    linear = activation.operands[0].owner
    if not isinstance(linear, g.LinearOp) or linear.bias is None:
        return None
    bias = linear.bias
    if not isinstance(bias, BlockArgument) or bias.owner is not kernel.body.block \
            or len(list(bias.uses)) != 1:
        return None
    return bias


def _with_input(kernel: g.KernelOp, arg: BlockArgument, value: SSAValue,
                rewriter: PatternRewriter) -> tuple[g.KernelOp, BlockArgument]:
    """`kernel` rebuilt with `value` as one more input (its block argument last); returns the new
    kernel and the block argument that was `arg`."""
    block = kernel.body.block
    rewriter.insert_block_argument(block, len(block.args), value.type).name_hint = value.name_hint
    new = g.KernelOp(kernel.kind.data, [*kernel.inputs, value], [r.type for r in kernel.outputs],
                     kernel.detach_region(kernel.body))
    for old, fresh in zip(kernel.outputs, new.outputs, strict=True):
        fresh.name_hint = old.name_hint
    rewriter.replace(kernel, new)
    return new, block.args[arg.index]


def _drop_bias(linear: g.LinearOp, rewriter: PatternRewriter) -> None:
    """`linear` without its bias operand (which moved to the consumer)."""
    plain = g.LinearOp.create(operands=[linear.input, linear.weight], result_types=[linear.results[0].type])
    plain.results[0].name_hint = linear.results[0].name_hint
    rewriter.replace(linear, plain)


@dataclass
class MoveActivationToConsumer(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.KernelOp, rewriter: PatternRewriter, /):
        activation = _trailing_activation(op)
        if activation is None:
            return
        result = op.outputs[0]
        uses = list(result.uses)
        if len(uses) != 1 or not isinstance(uses[0].operation, g.KernelOp):
            return
        consumer = uses[0].operation
        arg = _dense_activation_arg(consumer, result)
        if arg is None:
            return
        bias = _bias_before(op, activation)
        if bias is not None:
            consumer, arg = _with_input(consumer, arg, op.inputs[bias.index], rewriter)
        # the consumer: the activation, cloned onto its block argument, in front of the anchor
        # (after the producer's bias added to that argument, where the bias moves too)
        anchor = consumer.anchor()
        assert anchor is not None
        source_arg: SSAValue = arg
        if bias is not None:
            added = g.AddOp.create(operands=[arg, consumer.body.block.args[-1]], result_types=[arg.type])
            rewriter.insert(added, InsertPoint.before(anchor))
            source_arg = added.results[0]
            _drop_bias(activation.operands[0].owner, rewriter)
        moved = activation.clone(value_mapper={activation.operands[0]: source_arg})
        rewriter.insert(moved, InsertPoint.before(anchor))
        rewriter.replace_uses_with_if(arg, moved.results[0], lambda use: use.operation is anchor)
        # the producer yields the activation's input (and its result takes that name)
        source = activation.operands[0]
        rewriter.replace_all_uses_with(activation.results[0], source)
        rewriter.erase(activation)
        if source.name_hint is not None:
            result.name_hint = arg.name_hint = source.name_hint


@dataclass(frozen=True)
class GraphFuseActivationProloguePass(ModulePass):
    """Move a product's trailing activation into the product that reads it, as its prologue.

    Options:
      target: the hardware config ("edge", "server" or a TOML path); the pass changes nothing
        unless its DRAM is latency-bound (the server config).
    """

    name = "graph-fuse-activation-prologue"

    target: str = "edge"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from infer.passes.graph_to_tile.context import latency_bound_target

        if not latency_bound_target(self.name, self.target):
            return
        PatternRewriteWalker(MoveActivationToConsumer(), apply_recursively=False).rewrite_module(op)
