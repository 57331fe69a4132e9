"""A kernel's weight prefetch issued before the kernel before's epilogue (latency-bound targets).

A cross-kernel prefetch (`matrix_unit.prefetch_packed`) is the first thing a kernel does: DMAs
of its packed weights into buffers kept apart from the kernel before's
(`tile.live_from_previous`). The front end dispatches them when it reaches the kernel, and it
reaches it only after dispatching the kernel before's epilogue: on the server config it waited
there for the epilogue's parameter rows (a front-end `nop wait`) and for room in the vector
queue while the vector unit still ran the kernel before that. MiniLM's FFN up projection got its
1.2 MB of weights ~1.2 K cycles after its activations were ready, every layer.

After a function is lowered, each kernel's leading run of such DMAs moves into the kernel
before: the DMAs right after its last top-level op that holds a `tile.matmul` (where its
epilogue starts), their buffers' allocs with that kernel's allocs. Kernels are the groups
tile-to-npu's op markers make (a top-level `tile.alloc` after ops that emit code starts one), so
a kernel that would keep no alloc of its own is left as it is. The moved DMAs read weights,
which nothing writes, into buffers no op before them touches, so moving them up changes no
value; the memory plan sees the buffers live from their new first touch. The op report counts
those DMAs (their cycles and DRAM bytes) in the kernel before. Every move is labelled
(`tile.hoisted`, `tile.hoist_origin`), so tile-to-npu can put it back where the kernel before
cannot fit the semaphores with it (tile_to_npu/hoisted.py). Where the products after the
kernel before's first product loop fill the matrix unit's queue and no DRAM load of that
kernel follows, the DMAs go after that first loop instead (`_dma_anchor`): the front end, held
by the queue until it has dispatched most of that kernel's products, issues them about a
kernel's products earlier (MiniLM's FFN down projection: 142,624 -> 141,540 cycles on server;
the SmolLM2 decode step 256,326 -> 250,729; docs/paged-kv.md "The next kernel's weights
requested a kernel earlier"). Where the kernel before is straight-line products (a one-key-tile
attention's heads, step by step), they go in front of the last products that take as long as
the DMAs' latency and transfer (`_before_the_last_products`; MiniLM's o projection). Else,
where the kernel before moves next to nothing through the DRAM from its first product on, they
go in front of that product (`_ahead_of_the_products`; ResNet-50's stage-4 convs on server).
A kernel without products that loads nothing (a global pool before the classifier,
`_passed_over`) is passed over: a kernel with products before it hosts the DMAs
(`_host_before`), the one before the last where the last cannot take them ahead of its products
and the one before streams longer than the transfer (ResNet-50's FC weights on server).

The kernel's operand preparation moves there too (after the DMAs, if any) when the kernel
before has an epilogue on the vector unit after that point (`_operand_preparation`): the vector
ops at the kernel's start that convert data made before into operand tiles of its own (MiniLM's
k and v projections copy the layer norm's fp32 output into bf16 tiles, one per k step) and the
fill of its accumulator (a k loop's zeroing) are placed ahead of that epilogue. The vector unit
runs in order: they had waited behind the epilogue, which waits for the kernel before's last
matmul to drain, and the kernel's first matmul waited for them (a 400-cycle matrix gap at each
of those boundaries). A preparation op moves
only when nothing between its new and its old place writes its sources or touches its
destination (a kept-apart, single-buffered alloc of the kernel, which moves with the DMAs'
allocs), so it computes the same values; the kernel's matmul nests and loads between such ops
stay where they are (o's first k step's copy of the attention's first heads goes ahead of o's
residual load). On server (bf16): MiniLM seq 128 151,042 -> 146,862 cycles, the Llama prefill
316,953 -> 316,441 (its fills). A kernel whose first group is its weight prefetch alone (a
conv's output alloc after its weight DMAs starts the next group) has its accumulator fill in
the group after: `_fill_after_the_prefetch` moves that fill too (ResNet-50 server 388,162 ->
387,084).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, UnitAttr
from xdsl.ir import Block, Operation

from infer.dialects import tile as t
from infer.passes.graph_to_tile.context import local_bytes
from infer.passes.tile_memory_plan import LIVE_FROM_PREVIOUS
from infer.passes.tile_to_npu.common import accessed_buffers, trip_count

NO_CODE = (t.AllocOp, t.ViewOp, t.WeightOp, arith.ConstantOp)
#: "next to nothing" of DRAM traffic beside moved DMAs: at most 1/NEXT_TO_NOTHING of their bytes
#: (`_ahead_of_the_loop`, `_ahead_of_the_products`)
NEXT_TO_NOTHING = 16
#: how many kernels with products back from one without (a global pool) `_host_before` looks
#: for a kernel to host the next kernel's weight DMAs
HOST_SEARCH = 2


def kernel_groups(block: Block) -> list[list[Operation]]:
    """The block's top-level ops grouped into kernels (op markers' rule)."""
    kernels: list[list[Operation]] = [[]]
    emitted = False
    for op in block.ops:
        if isinstance(op, t.AllocOp) and emitted:
            kernels.append([])
            emitted = False
        elif not isinstance(op, NO_CODE):
            emitted = True
        kernels[-1].append(op)
    return kernels


def holds_matmul(op: Operation) -> bool:
    return isinstance(op, t.MatmulOp) or any(isinstance(o, t.MatmulOp) for o in op.walk())


def root_alloc(value) -> t.AllocOp | None:
    owner = t.root_buffer(value).owner
    return owner if isinstance(owner, t.AllocOp) else None


def _is_weight(value) -> bool:
    return isinstance(t.root_buffer(value).owner, t.WeightOp)


def ends_in_vector_epilogue(ops: list[Operation]) -> bool:
    """Whether a kernel's ops (in order) have vector work after their last top-level op that
    holds a matmul: an epilogue the next kernel's operand preparation can move ahead of
    (`_operand_preparation`, which looks after the epilogue's loads)."""
    last = max((i for i, op in enumerate(ops) if holds_matmul(op)), default=None)
    return last is not None and any(isinstance(o, t.VectorOp | t.FillOp)
                                    for op in ops[last + 1:] for o in op.walk())


def ends_in_products(ops: list[Operation]) -> bool:
    """Whether ops (in order, nested ops included) hold a matmul and no vector work after their
    last one (no epilogue, nor an attention's last heads inside its loop): what comes after
    them waits for the matrix unit to drain."""
    walked = [o for op in ops for o in op.walk()]
    last = max((i for i, o in enumerate(walked) if isinstance(o, t.MatmulOp)), default=None)
    return last is not None and not any(isinstance(o, t.VectorOp | t.FillOp) for o in walked[last + 1:])


def hoist_weight_prefetches(block: Block, preparation: bool = True, *, queue_depth: int,
                            lead_cycles: int, bytes_per_cycle: float,
                            scratchpad_bytes: int | None = None) -> int:
    """Move each kernel's leading weight-prefetch DMAs into the kernel before, and with
    `preparation` its operand preparation (module docstring); returns how many DMAs moved.
    `queue_depth`: the matrix unit's instruction queue depth (`_dma_anchor`); `lead_cycles` and
    `bytes_per_cycle`: the DRAM's latency and bandwidth (`_before_the_last_products`);
    `scratchpad_bytes`: the capacity the moved buffers and those of each kernel they pass
    through must fit together (`_room_for`; None: not checked)."""
    kernels = kernel_groups(block)
    position = {op: i for i, op in enumerate(block.ops)}
    moved = 0
    moves = 0  # (the label of the next move)
    for number, (before, kernel) in enumerate(zip(kernels, kernels[1:])):
        code = [op for op in kernel if not isinstance(op, NO_CODE)]
        run: list[t.DmaOp] = []
        for op in code:
            if not isinstance(op, t.DmaOp):
                break
            alloc = root_alloc(op.dst)
            if alloc is None or LIVE_FROM_PREVIOUS not in alloc.attributes or not _is_weight(op.src):
                break
            run.append(op)
        prepare, passed = preparation, False
        anchor = next((op for op in reversed(before) if holds_matmul(op)), None)
        if anchor is None and number > 0 and _passed_over(before, run):
            # (a kernel before it hosts the DMAs; no preparation moves over the kernels between)
            def fits(host: list[Operation], number=number, run=run) -> bool:
                return _room_for(kernels[kernels.index(host):number + 1], run, scratchpad_bytes)
            host = _host_before(kernels[:number], run, lead_cycles, bytes_per_cycle, fits)
            if host is None:
                continue
            before, prepare, passed = host, False, True
            anchor = next((op for op in reversed(before) if holds_matmul(op)), None)
        if anchor is None:
            continue
        # after the epilogue's own loads too (a residual): the load engine is in order, and
        # the epilogue waited behind the weights (MiniLM server 153.1 K -> 156.5 K cycles)
        loads = [op for op in before if isinstance(op, t.DmaOp) and t.space_of(op.src) == "dram"
                 and position[op] > position[anchor]]
        if loads:
            anchor = loads[-1]
        preps = _operand_preparation(before, kernel, anchor, position, run) if prepare else []
        if prepare and run and len(run) == len(code) and number + 2 < len(kernels):
            preps = preps + _fill_after_the_prefetch(before, kernel, kernels[number + 2], anchor, position, run)
        if not run and not preps:
            continue
        allocs = {root_alloc(op.dst) for op in [*run, *(p for p, _ in preps)]}
        own = [op for op in kernel if isinstance(op, t.AllocOp) and op not in allocs]
        if not own:
            continue  # the kernel would lose its start: leave it
        # the DMAs after the kernel before's first product loop where the front end waits for
        # the array after it (_dma_anchor), the preparation after `anchor`, before its epilogue
        dma_anchor = _dma_anchor(before, anchor, queue_depth) if run else anchor
        ahead_of = _ahead_of_the_loop(before, anchor, run) if run else None
        if run and ahead_of is None:
            ahead_of = _before_the_last_products(before, run, lead_cycles, bytes_per_cycle)
        if run and ahead_of is None:
            ahead_of = _ahead_of_the_products(before, run)
        # (the DMAs go right after `dma_anchor`, or right before `ahead_of` where there is one)
        cut = position[ahead_of] - 1 if ahead_of is not None else position[dma_anchor]

        # the operands of the moved DMAs made after the DMAs' place (index constants, views of
        # the weights) move with them; anything else made there leaves the kernel as it is
        def later(v) -> bool:
            return (isinstance(v.owner, Operation) and v.owner.parent_block() is block
                    and position[v.owner] > cut)

        helpers = sorted({v.owner for op in [*run, *(p for p, _ in preps)] for v in op.operands
                          if v.owner not in allocs and later(v)},
                         key=lambda o: position[o])
        if not all(isinstance(h, arith.ConstantOp) or (isinstance(h, t.ViewOp) and not later(h.operands[0]))
                   for h in helpers):
            continue
        # (`before` is the kernel's op list from before any move: its first code op may be a
        # DMA already moved into the kernel before it. The allocs then land after that
        # kernel's last load and start an op-marker group of their own there, so its epilogue
        # and these prefetches are degraded apart from its product nest when they run out of
        # semaphores. With the allocs before the kernel's own first code op instead, MiniLM's
        # FFN down projection is compiled single-buffered: 151.0 K -> 165.2 K cycles on
        # server. docs/paged-kv.md, "The next kernel's weights requested a kernel earlier".)
        # (a host found over a kernel without products: its first op still in it, so its code
        # stays one op-marker group; with the allocs after its last load instead, fp32
        # ResNet-50's last 3x3 conv lost its epilogue's overlap: +8 K cycles)
        first_code = next(op for op in before if not isinstance(op, NO_CODE)
                          and not (passed and t.HOISTED_ATTR in op.attributes))
        for alloc in sorted(allocs, key=lambda a: position[a]):
            alloc.detach()
            block.insert_op_before(alloc, first_code)
        after = dma_anchor
        for op in [*helpers, *run]:
            op.detach()
            if ahead_of is not None:
                block.insert_op_before(op, ahead_of)
            else:
                block.insert_op_after(op, after)
            after = op
        if dma_anchor is not anchor or ahead_of is not None:
            after = anchor
        rank = -1  # (the position of the tail op the last prep follows: preps keep their order)
        for op, behind in preps:
            op.detach()
            if behind is not None and position[behind] > rank:
                after, rank = behind, position[behind]
            block.insert_op_after(op, after)
            after = op
        for op in run:
            op.attributes[t.PREFETCH_FOR_NEXT_ATTR] = UnitAttr()
        # (labelled, so tile-to-npu can put the move back: tile_to_npu/hoisted.py)
        label = IntegerAttr(moves, 64)
        for op in [*allocs, *helpers, *run, *(p for p, _ in preps)]:
            op.attributes[t.HOISTED_ATTR] = label
        own[0].attributes[t.HOIST_ORIGIN_ATTR] = label
        moves += 1
        moved += len(run)
    return moved


def _passed_over(before: list[Operation], run: list[t.DmaOp]) -> bool:
    """Whether the weight DMAs `run` of the next kernel go into a kernel before `before`
    instead (`_host_before`): `before` has no products to put them among, loads nothing from
    DRAM (its loads, which the next kernel waits for, would queue behind them on the in-order
    load engine) and stores next to nothing (at most 1/16 of their bytes): a global pool before
    the classifier. Issued by the classifier after the pool, ResNet-50's 4 MB of FC weights
    arrived a transfer later, the array idle (2.8 K cycles on server)."""
    if not run or any(holds_matmul(op) for op in before) or any(_dram_load_bytes(op) for op in before):
        return False
    return sum(_dram_bytes(op) for op in before) * NEXT_TO_NOTHING <= sum(_transfer_bytes(op) for op in run)


def _host_before(kernels: list[list[Operation]], run: list[t.DmaOp], lead_cycles: int,
                 bytes_per_cycle: float, fits: Callable[[list[Operation]], bool]) -> list[Operation] | None:
    """The kernel to host the weight DMAs `run` of a kernel after one without products
    (`_passed_over`): of the last HOST_SEARCH kernels with products in `kernels`, the last that
    takes them ahead of its products (`_ahead_of_the_products`), a kernel before the last only
    where its products stream at least as many rows (one a cycle) as the DMAs take (a DRAM
    latency, `lead_cycles`, and their bytes at `bytes_per_cycle`), so they are done before the
    kernels after it load (the load engine is in order); else the last. After the last conv's
    products (it loads its residual and stores its output, so they cannot go ahead of them)
    ResNet-50's FC weights arrived a transfer after the pool, the array idle 2.8 K cycles;
    ahead of the products of the conv before it (9 K rows against 4.6 K cycles of transfer)
    they arrive while the two convs run: server 382,858 -> 380,034 cycles. Only a host whose
    buffers and those of the kernels after it fit beside the DMAs' buffers (`fits`); None when
    no such host is found."""
    need = lead_cycles + sum(_transfer_bytes(op) for op in run) / bytes_per_cycle
    hosts = [group for group in reversed(kernels) if any(holds_matmul(op) for op in group)][:HOST_SEARCH]
    for i, group in enumerate(hosts):
        if _ahead_of_the_products(group, run) is not None and (i == 0 or _product_rows(group) >= need) \
                and fits(group):
            return group
    host = hosts[0] if hosts else kernels[-1]
    return host if fits(host) else None


def _room_for(spanned: list[list[Operation]], run: list[t.DmaOp], scratchpad_bytes: int | None) -> bool:
    """Whether the scratchpad buffers of the DMAs `run` fit beside those of each kernel in
    `spanned` (the kernels they are live through once moved: a buffer allocated in a kernel is
    live for the whole of its nest). Moved into ResNet-50's last 3x3 conv on server (fp32,
    10.1 MB of its own), the classifier's 8.2 MB of weights did not fit the 16 MiB scratchpad."""
    if scratchpad_bytes is None:
        return True
    moving = sum(local_bytes(a) for a in {root_alloc(op.dst) for op in run} if a is not None
                 and t.space_of(a.buffer) == "spad")
    return all(moving + _spad_bytes(group) <= scratchpad_bytes for group in spanned)


def _spad_bytes(ops: list[Operation]) -> int:
    """The scratchpad bytes of the local allocs among ops and inside them."""
    return sum(local_bytes(o) for op in ops for o in op.walk()
               if isinstance(o, t.AllocOp) and t.space_of(o.buffer) == "spad")


def _product_rows(ops: list[Operation]) -> int:
    """The activation rows the matmuls of ops stream (`_executed`)."""
    return sum(_executed(op, lambda o: o.m.value.data if isinstance(o, t.MatmulOp) else 0) for op in ops)


def _dma_anchor(before: list[Operation], anchor: Operation, queue_depth: int) -> Operation:
    """Where the next kernel's weight DMAs go in the kernel before: after its first top-level
    product loop when the products after it fill the matrix unit's queue (`queue_depth`
    instructions, a weight load and a matmul each: the front end, which dispatches in order,
    waits there for the array until it has dispatched all but the last few; MiniLM's FFN down
    projection got its 1.2 MB of weights ~900 cycles after the up projection's last matmul) and
    no DRAM loads of that kernel come after it; otherwise `anchor` (after its last product nest
    and loads: the load engine is in order, and a later load of that kernel, a k step's
    activations or an epilogue's residual, would wait behind the weights). A kernel whose
    first product is a lone `tile.matmul` (an attention's heads) keeps `anchor` too: there
    tile-to-npu emitted the moved DMAs behind a front-end wait for the kernel's last matmul, and
    they went out later than from `anchor` (the transformer block of bench_compiler_gemm.py,
    the o projection's weights in its 4-head attention: 11,076 -> 11,922 cycles; where such a
    kernel's products are all lone, `_before_the_last_products` may place them instead). The moved
    buffers are kept apart from the kernel before's (`tile.live_from_previous`), so its
    products do not touch them."""
    products = [i for i, op in enumerate(before) if holds_matmul(op)]
    if len(products) < 2 or not isinstance(before[products[0]], scf.ForOp):
        return anchor
    later = before[products[0] + 1:]
    if 2 * sum(_matmuls(op) for op in later) <= queue_depth:
        return anchor
    if any(isinstance(o, t.DmaOp) and t.space_of(o.src) == "dram" for op in later for o in op.walk()):
        return anchor
    return before[products[0]]


def _ahead_of_the_loop(before: list[Operation], anchor: Operation, run: list[t.DmaOp]) -> Operation | None:
    """The loop to put the next kernel's weight DMAs right in front of, or None: the kernel
    before's only product nest when it is a loop that holds its epilogue (vector work after
    its last matmul inside the loop: an attention's last heads' normalisation and stores) and
    loads next to nothing from DRAM (at most 1/16 of the moved bytes, all iterations: a mask
    row). After such a loop the front end reaches the DMAs only once the vector queue has
    taken most of that epilogue, when the last products have been issued (MiniLM's o
    projection on server waited ~630 cycles for its 295 KB); in front of it they go out as the
    kernel starts. The load engine is in order, so the loop's own loads wait behind them: a loop
    that streams its operands (fp32 attention's Q / K / V tiles, the Llama prefill's
    products) keeps them after it."""
    products = [op for op in before if holds_matmul(op)]
    if products != [anchor] or not isinstance(anchor, scf.ForOp) or ends_in_products([anchor]):
        return None
    if _dram_load_bytes(anchor) * NEXT_TO_NOTHING > sum(_transfer_bytes(op) for op in run):
        return None
    return anchor


def _before_the_last_products(before: list[Operation], run: list[t.DmaOp], lead_cycles: int,
                              bytes_per_cycle: float) -> Operation | None:
    """The product to put the next kernel's weight DMAs right in front of, or None: where the
    kernel before's products are lone `tile.matmul`s (a straight-line attention: its heads' QK^T
    and P @ V, step by step), the last one from which the products after it stream at least as
    many rows (one a cycle) as the DMAs take (`lead_cycles`, a DRAM latency, plus their bytes at
    `bytes_per_cycle`), when no DRAM load of that kernel follows it (the load engine is in
    order). After the last product the front end reaches the DMAs only when the vector queue
    has taken most of the last heads' normalisation: MiniLM's o projection on server waited for
    its 295 KB of weights until ~300 cycles after the attention's last matmul."""
    products = [op for op in before if holds_matmul(op)]
    if len(products) < 2 or not all(isinstance(op, t.MatmulOp) for op in products):
        return None
    need = lead_cycles + sum(_transfer_bytes(op) for op in run) / bytes_per_cycle
    rows = 0
    for op in reversed(products):
        rows += op.m.value.data
        if rows >= need:
            later = before[before.index(op):]
            return None if any(_dram_load_bytes(o) for o in later) else op
    return None


def _ahead_of_the_products(before: list[Operation], run: list[t.DmaOp]) -> Operation | None:
    """The kernel before's first product op to put the next kernel's weight DMAs right in front
    of, or None: where that kernel moves next to nothing through the DRAM from there on (its
    loads and its stores at most 1/16 of the moved bytes). The DMAs then go out as its products
    start and have the DRAM to themselves while they run, where after its products they arrived
    a transfer after it and the next kernel waited for them (ResNet-50's stage 4 on server: 2 to
    4.7 MB of resident conv weights behind convs of 6-12 K cycles that read their input on chip
    and store 50-400 KB; 393,599 -> 389,355 cycles). A kernel that streams its operands or stores
    its tiles keeps them after its products: the load engine is in order, and its stores share
    the DRAM's bandwidth (MiniLM's FFN kernels on server, whose tiles' stores went behind the
    next kernel's weights: 120,234 -> 125,678 cycles with the loads alone counted)."""
    first = next((op for op in before if holds_matmul(op)), None)
    if first is None:
        return None
    later = before[before.index(first):]
    moved = sum(_transfer_bytes(op) for op in run)
    traffic = sum(_dram_bytes(op) for op in later)
    return first if traffic * NEXT_TO_NOTHING <= moved else None


def _transfer_bytes(dma: t.DmaOp) -> int:
    return prod(dma.shape.get_values()) * max(1, dma.src.type.get_element_type().bitwidth // 8)


def _dram_load_bytes(op: Operation) -> int:
    """The bytes op's DMAs load from DRAM (`_executed`)."""
    return _executed(op, lambda o: _transfer_bytes(o) if isinstance(o, t.DmaOp) and t.space_of(o.src) == "dram" else 0)


def _dram_bytes(op: Operation) -> int:
    """The bytes op's DMAs load from DRAM or store into it (`_executed`)."""
    return _executed(op, lambda o: _transfer_bytes(o) if isinstance(o, t.DmaOp)
                     and "dram" in (t.space_of(o.src), t.space_of(o.dst)) else 0)


def _matmuls(op: Operation) -> int:
    """How many matmuls op runs (`_executed`)."""
    return _executed(op, lambda o: 1 if isinstance(o, t.MatmulOp) else 0)


def _executed(op: Operation, amount: Callable[[Operation], int]) -> int:
    """`amount` summed over op and the ops nested in it as they run: each loop's body times its
    trip count (a loop whose count is not known at compile time counts once)."""
    inner = sum(_executed(o, amount) for region in op.regions for block in region.blocks for o in block.ops)
    return amount(op) + (inner * max(1, trip_count(op)) if isinstance(op, scf.ForOp) else inner)


def buffers_of(op: Operation) -> tuple[set, set]:
    """(root buffers op or an op nested in it may write, root buffers they touch); an op
    `accessed_buffers` does not know counts as writing every buffer operand."""
    written, touched = set(), set()
    for o in op.walk():
        operands = {t.root_buffer(v) for v in o.operands if isinstance(v.type, t.MemRefType)}
        touched |= operands
        known = accessed_buffers(o)
        written |= {b for b, w in known if w} if known else operands
    return written, touched


def _fill_after_the_prefetch(before: list[Operation], kernel: list[Operation], following: list[Operation],
                             anchor: Operation, position: dict[Operation, int], run: list[t.DmaOp]
                             ) -> list[tuple[Operation, Operation | None]]:
    """A kernel whose first op-marker group is its weight prefetch alone (`run`; a conv's
    output alloc after its weight DMAs starts the next group, `following`): the accumulator
    fill that group starts with, where `_operand_preparation` would move it (its other
    preparation stays: its copies read views made after the DMAs' place). A tap conv's one-step
    tile is zeroed first, and on the in-order vector unit the zeroing waited behind the kernel
    before's epilogue while the array idled (ResNet-50 server: 22 such fills, 3.0 K cycles)."""
    moved = _operand_preparation(before, kernel + following, anchor, position, run)
    return [(op, behind) for op, behind in moved[:1] if isinstance(op, t.FillOp)]


def _operand_preparation(before: list[Operation], kernel: list[Operation], anchor: Operation,
                         position: dict[Operation, int], run: list[t.DmaOp]
                         ) -> list[tuple[Operation, Operation | None]]:
    """The vector ops and fills at the start of `kernel` (after the moved DMAs `run`; between
    them only the kernel's matmul nests and loads, which stay) that may move to just after the anchor,
    each with the op of the kernel before's tail it must follow instead (None: none): each
    writes a kept-apart single-buffered alloc of the kernel that nothing between the anchor and
    the op touches, and reads allocs nothing there writes, or that the tail writes only in
    boxes apart from the one it reads, or before an op of the tail it then follows (a norm
    epilogue's last passes by column blocks, `norms.normalize(tail_columns=...)`: the next
    kernel's first k step's rounding copy of the first block goes right after that block).
    None unless the kernel before has vector work after the anchor (an epilogue for them to
    overtake)."""
    tail = [op for op in before if position[op] > position[anchor]]
    if not any(isinstance(o, t.VectorOp | t.FillOp) for op in tail for o in op.walk()):
        return []
    tail_writes: list[tuple[Operation, object, tuple | None]] = []  # (tail op, root, box or None)
    blocked_touches: set = set()
    for op in tail:
        written, touched = buffers_of(op)
        blocked_touches |= touched
        box = _written_box(op)
        tail_writes += [(op, root, box if box is not None and box[0] is root else None) for root in written]
    kernel_writes: set = set()
    moved: list[tuple[Operation, Operation | None]] = []
    in_run = set(run)
    for op in kernel:
        if isinstance(op, NO_CODE) or op in in_run:
            continue
        if isinstance(op, t.VectorOp | t.FillOp):
            alloc = root_alloc(op.dst)
            reads = _read_boxes(op) if isinstance(op, t.VectorOp) else []
            if (alloc is not None and alloc in kernel and LIVE_FROM_PREVIOUS in alloc.attributes
                    and alloc.buffers.value.data == 1 and alloc.buffer not in blocked_touches
                    and all(isinstance(root.owner, t.AllocOp) for root, _ in reads)
                    and not {root for root, _ in reads} & kernel_writes):
                behind = None  # the last tail op writing what op reads
                for tail_op, root, box in tail_writes:
                    if any(root is r and (box is None or b is None or _boxes_meet(box, b)) for r, b in reads):
                        behind = tail_op
                # (into the tail only one preparation op, the kernel's first that reads what
                # the tail writes: MiniLM's later k steps' copies moved too left semaphores
                # live into later kernels, and the function was compiled again without its
                # first-iteration peels)
                if behind is None or all(b is None for _, b in moved):
                    moved.append((op, behind))
                    continue
        if not holds_matmul(op) and not isinstance(op, t.DmaOp):
            break  # (the kernel's product nests and loads stay: what they write blocks the ops after)
        written, touched = buffers_of(op)
        kernel_writes |= written
        blocked_touches |= touched
    return moved


def _box_of(value, indices, rows: int, cols: int) -> tuple | None:
    """(root buffer, first row, end row, first column, end column) of a 2-D box of an alloc at
    constant indices, or None when it is not known at compile time (views, loop indices)."""
    if not isinstance(value.owner, t.AllocOp):
        return None
    start = []
    for index in indices:
        owner = index.owner
        if not isinstance(owner, arith.ConstantOp):
            return None
        start.append(owner.value.value.data)
    if len(start) != 2:
        return None
    return (value, start[0], start[0] + rows, start[1], start[1] + cols)


def _written_box(op: Operation) -> tuple | None:
    """The box a top-level vector op or fill writes (None: not known)."""
    if isinstance(op, t.FillOp):
        return _box_of(op.dst, op.dst_indices, op.rows.value.data, op.cols.value.data)
    if isinstance(op, t.VectorOp):
        cols = 1 if op.OPS[op.op.data].reduces_rows else op.cols.value.data
        return _box_of(op.dst, op.dst_indices, op.rows.value.data, cols)
    return None


def _read_boxes(op: t.VectorOp) -> list[tuple[object, tuple | None]]:
    """(root buffer, box or None) of each operand a vector op reads."""
    rows, cols = op.rows.value.data, op.cols.value.data
    reads = [(t.root_buffer(op.a), _box_of(op.a, op.a_indices, rows, cols))]
    if op.b:
        mode = op.bmode.data if op.bmode is not None else "tile"
        shape = {"row": (1, cols), "col": (rows, 1)}.get(mode, (rows, cols))
        reads.append((t.root_buffer(op.b[0]), _box_of(op.b[0], op.b_indices, *shape)))
    return reads


def _boxes_meet(a: tuple, b: tuple) -> bool:
    return a[1] < b[2] and b[1] < a[2] and a[3] < b[4] and b[3] < a[4]
