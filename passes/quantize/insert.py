"""`graph-quantize`: int8 post-training quantization of conv2d / linear / matmul in QDQ form.

    graph-quantize{calibration=model.calib.json exclude=linear_1 ops=conv2d,linear,matmul}

For each quantizable layer (a top-level `graph.conv2d`, `graph.linear` or `graph.matmul` on
f32 tensors, not excluded) the pass rewrites the layer's operands so the layer computes on
int8 values, ONNX QDQ style (the float op stays; `graph-quantize-kernels` then turns each
DQ -> op -> Q into one integer kernel):

- activations (every non-constant operand): symmetric int8 per tensor, scale = threshold /
  127 from the calibration table (`quantize_linear` then `dequantize_linear`, zero point 0:
  the NPU's `requant` has no zero point, so symmetric activations map onto it directly);
- weights (the constant operand): symmetric int8 per output channel (conv2d OIHW axis 0,
  linear [out, in] axis 0, matmul's rhs: its column axis), clamped to [-127, 127], scale =
  max |w| / 127 over the channel; stored as new int8 weights (`<weight>.int8`) with their
  scales, read through `dequantize_linear {axis}`;
- the bias (conv2d, linear): int32 with scale input scale * weight scale per channel, zero
  point 0 (`<bias>.int32`).

Layers whose inputs have no calibration entry are an error naming the tensor; layers on other
element types, or whose weight is not a compile-time constant (linear), are left in float.
Everything else (pooling, norms, activations, attention, ...) stays float: after
`graph-quantize-kernels` a float op reads the dequantized result of an integer kernel and a
`graph.requantize` brings its result back to int8 where an integer kernel needs it.

Options:
  calibration: the calibration table (JSON, `infer calibrate`); required.
  exclude: layer names kept in float (see infer.passes.quantize.naming; the mixed-precision
    search passes the layers it falls back).
  ops: the op kinds to quantize (default conv2d,linear,matmul).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, f32, i8, i32, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from infer.dialects import graph as g
from infer.dialects import linear_quant as lq
from infer.dialects.dtypes import element_type_name
from infer.dialects.ir_io import IRError
from infer.dialects.weights import WeightStore, weights_of
from infer.passes.quantize.calibration import CalibrationError, CalibrationTable
from infer.passes.quantize.common import (
    QUANTIZABLE,
    constant_value,
    location_prefix,
    module_entry,
    parameter,
    stamp,
    weight_base_name,
    weight_channel_axis,
    with_type,
)
from infer.passes.quantize.naming import layer_names, tensor_names


def quantizable_layers(module: ModuleOp, ops: Collection[str] = tuple(QUANTIZABLE), entry: str = "main") -> dict[str, Operation]:
    """Layer name -> op of every layer `quantize_qdq` would quantize (in program order)."""
    fn = module_entry(module, entry)
    store = weights_of(module)
    out = {}
    for op, name in layer_names(fn).items():
        if _quantizable(op, ops, store):
            out[name] = op
    return out


def _quantizable(op: Operation, ops: Collection[str], store: WeightStore) -> bool:
    kind = op.name.split(".", 1)[-1]
    if kind not in ops or not isinstance(op, tuple(QUANTIZABLE.values())):
        return False
    if any(element_type_name(v.type.get_element_type()) != "f32" for v in op.operands):  # type: ignore[attr-defined]
        return False
    if isinstance(op, g.Conv2dOp | g.LinearOp):
        if constant_value(op.weight, store) is None:
            return False
        if op.bias is not None and constant_value(op.bias, store) is None:
            return False
    return True


class _Quantizer:
    def __init__(self, module: ModuleOp, table: CalibrationTable, entry: str):
        self.fn = module_entry(module, entry)
        self.store = weights_of(module)
        self.table = table
        self.layers = layer_names(self.fn)
        self.names = tensor_names(self.fn, self.layers)
        self.activations: dict[SSAValue, tuple[SSAValue, np.float32]] = {}  # shared Q/DQ per tensor

    def insert(self, new: Operation, before: Operation) -> Operation:
        Rewriter.insert_op(new, InsertPoint.before(before))
        return new

    def activation(self, v: SSAValue, op: Operation) -> tuple[SSAValue, np.float32]:
        """DQ(Q(v)) with the calibrated symmetric scale (one pair per tensor)."""
        if v in self.activations:
            return self.activations[v]
        name = self.names.get(v)
        threshold = self.table.threshold(name) if name is not None else None
        if threshold is None:
            what = f"tensor '{name}'" if name is not None else "an operand"
            raise CalibrationError(
                f"{location_prefix(op)}error: '{op.name}' op graph-quantize: the calibration table has no entry "
                f"for {what} (input of layer '{self.layers[op]}'): is it the table of another model?")
        scale = lq.symmetric_scale(threshold)
        s = self.insert(g.ConstantOp(_dense(np.asarray(scale, np.float32))), op)
        q = self.insert(g.QuantizeLinearOp.create(operands=[v, s.results[0]], result_types=[with_type(v.type, i8)]), op)
        dq = self.insert(g.DequantizeLinearOp.create(operands=[q.results[0], s.results[0]],
                                                     result_types=[with_type(v.type, f32)]), op)
        s.results[0].name_hint = f"{v.name_hint or 'x'}_scale"
        q.results[0].name_hint = f"{v.name_hint or 'x'}_q"
        dq.results[0].name_hint = f"{v.name_hint or 'x'}_dq"
        self.activations[v] = (dq.results[0], np.float32(scale))
        return self.activations[v]

    def weight(self, v: SSAValue, op: Operation, axis: int | None) -> tuple[SSAValue, np.ndarray]:
        """DQ of the int8 copy of constant `v` (symmetric, per channel along `axis`)."""
        w = constant_value(v, self.store)
        assert w is not None
        q, scale = lq.quantize_weight_symmetric(w, axis)
        base = weight_base_name(v, self.layers[op], "weight")
        wq = self.insert(parameter(q, self.store, f"{base}.int8"), op)
        ws = self.insert(parameter(scale, self.store, f"{base}.scale"), op)
        props = {} if axis is None else {"axis": IntegerAttr(axis, i64)}
        dq = self.insert(g.DequantizeLinearOp.create(operands=[wq.results[0], ws.results[0]],
                                                     result_types=[with_type(v.type, f32)], properties=props), op)
        dq.results[0].name_hint = f"{v.name_hint or 'w'}_dq"
        return dq.results[0], scale

    def bias(self, v: SSAValue, op: Operation, input_scale: np.float32, weight_scale: np.ndarray) -> SSAValue:
        b = constant_value(v, self.store)
        assert b is not None
        q, scale = lq.quantize_bias(b, input_scale, np.broadcast_to(weight_scale, b.shape))
        base = weight_base_name(v, self.layers[op], "bias")
        bq = self.insert(parameter(q, self.store, f"{base}.int32"), op)
        bs = self.insert(parameter(scale, self.store, f"{base}.scale"), op)
        dq = self.insert(g.DequantizeLinearOp.create(operands=[bq.results[0], bs.results[0]],
                                                     result_types=[with_type(v.type, f32)],
                                                     properties={"axis": IntegerAttr(0, i64)}), op)
        dq.results[0].name_hint = f"{v.name_hint or 'b'}_dq"
        return dq.results[0]

    def layer(self, op: Operation) -> None:
        if isinstance(op, g.Conv2dOp | g.LinearOp):
            x, s_x = self.activation(op.input, op)
            w, s_w = self.weight(op.weight, op, 0)
            if op.bias is not None:
                op.operands[2] = self.bias(op.bias, op, s_x, s_w)
            op.operands[0], op.operands[1] = x, w
            return
        assert isinstance(op, g.MatmulOp)
        operands = []
        for i, v in enumerate(op.operands):
            if constant_value(v, self.store) is None:
                operands.append(self.activation(v, op)[0])
            else:
                operands.append(self.weight(v, op, weight_channel_axis(op) if i == 1 else None)[0])
        op.operands[0], op.operands[1] = operands


def _dense(array: np.ndarray):
    from infer.dialects.dtypes import dense_attr

    return dense_attr(array)


def quantize_qdq(module: ModuleOp, table: CalibrationTable, exclude: Collection[str] = (),
                 ops: Collection[str] = tuple(QUANTIZABLE), entry: str = "main") -> list[str]:
    """Quantize the layers of function `entry` in place (QDQ form); returns their names."""
    unknown = [k for k in ops if k not in QUANTIZABLE]
    if unknown:
        raise IRError(f"error: graph-quantize: ops must be among {', '.join(QUANTIZABLE)}, got {', '.join(unknown)}")
    layers = quantizable_layers(module, ops, entry)
    missing = [n for n in exclude if n not in layers]
    if missing:
        raise IRError(f"error: graph-quantize: exclude names no quantizable layer: {', '.join(missing)} "
                      f"(layers: {', '.join(layers) or 'none'})")
    quantizer = _Quantizer(module, table, entry)
    done = []
    for name, op in layers.items():
        stamp(op, name)  # every candidate keeps its name whatever is replaced around it
        if name in exclude:
            continue
        quantizer.layer(op)
        done.append(name)
    return done


@dataclass(frozen=True)
class GraphQuantizePass(ModulePass):
    """Quantize conv2d/linear/matmul to int8 (QDQ form) from a calibration table."""

    name = "graph-quantize"

    calibration: str = ""
    exclude: tuple[str, ...] = ()
    ops: tuple[str, ...] = tuple(QUANTIZABLE)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.calibration:
            raise IRError("error: graph-quantize: give the calibration table: graph-quantize{calibration=FILE.json}")
        table = CalibrationTable.load(self.calibration)
        quantize_qdq(op, table, self.exclude, self.ops)


_ = (TensorType, i32)

__all__ = ["GraphQuantizePass", "quantizable_layers", "quantize_qdq"]
