"""Grouped and depthwise convs as fewer, denser groups: block-diagonal weights (issue 14 item 2).

A conv of G groups, each Cg input channels to Og output channels, lowered group by group puts a
Cg-deep operand on the matrix unit: a depthwise conv (Cg = Og = 1) uses one of its rows (1/16
of edge's array, 1/128 of server's) and pays each group's DRAM round trips, pipeline fills and
drains on its own. Merging r consecutive groups into one conv of r.Cg input channels, whose
weights are the r groups' blocks on a block diagonal (zero elsewhere), computes the same sums
plus exact zeros: each output channel still adds only its own group's products (w . x), and the
other r - 1 groups' channels contribute 0 . x = +0, which leaves a finite sum unchanged (a sum
of exact zeros alone is +0 where the group-by-group conv may give -0). It does r times the
matrix unit's MACs in r times fewer, r times deeper groups, which is faster wherever the
groups were bound by latency and an array of which they used a sliver.

Which r (1 = the groups as they are) is the cost model's choice per conv (`conv.fastest_groups`
ranks every r that divides G with r.Cg within the array's depth). What the merge changes
beyond speed: an input element that is inf or NaN makes NaN the outputs of every channel merged
with its group (0 . inf = NaN), where the group-by-group conv gives inf or NaN in its own group
only; finite inputs give the same values up to the order of the fp32 sums. The int8 path
(integer_conv.py) merges too: its sums are exact, so the merged conv gives the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, TensorType, i64
from xdsl.ir import Block, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of


def group_merges(groups: int, Cg: int, depth: int) -> list[int]:
    """The merge factors r worth ranking: the divisors of `groups` whose merged groups are at
    most `depth` (the matrix unit's rows) input channels deep, 1 included."""
    return [r for r in range(1, groups + 1) if groups % r == 0 and (r == 1 or r * Cg <= depth)]


def merged_weights(w: np.ndarray, groups: int, r: int) -> np.ndarray:
    """[O, Cg, KH, KW] weights of `groups` groups -> [O, r.Cg, KH, KW] of groups / r groups: output
    channel o (of original group o // Og) keeps its Cg input channels' weights at its group's
    position within the merged group and zeros elsewhere."""
    O, Cg, KH, KW = w.shape
    Og = O // groups
    out = np.zeros((O, r, Cg, KH, KW), w.dtype)
    out[np.arange(O), (np.arange(O) // Og) % r] = w
    return out.reshape(O, r * Cg, KH, KW)


@dataclass(frozen=True)
class MergedGroups:
    """A graph.conv2d seen with r of its groups merged (what conv.ConvKernel and conv_spec read of
    the op: its input, bias and result as they are, its weight as a [O, r.Cg, KH, KW] value and
    groups / r groups). The weight value is a detached block argument: the kernel reads the
    merged weights from the array it is given, never from the IR."""

    op: g.Conv2dOp | g.Conv2dIntegerOp
    weight: SSAValue
    groups: IntegerAttr

    @staticmethod
    def of(op: g.Conv2dOp | g.Conv2dIntegerOp, r: int) -> MergedGroups:
        O, Cg, KH, KW = shape_of(op.weight)
        elem = op.weight.type.get_element_type()  # type: ignore[attr-defined]
        merged = Block(arg_types=[TensorType(elem, [O, r * Cg, KH, KW])]).args[0]
        return MergedGroups(op, merged, IntegerAttr(op.groups.value.data // r, i64))

    @property
    def input(self) -> SSAValue:
        return self.op.input

    @property
    def bias(self) -> SSAValue | None:
        return self.op.bias

    @property
    def results(self):  # noqa: ANN201 - the op's result list
        return self.op.results
