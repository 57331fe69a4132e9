"""`graph-quantize-kernels`: QDQ patterns -> integer kernels, what the NPU runs in int8.

    graph-quantize-kernels{reciprocal-quantize=true}

For every `graph.conv2d` / `graph.linear` / `graph.matmul` whose operands are
`graph.dequantize_linear` of int8 values (the QDQ form `graph-quantize` writes, or an
onnxruntime QDQ model as imported):

    %x = dequantize_linear %xq, %sx, %zx          (per tensor)
    %w = dequantize_linear %wq, %sw {axis}         (constant; per tensor or per output channel)
    %b = dequantize_linear %bq, %sb {axis = 0}     (constant int32, %sb = %sx * %sw)
    %y = conv2d %x, %w, %b
    %r = relu %y                                    (optional: relu, or clip)
    %q = quantize_linear %r, %sy, %zy              (optional: per tensor, the only user)

becomes one integer kernel and its epilogue:

    %acc = conv2d_integer %xq, %wq, %bq {input_zero_point = zx, weight_zero_point = zw} -> i32
    %acc2 = relu %acc                               (clip: on the int8 result, bounds quantized)
    %q = requantize %acc2, (sx * sw) / sy {axis = channel, zero_point = zy} -> i8
or, without the final quantize_linear (the result feeds float ops),
    %y = dequantize_linear %acc, sx * sw {axis = channel} -> f32

The multiplier is computed in float32 as onnxruntime does, ((sx * sw) / sy), so an imported
onnxruntime QDQ model computes what onnxruntime's QLinearConv / QLinearMatMul kernels do.
Zero points must be one value per tensor (what an int8 kernel folds into its bias); a layer
whose parameters are not compile-time constants, whose weight zero points vary per channel,
or whose bias scale is not input scale * weight scale stays as it is (float, QDQ).

With `reciprocal-quantize` (the default), every remaining `quantize_linear` of a float tensor
(the boundary after a float op) becomes `requantize` by the float32 reciprocal of its scale,
which is what the NPU's `requant` computes (it has no division); at most one step away from
ONNX's division, on values within an ulp of a rounding tie. `reciprocal-quantize=false`
keeps ONNX's semantics exactly (to compare with onnxruntime).

The ops that replace a layer's result carry `graph.name = <layer>`; dead QDQ ops are erased.

Options:
  reciprocal-quantize: turn the remaining float -> int8 `quantize_linear` ops into
    `requantize` by 1 / scale, as the NPU computes them (default true; false keeps ONNX's
    division, to compare with onnxruntime).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, StringAttr, f32, f64, i32, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from infer.dialects import graph as g
from infer.dialects import linear_quant as lq
from infer.dialects.dtypes import element_type_name, to_numpy_dtype
from infer.dialects.weights import WeightStore, weights_of
from infer.passes.graph_dce import GraphDCEPass
from infer.passes.quantize.common import (
    QUANTIZABLE,
    constant_value,
    output_channel_axis,
    parameter,
    stamp,
    weight_base_name,
    weight_channel_axis,
    with_type,
)
from infer.passes.quantize.naming import NAME_ATTR, layer_names


@dataclass
class _Dequantized:
    """A value that is `dequantize_linear(q, scale, zero_point)` with constant parameters."""

    q: SSAValue
    scale: np.ndarray  # float32, 1-D
    zero_point: np.ndarray  # int64, same shape
    axis: int | None  # None: per tensor

    def uniform_zero_point(self) -> int | None:
        zp = np.unique(self.zero_point)
        return int(zp[0]) if zp.size == 1 else None

    def per_tensor(self) -> bool:
        return self.axis is None or np.unique(self.scale).size == 1 and self.uniform_zero_point() is not None


def _dequantized(v: SSAValue, store: WeightStore) -> _Dequantized | None:
    op = v.owner
    if not isinstance(op, g.DequantizeLinearOp):
        return None
    scale = constant_value(op.scale, store)
    zp = constant_value(op.zero_point, store) if op.zero_point is not None else None
    if scale is None or (op.zero_point is not None and zp is None):
        return None
    scale = np.asarray(scale, np.float32).reshape(-1)
    zp = np.zeros(scale.shape, np.int64) if zp is None else np.asarray(zp, np.int64).reshape(-1)
    axis = None
    if op.axis is not None:
        axis = op.axis.value.data % len(op.input.type.get_shape())  # type: ignore[attr-defined]
    return _Dequantized(op.input, scale, zp, axis)


def _quantized_operand(d: _Dequantized | None) -> bool:
    return d is not None and element_type_name(d.q.type.get_element_type()) in lq.INTEGER_OPERAND_TYPES  # type: ignore[attr-defined]


def _single_user(v: SSAValue) -> Operation | None:
    users = {use.operation for use in v.uses}
    return users.pop() if len(users) == 1 else None


class _Rewriter:
    def __init__(self, module: ModuleOp, runtime_rhs: bool = True):
        self.store = weights_of(module)
        self.runtime_rhs = runtime_rhs

    def constant(self, array: np.ndarray, before: Operation, hint: str) -> SSAValue:
        op = parameter(np.asarray(array), self.store, hint)
        Rewriter.insert_op(op, InsertPoint.before(before))
        return op.results[0]

    # -- the integer kernel --------------------------------------------------------------------

    def layer(self, op: Operation, name: str) -> bool:
        """Rewrite one layer if its operands are quantized; True if it was."""
        store = self.store
        if isinstance(op, g.Conv2dOp | g.LinearOp):
            x, w = _dequantized(op.input, store), _dequantized(op.weight, store)
            acts, weight = [x], w
        else:
            assert isinstance(op, g.MatmulOp)
            lhs, rhs = _dequantized(op.lhs, store), _dequantized(op.rhs, store)
            acts, weight = [lhs], rhs
        if not all(_quantized_operand(d) for d in (*acts, weight)):
            return False
        if any(not d.per_tensor() for d in acts):  # type: ignore[union-attr]
            return False
        assert weight is not None
        w_axis = weight_channel_axis(op)
        w_zp = weight.uniform_zero_point()
        if w_zp is None or (not weight.per_tensor() and weight.axis != w_axis):
            return False
        if isinstance(op, g.MatmulOp) and not weight.per_tensor() and constant_value(weight.q, store) is None:
            return False
        if isinstance(op, g.MatmulOp) and not self.runtime_rhs and constant_value(weight.q, store) is None:
            return False
        x = acts[0]
        assert x is not None
        x_scale, x_zp = np.float32(x.scale[0]), x.uniform_zero_point()
        w_scale = weight.scale if not weight.per_tensor() else weight.scale[:1]
        acc_scale = (x_scale * w_scale).astype(np.float32)  # onnxruntime: X_scale * W_scale
        bias_q = None
        if isinstance(op, g.Conv2dOp | g.LinearOp) and op.bias is not None:
            b = _dequantized(op.bias, store)
            if b is None or element_type_name(b.q.type.get_element_type()) != "i32" or np.any(b.zero_point):  # type: ignore[attr-defined]
                return False
            if constant_value(b.q, store) is None:
                return False
            if acc_scale.size not in (1, b.scale.size):
                return False
            if not np.allclose(b.scale, np.broadcast_to(acc_scale, b.scale.shape), rtol=1e-6, atol=0):
                return False  # the bias is not in accumulator units: it cannot join the int32 sum
            bias_q = b.q
        acc = self.integer_op(op, x.q, weight.q, bias_q, x_zp, w_zp)
        self.epilogue(op, name, acc, acc_scale)
        return True

    def integer_op(self, op: Operation, xq: SSAValue, wq: SSAValue, bias_q: SSAValue | None,
                   x_zp: int | None, w_zp: int) -> SSAValue:
        zps = {"input_zero_point": IntegerAttr(x_zp or 0, i64), "weight_zero_point": IntegerAttr(w_zp, i64)}
        out_type = with_type(op.results[0].type, i32)  # type: ignore[arg-type]
        if isinstance(op, g.Conv2dOp):
            props = {k: op.properties[k] for k in ("stride", "padding", "dilation", "groups") if k in op.properties}
            new = g.Conv2dIntegerOp.create(operands=[xq, wq] + ([bias_q] if bias_q else []),
                                           result_types=[out_type], properties={**props, **zps})
        elif isinstance(op, g.LinearOp):
            new = g.LinearIntegerOp.create(operands=[xq, wq] + ([bias_q] if bias_q else []),
                                           result_types=[out_type], properties=zps)
        else:
            assert isinstance(op, g.MatmulOp)
            props = {k: op.properties[k] for k in ("transpose_a", "transpose_b") if k in op.properties}
            new = g.MatmulIntegerOp.create(
                operands=[xq, wq], result_types=[out_type],
                properties={**props, "lhs_zero_point": zps["input_zero_point"], "rhs_zero_point": zps["weight_zero_point"]})
        Rewriter.insert_op(new, InsertPoint.before(op))
        hint = op.results[0].name_hint
        new.results[0].name_hint = f"{hint}_acc" if hint else "acc"
        return new.results[0]

    # -- requantize or dequantize ----------------------------------------------------------------

    def epilogue(self, op: Operation, name: str, acc: SSAValue, acc_scale: np.ndarray) -> None:
        result = op.results[0]
        axis = output_channel_axis(op) if acc_scale.size > 1 else None
        props = {} if axis is None else {"axis": IntegerAttr(axis, i64)}
        activation = _single_user(result)
        if not isinstance(activation, g.ReluOp | g.ClipOp):
            activation = None
        last = activation.results[0] if activation is not None else result
        quantize = _single_user(last)
        q = _quantize_params(quantize, self.store) if isinstance(quantize, g.QuantizeLinearOp) else None
        if q is None:  # the result feeds float ops: dequantize the accumulator
            scale = self.constant(acc_scale, op, f"{name}.acc_scale")
            dq = g.DequantizeLinearOp.create(operands=[acc, scale], result_types=[result.type], properties=props)
            Rewriter.replace_op(op, stamp(dq, name))
            return
        assert isinstance(quantize, g.QuantizeLinearOp)
        y_scale, y_zp, y_type = q
        multiplier = self.constant((acc_scale / y_scale).astype(np.float32), op, f"{name}.requant_scale")
        source = acc
        if isinstance(activation, g.ReluOp):
            relu = g.ReluOp(acc)
            Rewriter.insert_op(relu, InsertPoint.before(op))
            source = relu.results[0]
        requant = stamp(g.RequantizeOp.create(
            operands=[source, multiplier], result_types=[quantize.results[0].type],
            properties={**props, "zero_point": IntegerAttr(y_zp, i64)}), name)
        Rewriter.insert_op(requant, InsertPoint.before(quantize))
        out = requant.results[0]
        if isinstance(activation, g.ClipOp):  # clip commutes with the monotonic quantization
            bounds = {}
            for key, attr in (("min", activation.min), ("max", activation.max)):
                if attr is not None:
                    qb = lq.quantize_linear(np.float32(attr.value.data), y_scale, np.int64(y_zp), None, y_type)
                    bounds[key] = FloatAttr(float(qb), f64)
            clip = g.ClipOp.create(operands=[out], result_types=[out.type], properties=bounds)
            Rewriter.insert_op(clip, InsertPoint.before(quantize))
            out = clip.results[0]
        out.name_hint = quantize.results[0].name_hint
        quantize.results[0].replace_all_uses_with(out)


def _quantize_params(op: g.QuantizeLinearOp | None, store: WeightStore) -> tuple[np.float32, int, np.dtype] | None:
    """(scale, zero point, dtype) of a per-tensor quantize_linear with constant parameters."""
    if op is None:
        return None
    scale = constant_value(op.scale, store)
    zp = constant_value(op.zero_point, store) if op.zero_point is not None else np.zeros(1, np.int64)
    if scale is None or zp is None:
        return None
    scale, zp = np.asarray(scale, np.float32).reshape(-1), np.asarray(zp, np.int64).reshape(-1)
    if np.unique(scale).size != 1 or np.unique(zp).size != 1:
        return None
    return np.float32(scale[0]), int(zp[0]), to_numpy_dtype(op.results[0].type.get_element_type())  # type: ignore[attr-defined]


def _reciprocal_quantize(op: g.QuantizeLinearOp, store: WeightStore) -> None:
    """quantize_linear(x, s, zp) -> requantize(x, 1 / s, zp) (the NPU's form)."""
    scale = constant_value(op.scale, store)
    zp = constant_value(op.zero_point, store) if op.zero_point is not None else np.zeros(1, np.int64)
    if scale is None or zp is None or np.unique(np.asarray(zp)).size != 1:
        return
    scale = np.asarray(scale, np.float32)
    if not np.all(np.isfinite(scale)) or np.any(scale == 0):
        return
    inverse = (np.float32(1.0) / scale).astype(np.float32)
    m = parameter(inverse, store, "requant_scale")
    Rewriter.insert_op(m, InsertPoint.before(op))
    props = {"zero_point": IntegerAttr(int(np.asarray(zp).reshape(-1)[0]), i64)}
    if op.axis is not None:
        props["axis"] = op.axis
    new = g.RequantizeOp.create(operands=[op.input, m.results[0]], result_types=[op.output.type], properties=props)
    if NAME_ATTR in op.attributes:
        new.attributes[NAME_ATTR] = op.attributes[NAME_ATTR]
    Rewriter.replace_op(op, new)


def fold_constant_dequantize(module: ModuleOp) -> int:
    """Replace every `dequantize_linear` of a compile-time value that no integer kernel took
    (an imported QDQ model's int32 bias of a Gemm imported as matmul + add, the weight of a
    layer left in float) by its float32 values, computed as the interpreter does: nothing
    to run on the device. Returns how many were folded."""
    store = weights_of(module)
    folded = 0
    for op in [op for op in module.walk() if isinstance(op, g.DequantizeLinearOp)]:
        q, scale = constant_value(op.input, store), constant_value(op.scale, store)
        zp = constant_value(op.zero_point, store) if op.zero_point is not None else None
        if q is None or scale is None or (op.zero_point is not None and zp is None):
            continue
        axis = None if op.axis is None else int(op.axis.value.data)
        value = lq.dequantize_linear(np.asarray(q), np.asarray(scale), zp, axis, np.dtype(np.float32))
        const = parameter(value, store, weight_base_name(op.input, "dequantized", "value"))
        Rewriter.insert_op(const, InsertPoint.before(op))
        Rewriter.replace_op(op, [], [const.results[0]])
        folded += 1
    GraphDCEPass().apply(Context(), module)
    return folded


def quantize_kernels(module: ModuleOp, reciprocal_quantize: bool = True, runtime_rhs: bool = True) -> list[str]:
    """Rewrite every QDQ layer of every function into an integer kernel (in program order);
    returns the names of the layers rewritten. `runtime_rhs=False` leaves a matmul whose
    right operand is computed at run time (attention's q·kᵀ, P·V) a float matmul over the
    dequantized operands."""
    from xdsl.dialects import func

    rw = _Rewriter(module, runtime_rhs)
    done = []
    for fn in [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]:
        names = layer_names(fn)
        for op in list(fn.body.block.ops):
            if isinstance(op, tuple(QUANTIZABLE.values())) and rw.layer(op, names[op]):
                done.append(names[op])
        if reciprocal_quantize:
            for op in list(fn.body.block.ops):
                if isinstance(op, g.QuantizeLinearOp):
                    _reciprocal_quantize(op, rw.store)
    GraphDCEPass().apply(Context(), module)
    return done


@dataclass(frozen=True)
class GraphQuantizeKernelsPass(ModulePass):
    """Turn DQ -> conv2d/linear/matmul -> Q patterns into integer kernels with a requantize
    (or dequantize) epilogue."""

    name = "graph-quantize-kernels"

    reciprocal_quantize: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        quantize_kernels(op, self.reciprocal_quantize)


_ = (StringAttr, f32)

__all__ = ["GraphQuantizeKernelsPass", "quantize_kernels"]
