"""`graph-defer-paged-query{target=...}`: on a latency-bound target, each decode step's query
projection after its key and value projections, so the attention's first blocks are gathered
before the query is made.

A Llama layer projects the normalised row to q, k and v (three `graph.linear`, in that order
from the importers), rotates q and k, appends k and v to the paged pools
(`graph.kv_cache_write`) and attends (`graph.paged_attention`). packed_siblings.py lowers q, k
and v as one kernel of products in graph order, each product's rotary and append on its tile
right after it. On server the appends are stored by the attention after its gathers
(`paged_kv.append_after_gathers`), and once the key and value rows are made the kernel gathers
the attention's first K / V blocks (`paged_kv._prefetch_first_blocks`): with the query product
last, that DRAM latency overlaps it; the query is needed only by the scores, and reaches the
attention on chip. (The pass came first for the appends' stores, which the gathers waited for
while the appends went first: docs/paged-kv.md, "The query after the key and value".)

This pass moves the ops that only make an attention's query (its projection, the views after
it, the rotary; the backward slice of the query whose results nothing else reads) to just
after the key and value projections: before the first op after the query projection that is
not a projection or a view (the key's rotary). The projections stay adjacent, so they remain
one group of siblings, now k, v, q. Only the order changes; every value is the same. Decode
steps only (one query row per sequence): a prefill chunk's products are tiled, not one group.
Only on latency-bound targets (`context.latency_bound`: the server config), where the group's
products follow each other in one kernel and the gathers' DRAM latency is in series with the
attention; on edge, where each product is a tiled kernel, the order moved SmolLM2's decode step
by +0.03 %. And only in bf16: with fp32 emulation each product is three passes, and the query
product, last, took longer than the latency it hid (SmolLM2 fp32 decode on server, with the
appends still first: +0.57 % at batch 1, +1.2 % at batch 8). SmolLM2 bf16 on server with the
appends after the gathers: 268,178 cycles a step without this pass, 256,326 with it (batch 8,
with every sequence's first blocks gathered ahead too: 598,797 against 586,470).

    %q = linear %x, %wq ; %k = linear %x, %wk ; %v = linear %x, %wv ; rotary %q ; rotary %k ; ...

becomes

    %k = linear %x, %wk ; %v = linear %x, %wv ; %q = linear %x, %wq ; rotary %q ; rotary %k ; ...
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of

#: what may sit between the projections of one layer (weights, their expansion, views)
_PROJECTION_RUN = (g.WeightOp, g.ConstantOp, g.DequantizeBlocksOp, g.LinearOp, g.MatmulOp, g.ReshapeOp,
                   g.TransposeOp)


def _query_slice(attention: g.PagedAttentionOp) -> list[Operation]:
    """The ops before the attention in its block whose results only the attention's query reads
    (directly or through each other), in block order: walked backwards, so every user of an op
    is decided before the op."""
    taken: list[Operation] = []
    chosen: set[Operation] = set()
    op = attention.prev_op
    while op is not None:
        uses = [use for r in op.results for use in r.uses]
        if uses and all(u.operation in chosen or (u.operation is attention and u.index == 0) for u in uses):
            taken.append(op)
            chosen.add(op)
        op = op.prev_op
    return taken[::-1]


def _defer(block: Block, attention: g.PagedAttentionOp) -> bool:
    if shape_of(attention.operands[0])[-2] != 1:
        return False  # a prefill chunk's queries: its products are not one resident group
    ops = _query_slice(attention)
    projection = next((op for op in ops if isinstance(op, g.LinearOp | g.MatmulOp)), None)
    if projection is None:
        return False
    moved = set(ops)
    anchor = projection.next_op
    while anchor is not None and (anchor in moved or isinstance(anchor, _PROJECTION_RUN)):
        anchor = anchor.next_op
    if anchor is None:
        return False
    order = {op: i for i, op in enumerate(block.ops)}
    # (ops of the slice after the anchor stay: the values they read are made before them)
    before = [op for op in ops if order[op] < order[anchor]]
    # already last among the projections: nothing between it and the anchor but its own slice
    between = []
    op = projection.next_op
    while op is not None and op is not anchor:
        if op not in moved:
            between.append(op)
        op = op.next_op
    if not any(isinstance(op, g.LinearOp | g.MatmulOp) for op in between):
        return False
    for op in before:
        op.detach()
        block.insert_op_before(op, anchor)
    return True


@dataclass(frozen=True)
class GraphDeferPagedQueryPass(ModulePass):
    """Move each decode step's query projection after the key and value projections (module
    docstring).

    Options:
      target: the hardware config ("edge", "server" or a TOML path); the pass changes nothing
        unless its DRAM is latency-bound (the server config).
      precision: the compile precision; the pass changes nothing unless it is bf16.
    """

    name = "graph-defer-paged-query"

    target: str = "edge"
    precision: str = "bf16"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from infer.passes.graph_to_tile.context import latency_bound_target

        if not latency_bound_target(self.name, self.target) or self.precision != "bf16":
            return
        for attention in [o for o in op.walk() if isinstance(o, g.PagedAttentionOp)]:
            block = attention.parent_block()
            if block is not None:
                _defer(block, attention)
