"""Sibling products: the resident packed products that follow a resident packed product on the
same activations are lowered with it, as one kernel (packed_gemm._lower_resident).

A Llama layer multiplies one normalised row by three matrices (q, k, v) and another by two
(gate, up). As kernels of their own each product loads (and, with an rms_norm prologue,
normalises) the same rows and pays the kernel boundary; lowered together the rows are loaded,
normalised and split to bf16 once and the three (two) weight streams follow each other through
the array. A product whose epilogue reads an earlier sibling's result (graph-fuse puts
`mul(silu(gate), up)` in the gate's kernel, with up as an operand) reads that result on chip,
and a result no other op reads never goes to DRAM.

A sibling is the next "matmul" graph.kernel of the function (only views, weights and
`dequantize_blocks` in between) whose anchor is a linear / transposed matmul on packed weights,
resident, with the same activations (the same function values, through the same rms_norm
prologue or none) and the same rows and depth, an elementwise epilogue, and every input either
defined before the first product's kernel or made by an earlier sibling (then read only by its
epilogue). The driver skips the kernels lowered here (`LOWERED_WITH`). Groups stop at three
siblings after the first and when the products' buffers would take more than 3/4 of the
scratchpad or half of the accumulator (the next kernel's prefetched planes need room too).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func
from xdsl.ir import BlockArgument, Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.block_quant import block_format
from infer.dialects.dtypes import dense_to_numpy, shape_of
from infer.passes.graph_to_tile.context import LoweringContext
from infer.target import isa

#: ctx.derived key prefix of a kernel lowered with an earlier sibling (the driver skips it)
LOWERED_WITH = "lowered with a sibling"
MAX_SIBLINGS = 3
#: ctx.derived key: the kernel whose position the current nest of products is emitted at (a
#: value the nest reads must exist there: made before it, or by an earlier group of the nest)
NEST_HEAD = ("resident nest head",)
#: ctx.derived key: the results of the kernels lowered in the current nest so far
NEST_MADE = ("resident nest results",)


def start_nest(ctx: LoweringContext, op: Operation) -> None:
    """A nest of products starts with product `op` (its kernel's position is the nest's)."""
    kernel = op.parent_op()
    ctx.derived[NEST_HEAD] = kernel
    ctx.derived[NEST_MADE] = set(kernel.outputs) if isinstance(kernel, g.KernelOp) else set()


def _in_nest(ctx: LoweringContext, value: SSAValue, kernel: Operation) -> bool:
    """Whether the current nest can read `value`: made before the nest or by it."""
    return _defined_before(value, ctx.derived.get(NEST_HEAD, kernel)) or value in ctx.derived.get(NEST_MADE, ())
#: share of the scratchpad a group's buffers may take (the next kernel's prefetched planes and
#: the planner's other live buffers need the rest)
SPAD_SHARE = 0.75
_BETWEEN = (g.ReshapeOp, g.TransposeOp, g.DequantizeBlocksOp, g.WeightOp, g.ConstantOp)


def _outer(kernel: g.KernelOp, value: SSAValue) -> SSAValue:
    """The function value a kernel's block argument stands for."""
    if isinstance(value, BlockArgument) and value.block is kernel.body.block:
        return kernel.inputs[value.index]
    return value


def _source(kernel: g.KernelOp, anchor: Operation, norm: g.RmsNormOp | None) -> tuple:
    """What a product's activations are, as function values."""
    if norm is not None:
        return ("rms_norm", _outer(kernel, norm.input), _outer(kernel, norm.scale), norm.epsilon.value.data)
    return ("rows", _outer(kernel, anchor.operands[0]))


def _defined_before(value: SSAValue, op: Operation) -> bool:
    """Whether `value` exists when `op` runs: a function argument, a weight or constant (or the
    packed weight's `dequantize_blocks`, which emits no code) or the result of an earlier op."""
    owner = value.owner
    if isinstance(owner, g.WeightOp | g.ConstantOp):
        return True
    if isinstance(owner, g.DequantizeBlocksOp) and isinstance(owner.input.owner, g.WeightOp):
        return True
    if isinstance(owner, Operation):
        return owner.parent_block() is op.parent_block() and owner.is_before_in_block(op)
    return True  # a function argument


def _footprint(ctx: LoweringContext, M: int, K: int, N: int, fmt_name: str, epilogue_ops: int,
               halves: int = 1) -> tuple[int, int]:
    """(scratchpad, accumulator) bytes of one product in _lower_resident (`halves` 2: the
    kernel's first product, double buffers), its epilogue and a rotary's tiles."""
    copies = ctx.bf16_copies
    fmt = block_format(fmt_name)
    entry = isa.qscale_bytes(isa.QFORMAT_CODE[fmt_name])
    spad = halves * ((K * fmt.bits // 8) * N + (K // isa.QBLOCK) * N * entry + K * N * 2 * copies)
    spad += (halves * K * N * 4 if copies == 2 else 0) + (epilogue_ops + 3) * 2 * M * N * 4
    return spad, M * N * 4


def needed_outside(ctx: LoweringContext, op: Operation, others: list) -> bool:
    """Whether the result of the first product `op` must go to DRAM: read by an op outside
    its group (`others`: its siblings) or a function result."""
    kernel = op.parent_op()
    if not others or not isinstance(kernel, g.KernelOp):
        return True
    out = kernel.outputs[0]
    grouped = {kernel, *(p.op.parent_op() for p in others)}
    return out in ctx.destinations or any(u.operation not in grouped for u in out.uses)


def consumers(ctx: LoweringContext, op: Operation, M: int, N: int):
    """The rotary / KV write done on product `op`'s tile (product_consumers.py), marked for the
    driver to skip, or None. The product's result buffer is allocated (views of it are still
    lowered) but not written."""
    from infer.passes.graph_to_tile import product_consumers

    kernel = op.parent_op()
    if not isinstance(kernel, g.KernelOp) or not isinstance(kernel.parent_op(), func.FuncOp):
        return None
    found = product_consumers.find(ctx, kernel, kernel.outputs[0], M, N, ctx.derived.get(NEST_HEAD, kernel))
    if found is None:
        return None
    product_consumers.mark(ctx, found)
    ctx.output_buffer(kernel.outputs[0])
    return found


def siblings(ctx: LoweringContext, op: Operation, norm: g.RmsNormOp | None, M: int, K: int,
             chained: bool = False) -> list:
    """The ResidentProducts to lower with resident packed product `op` (see the module
    docstring), their kernels marked for the driver to skip; [] when there are none."""
    from infer.passes.graph_to_tile import packed_gemm

    kernel = op.parent_op()
    if not isinstance(kernel, g.KernelOp) or not isinstance(kernel.parent_op(), func.FuncOp) or ctx.session.overrides:
        return []
    source = _source(kernel, op, norm)
    first_dq = packed_gemm.packed_weight_of(op)
    assert first_dq is not None
    spad, acc = _footprint(ctx, M, K, shape_of(op.results[0])[-1], first_dq[0].block_format.data, 2,
                           1 if chained else 2)
    spad += 2 * M * K * (8 + 2 * ctx.bf16_copies) + ctx.derived.get(packed_gemm.CHAIN_BYTES, 0) * chained
    made: dict[SSAValue, int] = {kernel.outputs[0]: 0}
    found: list[tuple[g.KernelOp, Operation, list[Operation], SSAValue, int, g.DequantizeBlocksOp, g.WeightOp,
                      dict[SSAValue, int]]] = []
    nxt = kernel.next_op
    while nxt is not None and len(found) < MAX_SIBLINGS:
        if isinstance(nxt, _BETWEEN):
            nxt = nxt.next_op
            continue
        if not isinstance(nxt, g.KernelOp) or nxt.kind.data != "matmul" or len(nxt.outputs) != 1:
            break
        anchor = nxt.anchor()
        packed = packed_gemm.packed_weight_of(anchor) if anchor is not None else None
        if anchor is None or packed is None:
            break
        prologue = nxt.prologue()
        norm2 = packed_gemm._norm_prologue_of(anchor)
        if prologue != ([norm2] if norm2 is not None else []) or _source(nxt, anchor, norm2) != source:
            break
        ops = [o for o in nxt.body.block.ops if o is not nxt.yield_op and not isinstance(o, g.ConstantOp)]
        epilogue = ops[ops.index(anchor) + 1:]
        if any(not isinstance(o, g.ELEMENTWISE_OPS) or isinstance(o, g.QUANTIZATION_OPS) for o in epilogue):
            break
        reads_anchor_or_norm = {anchor, norm2}
        on_chip: dict[SSAValue, int] = {}
        inputs_ok = True
        for arg, value in zip(nxt.body.block.args, nxt.inputs, strict=True):
            if value in made:
                if any(u.operation in reads_anchor_or_norm for u in arg.uses):
                    inputs_ok = False
                on_chip[arg] = made[value]
            elif not _in_nest(ctx, value, kernel):
                inputs_ok = False
        if not inputs_ok:
            break
        result = nxt.yield_op.values[0]  # type: ignore[union-attr]
        out_shape = shape_of(result)
        Mn, Nn, Kn, (TM, TN, TK) = packed_gemm._choose_tiles(ctx, anchor, packed[0], epilogue, result, None,
                                                             prologue=norm2 is not None)
        if (Mn, Kn) != (M, K) or not (Mn <= TM and Nn <= TN and Kn == TK) or out_shape[-1] != Nn:
            break
        s, a = _footprint(ctx, M, K, Nn, packed[0].block_format.data, len(epilogue))
        if spad + s > SPAD_SHARE * ctx.hw.memory.scratchpad_bytes or acc + a > ctx.hw.memory.accumulator_bytes // 2:
            break
        spad, acc = spad + s, acc + a
        made[nxt.outputs[0]] = len(found) + 1
        found.append((nxt, anchor, epilogue, result, TN, *packed, on_chip))
        nxt = nxt.next_op
    if not found:
        return []
    grouped = {kernel, *(f[0] for f in found)}
    return [_product(ctx, *f, grouped, M, K) for f in found]


def _product(ctx: LoweringContext, nxt: g.KernelOp, anchor: Operation, epilogue: list[Operation], result: SSAValue,
             tn: int, dq: g.DequantizeBlocksOp, packed: g.WeightOp, on_chip: dict[SSAValue, int],
             grouped: set[Operation], M: int, K: int):
    """The ResidentProduct of kernel `nxt` lowered in a group (`grouped`: the group's kernels); its block arguments bound like the driver binds them, the kernel marked for the
    driver to skip."""
    from infer.passes.graph_to_tile import packed_gemm

    em = ctx.emitter
    ctx.kernel_name()  # the name it would have had (later kernels keep theirs)
    for o in nxt.body.block.ops:
        if isinstance(o, g.ConstantOp):
            ctx.set_constant(o.output, dense_to_numpy(o.value))
    for arg, value in zip(nxt.body.block.args, nxt.inputs, strict=True):
        if value in ctx.buffers:
            ctx.buffers[arg] = ctx.buffers[value]
        ctx.share_constant(arg, value)
    fmt_name = dq.block_format.data
    N = shape_of(dq.output)[0]
    out = nxt.outputs[0]
    after = consumers(ctx, anchor, M, N)
    needed = any(u.operation not in grouped for u in out.uses) or out in ctx.destinations
    out2 = em.view(ctx.output_buffer(out), (M, N)) if needed and after is None else None
    if out2 is not None:
        ctx.buffers[result] = ctx.buffers[out]
    codes_w, scales_w = packed_gemm._plane_weights(ctx, packed.weight_key, np.asarray(ctx.store.get(packed.weight_key)),
                                                   fmt_name, N, K, tn, K)
    bias = anchor.bias if isinstance(anchor, g.LinearOp) else None
    bias_row = em.view(ctx.buffer(bias), (1, N)) if bias is not None else None
    ctx.derived[(LOWERED_WITH, nxt)] = True
    ctx.derived.setdefault(NEST_MADE, set()).add(out)
    return packed_gemm.ResidentProduct(anchor, epilogue, result, fmt_name, N, codes_w, scales_w, bias_row, out2,
                                       ((), tuple(shape_of(result)[:-1]), (N,)), on_chip, after)


def chained(ctx: LoweringContext, products: list, tiles: list[SSAValue], M: int):
    """The next group when its activations are a result of this one still on chip: the next
    "matmul" kernel (only views and weights in between) on packed weights, resident, whose
    activations (or its rms_norm prologue's input) are the result of one of `products` (its
    tile in `tiles`), with every other input made before this group. -> (its products with
    their siblings, the source tile, K, its norm or None), or None. o -> gate/up -> down ->
    the next layer's q/k/v follow each other so, without a DRAM round trip of the rows."""
    from infer.passes.graph_to_tile import packed_gemm

    if ctx.session.overrides:
        return None
    kernels = [p.op.parent_op() for p in products]
    if not all(isinstance(k, g.KernelOp) for k in kernels):
        return None
    first, last = ctx.derived.get(NEST_HEAD, kernels[0]), kernels[-1]
    made = {k.outputs[0]: tile for k, tile in zip(kernels, tiles, strict=True)}
    nxt = last.next_op
    while nxt is not None and isinstance(nxt, _BETWEEN):
        nxt = nxt.next_op
    if not isinstance(nxt, g.KernelOp) or nxt.kind.data != "matmul" or len(nxt.outputs) != 1:
        return None
    anchor = nxt.anchor()
    packed = packed_gemm.packed_weight_of(anchor) if anchor is not None else None
    if anchor is None or packed is None:
        return None
    norm = packed_gemm._norm_prologue_of(anchor)
    if nxt.prologue() != ([norm] if norm is not None else []):
        return None
    source = _outer(nxt, norm.input if norm is not None else anchor.operands[0])
    if source not in made or (norm is not None and not _in_nest(ctx, _outer(nxt, norm.scale), first)):
        return None
    for arg, value in zip(nxt.body.block.args, nxt.inputs, strict=True):
        if value is not source and not _in_nest(ctx, value, first) and value not in made:
            return None
    ops = [o for o in nxt.body.block.ops if o is not nxt.yield_op and not isinstance(o, g.ConstantOp)]
    epilogue = ops[ops.index(anchor) + 1:]
    if any(not isinstance(o, g.ELEMENTWISE_OPS) or isinstance(o, g.QUANTIZATION_OPS) for o in epilogue):
        return None
    result = nxt.yield_op.values[0]  # type: ignore[union-attr]
    Mn, Nn, K, (TM, TN, TK) = packed_gemm._choose_tiles(ctx, anchor, packed[0], epilogue, result, None,
                                                        prologue=norm is not None)
    if Mn != M or not (Mn <= TM and Nn <= TN and K == TK) or shape_of(result)[-1] != Nn:
        return None
    s, _ = _footprint(ctx, M, K, Nn, packed[0].block_format.data, len(epilogue))
    if ctx.derived.get(packed_gemm.CHAIN_BYTES, 0) + s + 2 * M * K * 8 > SPAD_SHARE * ctx.hw.memory.scratchpad_bytes:
        return None
    head = _product(ctx, nxt, anchor, epilogue, result, TN, *packed, {}, {nxt}, M, K)
    others = siblings(ctx, anchor, norm, M, K, chained=True)
    if others and head.out2 is not None and not needed_outside(ctx, anchor, others):
        head.out2 = None  # read only by its siblings: stays on chip
    return [head, *others], made[source], K, norm
