"""`graph-raise-attention`: scaled dot-product attention written out as matmuls and a softmax
becomes one `graph.attention`.

torch.onnx writes `F.scaled_dot_product_attention` (and every Hugging Face encoder exported
with it) as

    p = softmax((q * c1) @ (kT * c2) + mask, axis=-1)
    o = where(not(p == p), 0, p) @ v          # a fully masked row: NaN -> 0

and eager attention as `softmax(q @ kT / c + mask) @ v`. As graph ops these are two batched
matmuls with a [B, H, Sq, Skv] score tensor stored and loaded between them and a softmax kernel
of its own; as `graph.attention` they are one flash-attention kernel whose scores never leave
the chip (all-MiniLM-L6-v2 exported by torch.onnx, sequence 32, bf16 on server: 145,284
cycles with graph-raise-activations alone, 70,537 with this pass; the Hugging Face folder's
import, which makes graph.attention itself: 55,720).

Matched, from the second matmul back, every intermediate used only inside the pattern:
- o = matmul(p', v) without transposes, p' = p or the NaN guard where(not(equal(p, p)), 0, p);
- p = softmax(z) over the last axis; z = s, or s plus float terms that broadcast to the
  scores' shape (either operand order; several terms, such as a relative position bias and a
  mask, become one mask: summed at compile time into one weight when all are constants), a
  term possibly added through a 5-D view of the scores, reshape(reshape(s, [a, b, H, Sq, Skv])
  + m) with a.b the scores' batch (Swin's shifted windows: m [1, windows, 1, L, L], broadcast
  over a and merged to [a.b, 1, L, L]);
- s = t, t * c, c * t or t / c with c a constant scalar; t = matmul(a, b) without transpose_a,
  with a = q or q * c1 and b = kT or kT * c2 (scalar constants), or b = k with transpose_b;
- q, kT (or k) and v of rank 4 ([B, H, S, D]: the heads already split), float; or, as
  torch.export writes a 4-D matmul, both matmuls 3-D bmms on [B.H, S, D] reshapes of 4-D
  operands (v's may be a reshape from another rank: it is reshaped to [B, H, Skv, Dv]), the
  scores reshaped back to [B, H, Sq, Skv] before the mask (the raised op's result is
  reshaped to the second bmm's [B.H, Sq, Dv]).
Not matched (left as written): attention over 5-D tensors (MaxViT's grid heads).
The scale of the raised op is the product of the constants (1 if none); k is kT's last two
dims swapped (one graph.transpose, composed with the head split's transpose that made kT).

Numerics: `rounding`. The scale multiplies the scores once instead of each operand, and a
query row whose keys are all masked gives zeros (graph.attention's definition) where the
pattern without the NaN guard gives NaN (with the guard: zeros too). A lone mask term
where(c, 0, -inf) with c boolean (torch.onnx's boolean mask) is passed on as c: the same
meaning, and the NPU kernel's scores never hold -inf (docs/tiling.md, attention).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType, i1
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.dead_code_elimination import region_dce
from xdsl.utils.exceptions import VerifyException

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_of, is_float, shape_of
from infer.dialects.graph_canonicalization import FoldReshape, scalar_constant
from infer.dialects.weight_refs import constant_value
from infer.dialects.weights import WeightStore, weights_of


def _scaled(value: SSAValue) -> tuple[SSAValue, float]:
    """(t, c) with value = t * c (or t / 1/c): the constant scale of a mul or div by a scalar,
    else (value, 1)."""
    op = value.owner
    if isinstance(op, g.MulOp):
        for t, c in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            scale = scalar_constant(c)
            if scale is not None and shape_of(t.type) == shape_of(value.type):
                return t, scale
    if isinstance(op, g.DivOp):
        scale = scalar_constant(op.rhs)
        if scale and shape_of(op.lhs.type) == shape_of(value.type):
            return op.lhs, 1.0 / scale
    return value, 1.0


def _split_heads(value: SSAValue) -> SSAValue | None:
    """x for a [B.H, S, D] value that is reshape(x) of a 4-D x [B, H, S, D] (torch.export
    writes a 4-D matmul as a 3-D bmm between such reshapes), else None."""
    op = value.owner
    if not isinstance(op, g.ReshapeOp) or not value.has_one_use():
        return None
    src, merged = shape_of(op.input.type), shape_of(value.type)
    if len(src) == 4 and len(merged) == 3 and src[0] * src[1] == merged[0] and src[2:] == merged[1:]:
        return op.input
    return None


@dataclass(frozen=True)
class _Regroup:
    """A [B.H, S, D] bmm operand to reshape to [B, H, S, D] (its source is not 4-D: torch.export
    reshapes v straight from the 5-D qkv split), made once the match is certain."""

    value: SSAValue
    shape: tuple[int, ...]


def _heads(value: SSAValue, lead: tuple[int, ...]) -> SSAValue | _Regroup | None:
    """The 4-D [B, H, S, D] operand (lead = (B, H)) behind a bmm's [B.H, S, D] operand."""
    source = _split_heads(value)
    if source is not None:
        return source if tuple(shape_of(source.type)[:2]) == lead else None
    shape = shape_of(value.type)
    if len(shape) == 3 and shape[0] == lead[0] * lead[1]:
        return _Regroup(value, (*lead, *shape[1:]))
    return None


def _merged_product(value: SSAValue) -> g.MatmulOp | None:
    """The 3-D bmm whose [B.H, Sq, Skv] result `value` ([B, H, Sq, Skv]) reshapes, else None."""
    op = value.owner
    if not isinstance(op, g.ReshapeOp) or not op.input.has_one_use():
        return None
    product, src, split = op.input.owner, shape_of(op.input.type), shape_of(value.type)
    if isinstance(product, g.MatmulOp) and len(src) == 3 and len(split) == 4 and \
            split[0] * split[1] == src[0] and split[2:] == src[1:]:
        return product
    return None


def _users(value: SSAValue) -> set[Operation]:
    return {use.operation for use in value.uses}


def _unguarded(p_guarded: SSAValue) -> tuple[SSAValue, set[Operation]]:
    """(p, the guard's ops) for where(not(equal(p, p)), 0, p); (p_guarded, {}) otherwise."""
    where = p_guarded.owner
    if not isinstance(where, g.WhereOp) or scalar_constant(where.lhs) != 0.0:
        return p_guarded, set()
    p, negation = where.rhs, where.condition.owner
    if not isinstance(negation, g.NotOp) or not isinstance(negation.input.owner, g.EqualOp):
        return p_guarded, set()
    equal = negation.input.owner
    if equal.lhs is not p or equal.rhs is not p or not negation.input.has_one_use() or \
            not where.condition.has_one_use():
        return p_guarded, set()
    return p, {where, negation, equal}


@dataclass(frozen=True)
class _MaskTerm:
    """One additive term of the scores: `value` broadcasts against the 4-D scores, or, with
    `split` = (a, b), against their 5-D view [a, b, ...] (Swin's shifted windows add their mask
    as scores.reshape(B, windows, H, L, L) + mask, then reshape back)."""

    value: SSAValue
    split: tuple[int, int] | None = None

    def shape4(self) -> tuple[int, ...]:
        """The term's shape as a mask of the 4-D scores."""
        shape = tuple(shape_of(self.value.type))
        if self.split is None:
            return (1,) * (4 - len(shape)) + shape
        shape = (1,) * (5 - len(shape)) + shape
        return (self.split[0] * self.split[1], *shape[2:])

    def lifted(self, array: np.ndarray) -> np.ndarray:
        """The term's compile-time value as a 4-D mask."""
        if self.split is None:
            return array.reshape(self.shape4())
        array = array.reshape((1,) * (5 - array.ndim) + array.shape)
        return np.broadcast_to(array, (*self.split, *array.shape[2:])).reshape(self.shape4())


def _float_mask(value: SSAValue, rank: int) -> bool:
    return is_float(element_type_of(value.type)) and len(shape_of(value.type)) <= rank


def _is_scores(value: SSAValue) -> bool:
    t = _scaled(value)[0]
    return isinstance(t.owner, g.MatmulOp) or _merged_product(t) is not None


def _scores_and_masks(z: SSAValue) -> tuple[SSAValue, list[_MaskTerm]] | None:
    """(the scaled scores, the terms added to them) for softmax's input z: s, s + m (either
    order), sums of several terms (a relative position bias and a mask), and terms added
    through a 5-D view of the scores (reshape(reshape(s) + m)); every intermediate used once."""
    if _is_scores(z):
        return z, []
    shape = shape_of(z.type)
    op = z.owner
    if isinstance(op, g.AddOp):
        for inner, m in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            if inner is not m and inner.has_one_use() and shape_of(inner.type) == shape and _float_mask(m, 4):
                found = _scores_and_masks(inner)
                if found is not None:
                    return found[0], [*found[1], _MaskTerm(m)]
        return None
    if isinstance(op, g.ReshapeOp) and op.input.has_one_use() and isinstance(op.input.owner, g.AddOp):
        add, split = op.input.owner, shape_of(op.input.type)
        if len(split) != len(shape) + 1 or split[0] * split[1] != shape[0] or split[2:] != shape[1:]:
            return None
        for view, m in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
            if view is m or not view.has_one_use() or not isinstance(view.owner, g.ReshapeOp) or \
                    shape_of(view.type) != split or not _float_mask(m, 5):
                continue
            inner = view.owner.input
            if inner.has_one_use() and shape_of(inner.type) == shape:
                found = _scores_and_masks(inner)
                if found is not None:
                    return found[0], [*found[1], _MaskTerm(m, (split[0], split[1]))]
    return None


def _boolean_mask(value: SSAValue) -> SSAValue | None:
    """c for an additive mask where(c, 0, -inf) with c boolean (torch.onnx's export of
    scaled_dot_product_attention's boolean mask), else None: graph.attention takes c itself, so
    the kernel never meets -inf scores (a query row whose every key is masked is zeros, not
    NaN from -inf - -inf)."""
    where = value.owner
    if not isinstance(where, g.WhereOp) or element_type_of(where.condition.type) != i1:
        return None
    if scalar_constant(where.lhs) != 0.0 or scalar_constant(where.rhs) != float("-inf"):
        return None
    if tuple(shape_of(where.condition.type)) != tuple(shape_of(value.type)):
        return None
    return where.condition


def _one_mask(terms: list[_MaskTerm], store: WeightStore, new_ops: list[Operation]) -> SSAValue | None:
    """The 4-D mask of graph.attention for the terms (None for none), its ops appended to
    new_ops: compile-time terms summed at compile time into one weight; a runtime term lifted
    to 4-D by graph ops (a lone term as before: a reshape to rank 4 when below it); a lone
    where(c, 0, -inf) term is the boolean mask c."""
    if not terms:
        return None
    if len(terms) == 1 and terms[0].split is None and (condition := _boolean_mask(terms[0].value)) is not None:
        terms = [_MaskTerm(condition)]
    values = [constant_value(t.value, store) for t in terms]
    if all(v is not None for v in values) and (len(terms) > 1 or terms[0].split is not None):
        total = terms[0].lifted(values[0])
        for term, value in zip(terms[1:], values[1:], strict=True):
            total = total + term.lifted(value)
        element = element_type_of(terms[0].value.type)
        total = np.ascontiguousarray(total.astype(values[0].dtype))
        weight = g.WeightOp(store.add("attention_mask", total), TensorType(element, list(total.shape)))
        new_ops.append(weight)
        weight.output.name_hint = "mask"
        return weight.output
    mask: SSAValue | None = None
    for term in terms:
        value, element = term.value, element_type_of(term.value.type)
        if term.split is not None:
            shape5 = (1,) * (5 - len(shape_of(value.type))) + tuple(shape_of(value.type))
            full = g.BroadcastOp.create(operands=[value], result_types=[
                TensorType(element, [*term.split, *shape5[2:]])])
            new_ops.append(full)
            value = full.results[0]
            value.name_hint = "mask"
        if tuple(shape_of(value.type)) != term.shape4():
            lifted = g.ReshapeOp.create(operands=[value], result_types=[TensorType(element, list(term.shape4()))])
            new_ops.append(lifted)
            value = lifted.results[0]
            value.name_hint = "mask"
        if mask is not None:
            total = g.AddOp.inferred([mask, value], {})
            new_ops.append(total)
            value = total.results[0]
            value.name_hint = "mask"
        mask = value
    return mask


@dataclass
class RaiseAttention(RewritePattern):
    """matmul(softmax(scaled q @ kT (+ mask)), v) -> graph.attention (module docstring)."""

    store: WeightStore

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.MatmulOp, rewriter: PatternRewriter, /):
        if op.transpose_a.value.data or op.transpose_b.value.data:
            return
        lhs, v = op.lhs, op.rhs
        merged = len(shape_of(op.results[0].type)) == 3  # torch.export's bmm on [B.H, S, D]
        pending: SSAValue | _Regroup | None = v  # v, or the reshape v needs
        if merged:
            lhs = _split_heads(op.lhs)
            if lhs is None:
                return
            pending = _heads(op.rhs, tuple(shape_of(lhs.type)[:2]))
            if pending is None:
                return
        p, guard = _unguarded(lhs)
        softmax = p.owner
        if not isinstance(softmax, g.SoftmaxOp):
            return
        # p's users: the guard's equal and where, or the product alone
        if (guard and not _users(p) <= guard) or (not guard and not p.has_one_use()):
            return
        rank = len(shape_of(p.type))
        if rank != 4 or softmax.axis.value.data not in (-1, 3):
            return
        if not softmax.input.has_one_use():
            return
        found = _scores_and_masks(softmax.input)
        if found is None:
            return
        z, terms = found
        t, scale = _scaled(z)
        if t is not z and not t.has_one_use():
            return
        product = t.owner if isinstance(t.owner, g.MatmulOp) else _merged_product(t)
        if product is None or product.transpose_a.value.data:
            return
        a, b = product.lhs, product.rhs
        if len(shape_of(product.results[0].type)) == 3:  # the bmm of the heads' reshapes
            lead = tuple(shape_of(t.type)[:2])
            a, b = _heads(a, lead), _heads(b, lead)
            if not isinstance(a, SSAValue) or not isinstance(b, SSAValue):
                return
        q, c1 = _scaled(a)
        b, c2 = _scaled(b)
        operands = (q, b, pending.value if isinstance(pending, _Regroup) else pending)
        if any(len(shape_of(x.type)) != 4 for x in (q, b)) or \
                not all(is_float(element_type_of(x.type)) for x in operands):
            return
        new_ops: list[Operation] = []
        if isinstance(pending, _Regroup):
            regroup = g.ReshapeOp.create(operands=[pending.value], result_types=[
                type(pending.value.type)(element_type_of(pending.value.type), pending.shape)])
            new_ops.append(regroup)
            v = regroup.results[0]
            v.name_hint = "v"
        else:
            v = pending
        if product.transpose_b.value.data:
            k = b
        else:  # kT's last two dims swapped, composed with the transpose that made kT if any
            source, perm = b, [0, 1, 2, 3]
            if isinstance(b.owner, g.TransposeOp):
                source, perm = b.owner.input, list(b.owner.perm.get_values())
            swapped = [perm[i] for i in (0, 1, 3, 2)]
            if swapped == [0, 1, 2, 3]:  # kT was k's own transpose
                k = source
            else:
                swap = g.TransposeOp.inferred([source], {"perm": g.i64_array(swapped)})
                new_ops.append(swap)
                k = swap.results[0]
                k.name_hint = "k"
        mask = _one_mask(terms, self.store, new_ops)
        try:  # graph.attention's own checks: batch, heads (GQA), lengths, element types
            attention = g.AttentionOp.inferred(
                [q, k, v] + ([mask] if mask is not None else []),
                {"scale": g.f64_attr(scale * c1 * c2)})
            if merged:  # back to the bmm's [B.H, Sq, Dv]
                out = shape_of(attention.results[0].type)
                if (out[0] * out[1], *out[2:]) != tuple(shape_of(op.results[0].type)):
                    raise VerifyException("another result shape")
            elif attention.results[0].type != op.results[0].type:
                raise VerifyException("another result type")
        except VerifyException:
            for made in reversed(new_ops):  # unattached: only their operands' uses to drop
                if isinstance(made, g.WeightOp):  # a compile-time mask summed for this match
                    self.store.discard(made.weight_key)
                made.erase()
            return
        new_ops.append(attention)
        if merged:
            attention.results[0].name_hint = "attention"
            new_ops.append(g.ReshapeOp.create(operands=[attention.results[0]], result_types=[op.results[0].type]))
        new_ops[-1].results[0].name_hint = op.results[0].name_hint
        rewriter.replace(op, new_ops)


@dataclass(frozen=True)
class GraphRaiseAttentionPass(ModulePass):
    """Replace attention written as matmul, softmax, matmul by graph.attention, fold the reshape
    chains that leaves, then remove what it leaves unused."""

    name = "graph-raise-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # FoldReshape: a raised torch.export attention's result is reshaped to the bmm's
        # [B.H, Sq, Dv], which the head merge reshapes straight back to [B, H, Sq, Dv]; folded,
        # the merge's transpose reads the attention's result (head_layout) instead of a copy
        PatternRewriteWalker(GreedyRewritePatternApplier([RaiseAttention(weights_of(op)), FoldReshape()]),
                             apply_recursively=True,
                             post_walk_func=region_dce).rewrite_module(op)
