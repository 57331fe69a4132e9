"""Names of layers and activation tensors, as the calibration table and the per-layer report
spell them.

A layer is a top-level op of the entry function; its name is the op's `graph.name` attribute
when it has one, else its kind numbered in program order (`conv2d_0`, `conv2d_1`, `linear_0`,
...; named ops count too). An activation is named after what produces it: a function argument by its input name
(`graph.name`, else `arg<i>`), an op result by its layer's name (`#<i>` appended for results
after the first). The names depend only on the module's structure, so the same model prepared
the same way (`infer.tools.quantize` runs `graph-optimize` and `graph-fold-batch-norm` before
calibrating and before quantizing) gives the same names.

The quantization passes stamp `graph.name = <layer>` on the ops that replace a quantized layer,
so the layer keeps its name in the quantized module (and in the per-layer check).
"""

from __future__ import annotations

from collections import Counter

from xdsl.dialects import func
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import BlockArgument, Operation, SSAValue

NAME_ATTR = "graph.name"


def layer_names(fn: func.FuncOp) -> dict[Operation, str]:
    """Every top-level op of `fn` -> its layer name."""
    counts: Counter[str] = Counter()
    names: dict[Operation, str] = {}
    for op in fn.body.block.ops:
        given = op.attributes.get(NAME_ATTR)
        kind = op.name.split(".", 1)[-1]
        names[op] = given.data if isinstance(given, StringAttr) and given.data else f"{kind}_{counts[kind]}"
        counts[kind] += 1  # named or not, so a stamped name never renumbers the ops after it
    return names


def argument_names(fn: func.FuncOp) -> list[str]:
    names = [f"arg{i}" for i in range(len(fn.args))]
    if fn.arg_attrs is not None:
        for i, attrs in enumerate(fn.arg_attrs.data):
            name = attrs.data.get(NAME_ATTR)
            if isinstance(name, StringAttr):
                names[i] = name.data
    return names


def tensor_names(fn: func.FuncOp, layers: dict[Operation, str] | None = None) -> dict[SSAValue, str]:
    """Every argument and top-level op result of `fn` -> its activation name."""
    layers = layer_names(fn) if layers is None else layers
    names: dict[SSAValue, str] = dict(zip(fn.args, argument_names(fn), strict=True))
    for op, layer in layers.items():
        for i, r in enumerate(op.results):
            names[r] = layer if i == 0 else f"{layer}#{i}"
    return names


def tensor_name(value: SSAValue, names: dict[SSAValue, str]) -> str:
    """The activation name of `value` (for messages: its SSA name when it has none)."""
    if value in names:
        return names[value]
    if isinstance(value, BlockArgument):
        return f"arg{value.index}"
    return f"%{value.name_hint or '?'}"


__all__ = ["NAME_ATTR", "argument_names", "layer_names", "tensor_name", "tensor_names"]
