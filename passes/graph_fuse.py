"""`graph-fuse`: group graph ops into `graph.kernel` fusion groups.

Each group becomes one kernel of the tile lowering:

- An anchor op (linear/matmul -> "matmul", conv2d -> "conv", layer_norm/rms_norm
  -> "norm", softmax/log_softmax -> "softmax", attention -> "attention",
  max/avg/global pooling -> "pool"; see `graph.KERNEL_ANCHORS`) and the chain of
  elementwise ops after it (its epilogue): bias add, activation, scale, cast,
  a residual add, a gate multiply, ... Every anchor becomes a kernel, with an
  empty epilogue if nothing follows it.
- A chain of elementwise ops without an anchor becomes an "elementwise" kernel
  (a single elementwise op too, so every elementwise op ends up in a kernel).

The chain grows from the current value v (first the anchor's result) into its
user u while
- all uses of v are in u (so no intermediate is needed outside the kernel),
- u is elementwise (`graph.ELEMENTWISE_OPS`: unary, binary, where, cast and the
  quantize / dequantize / requantize conversions) with
  one result in the same block,
- u's result has v's shape: u's other operands are values from outside the
  kernel that broadcast to v's shape (so `add(conv_out, skip)` joins the
  conv's kernel, and `mul(silu(gate), up)` joins the gate's kernel with `up`,
  another kernel's result, as an operand),
- the kernel holds fewer than `max-epilogue` elementwise ops.

A "matmul" kernel (a float linear/matmul on a dense weight) may end with a norm
epilogue: a `graph.layer_norm` or `graph.rms_norm` over the last dim (the
product's output rows) of the chain's last value joins the kernel as its last
op (a post-LN transformer's o-projection + bias + residual -> LayerNorm). When
that value has users after the norm too (a pre-norm transformer's residual sum,
which the next residual add reads), it is the kernel's first result and the
norm's the second. graph-to-tile normalises whole output rows on chip
before the one store where its cost model finds that faster, else lowers the
norm as a kernel of its own after the product (docs/tiling.md, "Norms fused
into the product before them"). Products on packed GGUF weights keep their
norms apart (graph-fuse-norm-prologue moves them into the products after them).

Anchors are grouped first, in program order, so an elementwise op whose
operands come from two anchors joins the earlier one. Values from outside the
group (activations, `graph.weight`/`graph.constant` results, other kernels'
results) become the kernel's operands, in order of first use; the weight and
constant ops stay outside, so the region is isolated from above. The kernel
replaces the group at the position of its last op. Ops inside existing kernels
are never regrouped, so the pass is idempotent.

Ops that are neither anchors nor elementwise (reshape, transpose, concat,
slice, batch_norm, reductions, gather, rotary, ...) stay outside kernels.

Options:
  max-epilogue: most elementwise ops in one kernel (default 4; 0 wraps each
    anchor alone and forms no elementwise kernels).
  norm-epilogue: norms join the "matmul" kernel before them (default true; not with
    max-epilogue=0 or without the "norm" kind).
  kinds: the kernel kinds to form (default all: matmul, conv, norm, softmax,
    attention, pool, elementwise), e.g. `kinds=matmul,conv`. An anchor of a
    disabled kind is left alone; its epilogue may form an elementwise kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of

ALL_KINDS: tuple[str, ...] = tuple(g.KERNEL_ANCHORS)
DEFAULT_MAX_EPILOGUE = 4

_ElementwiseOp = (
    g.UnaryOp | g.BinaryOp | g.WhereOp | g.CastOp | g.QuantizeLinearOp | g.DequantizeLinearOp | g.RequantizeOp
)
_AnchorOp = (
    g.MatmulOp | g.LinearOp | g.Conv2dOp | g.LayerNormOp | g.RmsNormOp | g.SoftmaxOp
    | g.LogSoftmaxOp | g.AttentionOp | g.MaxPool2dOp | g.AvgPool2dOp | g.GlobalAvgPoolOp
    | g.GlobalMaxPoolOp | g.Conv2dIntegerOp | g.LinearIntegerOp | g.MatmulIntegerOp
)
assert set(_AnchorOp.__args__) == set(g.ANCHOR_OPS)  # type: ignore[attr-defined]
assert set(_ElementwiseOp.__args__) == set(g.ELEMENTWISE_OPS)  # type: ignore[attr-defined]


def _fusable(op: Operation) -> bool:
    """A graph op in a function body (not already inside a kernel)."""
    return op.parent_block() is not None and not isinstance(op.parent_op(), g.KernelOp)


def next_in_chain(value: SSAValue) -> Operation | None:
    """The elementwise op that can join `value`'s kernel, or None."""
    users = {use.operation for use in value.uses}
    if len(users) != 1:
        return None
    (user,) = users
    if not isinstance(user, g.ELEMENTWISE_OPS) or len(user.results) != 1:
        return None
    if user.parent_block() is not value.owner.parent_block():  # type: ignore[union-attr]
        return None
    if shape_of(user.results[0]) != shape_of(value):
        return None
    return user


def collect_chain(start: Operation, limit: int) -> list[Operation]:
    """`start` followed by at most `limit` elementwise ops that can join it."""
    group = [start]
    while len(group) - 1 < limit and len(group[-1].results) == 1:
        if isinstance(group[-1], g.RequantizeOp | g.QuantizeLinearOp):
            break  # an int8 result ends a kernel (its users read it from DRAM: a QDQ model's DQ)
        user = next_in_chain(group[-1].results[0])
        if user is None:
            break
        group.append(user)
    return group


def norm_epilogue(group: list[Operation]) -> tuple[Operation, bool] | None:
    """The layer/rms norm that can end `group` (a float product on a dense weight and its
    elementwise chain) as its norm epilogue, and whether the chain's value is a result of the
    kernel too (it has users after the norm: a pre-norm block's residual sum); or None. The norm
    normalises the chain's value over its last dim."""
    anchor, value = group[0], group[-1].results[0]
    if not isinstance(anchor, g.LinearOp | g.MatmulOp) or isinstance(anchor.operands[1].owner, g.DequantizeBlocksOp):
        return None
    users = {use.operation for use in value.uses}
    norms = [u for u in users if isinstance(u, g.LayerNormOp | g.RmsNormOp) and u.input is value]
    if len(norms) != 1:
        return None
    (norm,) = norms
    rank = len(shape_of(value))
    if (norm.parent_block() is not anchor.parent_block() or value in norm.operands[1:]
            or norm.axis.value.data % rank != rank - 1):
        return None
    # the kernel takes the norm's place: the sum's other users must come after it
    if not all(u.parent_block() is norm.parent_block() and norm.is_before_in_block(u) for u in users - {norm}):
        return None
    return norm, len(users) > 1


def build_kernel(kind: str, group: list[Operation], rewriter: PatternRewriter,
                 kept: SSAValue | None = None) -> g.KernelOp:
    """Replace `group` (ops in program order, each feeding the next) by one kernel; `kept`: a
    value of the group used after it too, the kernel's first result (then the last op's)."""
    members = set(group)
    inputs: dict[SSAValue, None] = {}
    for op in group:
        for v in op.operands:
            if v.owner not in members:
                inputs.setdefault(v)
    block = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = {}
    for v, arg in zip(inputs, block.args, strict=True):
        arg.name_hint = v.name_hint
        mapping[v] = arg
    for op in group:
        block.add_op(op.clone(value_mapper=mapping))
    last = group[-1]
    results = ([kept] if kept is not None else []) + list(last.results)
    block.add_op(g.YieldOp(*(mapping[r] for r in results)))
    kernel = g.KernelOp(kind, list(inputs), [r.type for r in results], Region(block))
    rewriter.replace(last, kernel, kernel.results[len(results) - len(last.results):])
    if kept is not None:
        kernel.results[0].name_hint, kernel.results[1].name_hint = kept.name_hint, last.results[0].name_hint
        rewriter.replace_all_uses_with(kept, kernel.results[0])
    for op in reversed(group[:-1]):
        rewriter.erase(op)
    return kernel


@dataclass
class FuseAnchor(RewritePattern):
    """An anchor op and its elementwise epilogue -> one kernel of the anchor's kind."""

    kinds: frozenset[str]
    max_epilogue: int
    norms: bool = True  # norm epilogues of "matmul" kernels

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: _AnchorOp, rewriter: PatternRewriter, /):
        kind = g.kernel_kind_of(op)
        if kind not in self.kinds or not _fusable(op):
            return
        group = collect_chain(op, self.max_epilogue)
        found = norm_epilogue(group) if kind == "matmul" and self.norms and "norm" in self.kinds else None
        if found is None:
            build_kernel(kind, group, rewriter)
        else:
            norm, keeps_sum = found
            build_kernel(kind, group + [norm], rewriter, group[-1].results[0] if keeps_sum else None)


@dataclass
class FuseElementwise(RewritePattern):
    """A chain of elementwise ops (from its head) -> one "elementwise" kernel."""

    max_ops: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: _ElementwiseOp, rewriter: PatternRewriter, /):
        if self.max_ops < 1 or not _fusable(op):
            return
        # Only start at the head of a chain: an operand made by an elementwise op
        # that would take `op` into its own chain is grouped from there.
        for v in op.operands:
            producer = v.owner
            if isinstance(producer, g.ELEMENTWISE_OPS) and _fusable(producer) and next_in_chain(v) is op:
                return
        build_kernel("elementwise", collect_chain(op, self.max_ops - 1), rewriter)


@dataclass(frozen=True)
class GraphFusePass(ModulePass):
    """Group anchors with their elementwise epilogues, and elementwise chains,
    into graph.kernel fusion groups."""

    name = "graph-fuse"

    max_epilogue: int = DEFAULT_MAX_EPILOGUE
    kinds: tuple[str, ...] = ALL_KINDS
    norm_epilogue: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        unknown = [k for k in self.kinds if k not in ALL_KINDS]
        if unknown or self.max_epilogue < 0:
            raise ValueError(
                f"graph-fuse: kinds must be among {', '.join(ALL_KINDS)} (got "
                f"{', '.join(self.kinds) or 'none'}) and max-epilogue >= 0 (got {self.max_epilogue})"
            )
        kinds = frozenset(self.kinds)
        anchors = FuseAnchor(kinds, self.max_epilogue, self.norm_epilogue and self.max_epilogue > 0)
        PatternRewriteWalker(anchors, apply_recursively=False).rewrite_module(op)
        if "elementwise" in kinds:
            chains = FuseElementwise(self.max_epilogue)
            PatternRewriteWalker(chains, apply_recursively=True).rewrite_module(op)
