"""ui8 quantized values as i8, exactly: `q_i8 = q_ui8 - 128` with every zero point moved by
-128 (`q - zp` is unchanged, and so is every integer kernel's result and every dequantized
value; the saturation range [0, 255] maps onto [-128, 127]). The NPU's int8 path is signed;
onnxruntime writes uint8 activations (QOperator and `quantize_dynamic` always, QDQ with
`activation_type=QUInt8`) and uint8 weights (`weight_type=QUInt8`).

What moves (in the integer-kernel form, after `graph-quantize-kernels`):

- a `graph.requantize` (or `graph.quantize_linear`) with a ui8 result: i8 result, zero point
  - 128;
- a ui8 `graph.constant` / `graph.weight` (a uint8 weight): its values - 128, as a new i8
  parameter;
- the ops a shifted value flows through unchanged in order (`reshape`, `transpose`, `max_pool2d`);
- where a shifted value is used: an integer kernel's zero point for that operand - 128, a
  `graph.dequantize_linear`'s zero point operand (a new i8 constant; an absent zero point
  was 0 and becomes -128).

A shifted value used by anything else (a ui8 model output, another op) is one located error.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, i8, i64
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from infer.dialects import graph as g
from infer.dialects.dtypes import dense_attr, element_type_name, element_type_of
from infer.dialects.ir_io import IRError, describe_location
from infer.dialects.weights import weights_of
from infer.passes.quantize.common import constant_value, parameter, weight_base_name

SHIFT = 128
_PASS_THROUGH = (g.ReshapeOp, g.TransposeOp, g.MaxPool2dOp)
# integer kernel -> {operand name: its zero-point property}
_ZERO_POINTS = {
    g.Conv2dIntegerOp: {"input": "input_zero_point", "weight": "weight_zero_point"},
    g.LinearIntegerOp: {"input": "input_zero_point", "weight": "weight_zero_point"},
    g.MatmulIntegerOp: {"lhs": "lhs_zero_point", "rhs": "rhs_zero_point"},
}


def _is_ui8(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType) and element_type_name(element_type_of(value)) == "ui8"


def _as_i8(value: SSAValue) -> SSAValue:
    return Rewriter.replace_value_with_new_type(value, TensorType(i8, value.type.get_shape()))  # type: ignore[attr-defined]


def _shift_prop(op: Operation, prop: str) -> None:
    op.properties[prop] = IntegerAttr(int(op.properties[prop].value.data) - SHIFT, i64)  # type: ignore[attr-defined]


def signed_int8(module: ModuleOp) -> int:
    """Move every ui8 value of `module` to i8 (see the module docstring); returns how many
    values moved."""
    store = weights_of(module)
    moved = 0
    pending: list[SSAValue] = []
    for op in list(module.walk()):
        if isinstance(op, g.RequantizeOp | g.QuantizeLinearOp) and _is_ui8(op.results[0]):
            if isinstance(op, g.RequantizeOp):
                _shift_prop(op, "zero_point")
            else:
                _move_zero_point_operand(op, 2, store)
            pending.append(op.results[0])
        elif isinstance(op, g.ConstantOp | g.WeightOp) and _is_ui8(op.results[0]):
            values = constant_value(op.results[0], store)
            shifted = (np.asarray(values, np.int16) - SHIFT).astype(np.int8)
            new = parameter(shifted, store, weight_base_name(op.results[0], "ui8", "value") + "_i8")
            Rewriter.insert_op(new, InsertPoint.before(op))
            for use in list(op.results[0].uses):
                if isinstance(use.operation, g.DequantizeLinearOp) and use.index == 2:
                    continue  # a zero point: moved with its user below
                use.operation.operands[use.index] = new.results[0]
            if op.results[0].uses:
                continue
            pending.append(new.results[0])
            Rewriter.erase_op(op)
    seen: set[tuple[int, int]] = set()
    while pending:
        value = pending.pop()
        key = (id(value.owner), value.index)  # type: ignore[attr-defined]
        if key in seen or not _is_ui8(value):
            continue
        seen.add(key)
        value = _as_i8(value)
        moved += 1
        for use in list(value.uses):
            user = use.operation
            if isinstance(user, _PASS_THROUGH) and use.index == 0:
                pending.append(user.results[0])
            elif type(user) in _ZERO_POINTS:
                names = _ZERO_POINTS[type(user)]  # type: ignore[index]
                operand = next(n for n in names if getattr(user, n) is value)
                _shift_prop(user, names[operand])
            elif isinstance(user, g.DequantizeLinearOp) and use.index == 0:
                _move_zero_point_operand(user, 2, store)
            else:
                raise IRError(f"{describe_location(user)}: error: '{user.name}' op takes a uint8 value, which the "
                              "int8 path holds as int8 (shifted by -128); supported users: integer kernels, "
                              "dequantize_linear, reshape, transpose, max_pool2d")
    return moved


def _move_zero_point_operand(op: Operation, index: int, store) -> None:
    """The zero point operand `index` of a Q/DQ op, as i8 minus 128 (an absent one was 0)."""
    if len(op.operands) > index:
        zp = constant_value(op.operands[index], store)
        if zp is None:
            raise IRError(f"{describe_location(op)}: error: '{op.name}' op needs a compile-time zero point")
        zp = np.asarray(zp, np.int16)
    else:
        zp = np.zeros(op.operands[1].type.get_shape(), np.int16)  # type: ignore[attr-defined]
    const = g.ConstantOp(dense_attr((zp - SHIFT).astype(np.int8)))
    Rewriter.insert_op(const, InsertPoint.before(op))
    if len(op.operands) > index:
        op.operands[index] = const.results[0]
    else:
        op.operands = [*op.operands, const.results[0]]


__all__ = ["SHIFT", "signed_int8"]
