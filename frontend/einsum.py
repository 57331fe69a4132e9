"""Einsum as the graph ops it is made of: sums, transposes, reshapes and one batched
`graph.matmul` per pair of operands (the ONNX frontend's `Einsum`; torch.export decomposes
`torch.einsum` into the same ops itself).

For two operands every index is one of: a batch index (in both and in the output), a
contracted one (in both, not in the output), a free index of one operand (in it and in the
output), or one summed away inside one operand (in it only). The last are summed first; then

    A -> transpose [batch, free_A, contracted] -> reshape [B, FA, C]
    B -> transpose [batch, contracted, free_B] -> reshape [B, C, FB]
    graph.matmul -> [B, FA, FB] -> reshape [batch..., free_A..., free_B...] -> transpose (output)

so an attention einsum ("bhqd,bhkd->bhqk") is the batched matmul the compiler tiles. More
operands are contracted left to right, each intermediate keeping the indices still needed. One
operand is a sum and a transpose. Not supported (one clear error each): an ellipsis, an index
repeated within one operand (a diagonal), an index whose sizes differ between operands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.frontend.builder import GraphBuilder


class EinsumProblem(ValueError):
    """An equation this decomposition does not take (the frontend names the node)."""


def parse_equation(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The operands' index strings and the output's (numpy's implicit output when there is no
    `->`: the indices that appear once, in alphabetical order)."""
    eq = equation.replace(" ", "")
    if "." in eq:
        raise EinsumProblem(f"equation '{equation}': an ellipsis ('...') is not supported")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise EinsumProblem(f"equation '{equation}' has {len(terms)} operand term(s) for {len(ranks)} input(s)")
    letters = "".join(terms)
    if not arrow:
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    for term, rank in zip(terms, ranks, strict=True):
        if (term and not term.isalpha()) or len(term) != rank:
            raise EinsumProblem(f"equation '{equation}': term '{term}' does not name the {rank} dims of its input")
        if len(set(term)) != len(term):
            raise EinsumProblem(f"equation '{equation}': index repeated within '{term}' (a diagonal) is not supported")
    if (out and not out.isalpha()) or len(set(out)) != len(out) or not set(out) <= set(letters):
        raise EinsumProblem(f"equation '{equation}': output '{out}' must name distinct indices of the inputs")
    return terms, out


def einsum(b: GraphBuilder, equation: str, operands: Sequence[SSAValue]) -> SSAValue:
    """The value of `equation` over `operands` (numpy.einsum semantics, without ellipses,
    diagonals or broadcasting)."""
    terms, out = parse_equation(equation, [len(shape_of(x)) for x in operands])
    sizes: dict[str, int] = {}
    for term, x in zip(terms, operands, strict=True):
        for c, n in zip(term, shape_of(x), strict=True):
            if sizes.setdefault(c, n) != n:
                raise EinsumProblem(f"equation '{equation}': index '{c}' is {sizes[c]} in one input and {n} in another")
    values = list(zip(operands, terms, strict=True))
    x, term = values[0]
    for i, (y, y_term) in enumerate(values[1:], start=1):
        later = set(out) | {c for _, t in values[i + 1:] for c in t}
        x, term = _pair(b, x, term, y, y_term, later, sizes)
    x, term = _sum_away(b, x, term, set(out))
    return b.transpose(x, [term.index(c) for c in out])


def _sum_away(b: GraphBuilder, x: SSAValue, term: str, keep: set[str]) -> tuple[SSAValue, str]:
    """x summed over its indices outside `keep`."""
    axes = [i for i, c in enumerate(term) if c not in keep]
    if not axes:
        return x, term
    return b.reduce(g.ReduceSumOp, x, axes, keepdims=False), "".join(c for c in term if c in keep)


def _pair(b: GraphBuilder, x: SSAValue, xt: str, y: SSAValue, yt: str, later: set[str],
          sizes: dict[str, int]) -> tuple[SSAValue, str]:
    """x (indices xt) times y (yt), summed over the indices shared by both and not in `later`;
    the result's indices: batch, then x's free ones, then y's."""
    x, xt = _sum_away(b, x, xt, later | set(yt))
    y, yt = _sum_away(b, y, yt, later | set(xt))
    batch = [c for c in xt if c in yt and c in later]
    contracted = [c for c in xt if c in yt and c not in later]
    free_x = [c for c in xt if c not in yt]
    free_y = [c for c in yt if c not in xt]

    def size(group: list[str]) -> int:
        return math.prod(sizes[c] for c in group)

    lhs = b.reshape(b.transpose(x, [xt.index(c) for c in batch + free_x + contracted]),
                    (size(batch), size(free_x), size(contracted)))
    rhs = b.reshape(b.transpose(y, [yt.index(c) for c in batch + contracted + free_y]),
                    (size(batch), size(contracted), size(free_y)))
    product = b.op(g.MatmulOp, [lhs, rhs])
    term = batch + free_x + free_y
    return b.reshape(product, tuple(sizes[c] for c in term)), "".join(term)
