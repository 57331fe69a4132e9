"""Max pooling of quantized values (a QOperator model pools its int8 / uint8 tensors directly)
as dequantize -> max_pool2d -> quantize with the same parameters, the form the NPU runs (its
pooling computes on float-held tensors; `graph-quantize-kernels` turns the quantize into a
requantize by 1 / scale).

Exact: max commutes with the monotonic (de)quantization, the dequantized values
(q - zp) * scale carry one rounding, and quantizing them again with the same scale lands within
an ulp-scaled distance of the integer q - zp, which rounds back to it.

The parameters come from the quantize_linear that produced the pooled value, found through the
ops that move quantized values unchanged (reshape, transpose, max_pool2d).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_name, element_type_of, shape_of

_QUANTIZED = ("i8", "ui8")
_VALUE_PRESERVING = (g.ReshapeOp, g.TransposeOp, g.MaxPool2dOp)


def _producer(value: SSAValue) -> g.QuantizeLinearOp | None:
    """The quantize_linear whose result `value` is, through value-preserving ops."""
    op = value.owner
    while isinstance(op, _VALUE_PRESERVING):
        op = op.operands[0].owner
    return op if isinstance(op, g.QuantizeLinearOp) and op.axis is None else None


def dequantize_pools(module: ModuleOp) -> int:
    """Rewrite every max_pool2d of a quantized tensor (see the module docstring); returns how
    many. A pooled value whose parameters are not found stays (the lowering then refuses it)."""
    done = 0
    for pool in [op for op in module.walk() if isinstance(op, g.MaxPool2dOp)]:
        x = pool.operands[0]
        if element_type_name(element_type_of(x)) not in _QUANTIZED:
            continue
        quantize = _producer(x)
        if quantize is None:
            continue
        params = [quantize.scale] + ([quantize.zero_point] if quantize.zero_point is not None else [])
        dq = g.DequantizeLinearOp.create(operands=[x, *params], result_types=[TensorType(f32, shape_of(x))])
        Rewriter.insert_op(dq, InsertPoint.before(pool))
        float_pool = g.MaxPool2dOp.create(operands=[dq.results[0]], result_types=[TensorType(f32, shape_of(pool.results[0]))],
                                          properties=dict(pool.properties), attributes=dict(pool.attributes))
        Rewriter.insert_op(float_pool, InsertPoint.before(pool))
        q = g.QuantizeLinearOp.create(operands=[float_pool.results[0], *params], result_types=[pool.results[0].type])
        q.location = dq.location = float_pool.location = pool.location
        Rewriter.replace_op(pool, q)
        done += 1
    return done


__all__ = ["dequantize_pools"]
