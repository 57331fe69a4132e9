"""ONNX handlers: elementwise arithmetic, comparisons, casts and activations."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_name, from_numpy_dtype, numpy_dtype_of, shape_of
from infer.frontend.onnx_ops import (
    NodeProblem,
    attribute,
    handler,
    input_name,
    is_bfloat16,
    is_float_dtype,
    numpy_dtype_for,
    require_float,
)

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer


_UNARY = {
    "Neg": g.NegOp, "Abs": g.AbsOp, "Sign": g.SignOp, "Exp": g.ExpOp, "Log": g.LogOp,
    "Sqrt": g.SqrtOp, "Reciprocal": g.ReciprocalOp, "Tanh": g.TanhOp, "Sigmoid": g.SigmoidOp,
    "Erf": g.ErfOp, "Sin": g.SinOp, "Cos": g.CosOp, "Floor": g.FloorOp, "Ceil": g.CeilOp,
    "Round": g.RoundOp, "Relu": g.ReluOp, "Softplus": g.SoftplusOp, "Not": g.NotOp,
}


@handler(*_UNARY, attrs=("consumed_inputs",))
def _unary(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    cls = _UNARY[node.op_type]
    if cls.FLOAT_ONLY and numpy_dtype_of(x).kind not in "fV" and not is_bfloat16(numpy_dtype_of(x)):
        raise NodeProblem(f"{node.op_type} of {numpy_dtype_of(x)} is not supported (float types only)")
    return [imp.b.op(cls, [x])]


_BINARY = {
    "Add": g.AddOp, "Sub": g.SubOp, "Mul": g.MulOp, "Div": g.DivOp,
    "Equal": g.EqualOp, "Less": g.LessOp, "LessOrEqual": g.LessEqualOp,
    "Greater": g.GreaterOp, "GreaterOrEqual": g.GreaterEqualOp,
    "And": g.AndOp, "Or": g.OrOp, "Xor": g.XorOp,
}


@handler(*_BINARY, attrs=("broadcast", "axis", "consumed_inputs"))
def _binary(imp: Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    if attribute(node, "broadcast", 0) and attribute(node, "axis") is not None:
        b = _legacy_broadcast(imp, a, b, int(attribute(node, "axis")))
    return [imp.b.op(_BINARY[node.op_type], [a, b])]


def _legacy_broadcast(imp: Importer, a: SSAValue, b: SSAValue, axis: int) -> SSAValue:
    """Opset < 7 `broadcast=1, axis=k`: b's dims line up with a's from axis k."""
    ra, rb = len(shape_of(a)), len(shape_of(b))
    axis = axis % ra if ra else 0
    shape = (*shape_of(b), *([1] * (ra - axis - rb)))
    return imp.b.reshape(b, shape)


_BITWISE = {"BitwiseAnd": g.BitwiseAndOp, "BitwiseOr": g.BitwiseOrOp, "BitwiseXor": g.BitwiseXorOp}


@handler(*_BITWISE)
def _bitwise(imp: Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    return [imp.b.op(_BITWISE[node.op_type], [a, b])]


@handler("BitwiseNot")
def _bitwise_not(imp: Importer, node: onnx.NodeProto):
    return [imp.b.op(g.BitwiseNotOp, [imp.value(node.input[0])])]


@handler("BitShift", attrs=("direction",))
def _bit_shift(imp: Importer, node: onnx.NodeProto):
    direction = attribute(node, "direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise NodeProblem(f"direction must be LEFT or RIGHT, got '{direction}'")
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    return [imp.b.op(g.ShiftLeftOp if direction == "LEFT" else g.ShiftRightOp, [a, b])]


@handler("Pow")
def _pow(imp: Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    b = imp.b.cast(b, numpy_dtype_of(a))
    return [imp.b.op(g.PowOp, [a, b])]


@handler("Mod", attrs=("fmod",))
def _mod(imp: Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    if not attribute(node, "fmod", 0):
        return [imp.b.op(g.ModOp, [a, b])]
    # fmod: remainder with the sign of the dividend, a - trunc(a / b) * b
    q = imp.b.op(g.DivOp, [a, b])
    if is_float_dtype(numpy_dtype_of(a)):
        q = imp.b.op(g.MulOp, [imp.b.op(g.SignOp, [q]), imp.b.op(g.FloorOp, [imp.b.op(g.AbsOp, [q])])])
    return [imp.b.op(g.SubOp, [a, imp.b.op(g.MulOp, [q, b])])]


@handler("Max", "Min", "Sum", "Mean", attrs=("consumed_inputs",))
def _variadic(imp: Importer, node: onnx.NodeProto):
    cls = {"Max": g.MaximumOp, "Min": g.MinimumOp, "Sum": g.AddOp, "Mean": g.AddOp}[node.op_type]
    vals = [imp.value(i) for i in node.input if i]
    acc = vals[0]
    for v in vals[1:]:
        acc = imp.b.op(cls, [acc, v])
    if node.op_type == "Mean" and len(vals) > 1:
        acc = imp.b.op(g.DivOp, [acc, imp.b.scalar(len(vals), acc)])
    return [acc]


@handler("Where")
def _where(imp: Importer, node: onnx.NodeProto):
    c, a, b = (imp.value(i) for i in node.input[:3])
    return [imp.b.op(g.WhereOp, [c, a, b])]


@handler("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(imp: Importer, node: onnx.NodeProto):
    to = attribute(node, "to")
    if isinstance(to, str):
        to = getattr(TensorProto, to.upper())
    dt = numpy_dtype_for(int(to), "the cast target")
    x = imp.value(node.input[0])
    return [_onnx_cast(imp, node, x, dt)]


def _onnx_cast(imp: Importer, node: onnx.NodeProto, x: SSAValue, dt: np.dtype) -> SSAValue:
    """Cast with ONNX's `saturate` (default 1; it only matters for 8-bit float targets,
    and f4E2M1FN always saturates) and `round_mode` (default "up"; f8E8M0FNU only)."""
    name = element_type_name(from_numpy_dtype(dt))
    if not name.startswith("f8"):
        return imp.b.cast(x, dt)
    round_mode = attribute(node, "round_mode", "up") if name == "f8E8M0FNU" else "up"
    if round_mode not in ("up", "down", "nearest"):
        raise NodeProblem(f"round_mode '{round_mode}' is not supported (up, down, nearest)")
    return imp.b.cast(x, dt, saturate=bool(attribute(node, "saturate", 1)), round_mode=round_mode)


@handler("CastLike", attrs=("saturate", "round_mode"))
def _cast_like(imp: Importer, node: onnx.NodeProto):
    """Only the element type of the second input matters, so a constant first input folds
    even when the second is computed at run time (the Attention function body casts its
    -inf padding value like a runtime tensor and pads with it)."""
    if imp.is_const(node.input[0]):
        folded = imp.fold_like(node, node.input[1])
        if folded is not None:
            return folded
    return [_onnx_cast(imp, node, imp.value(node.input[0]), imp.dtype(node.input[1]))]


@handler("Identity")
def _identity(imp: Importer, node: onnx.NodeProto):
    return [imp.value(node.input[0])]


@handler("Dropout", attrs=("ratio", "seed", "is_test"))
def _dropout(imp: Importer, node: onnx.NodeProto):
    training = input_name(node, 2)
    if training and bool(np.asarray(imp.static(training, "training_mode")).reshape(-1)[0]):
        raise NodeProblem("training_mode = true (random dropout) is not supported")
    x = imp.value(node.input[0])
    mask = np.ones(shape_of(x), dtype=np.bool_)
    return [x, mask]


# -- activations -------------------------------------------------------------


@handler("LeakyRelu", attrs=("alpha",))
def _leaky_relu(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "LeakyRelu")
    return [imp.b.op(g.LeakyReluOp, [x], alpha=g.f64_attr(attribute(node, "alpha", 0.01)))]


@handler("Elu", attrs=("alpha", "consumed_inputs"))
def _elu(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "Elu")
    return [imp.b.op(g.EluOp, [x], alpha=g.f64_attr(attribute(node, "alpha", 1.0)))]


@handler("Selu", attrs=("alpha", "gamma", "consumed_inputs"))
def _selu(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "Selu")
    e = imp.b.op(g.EluOp, [x], alpha=g.f64_attr(attribute(node, "alpha", 1.67326319217681884765625)))
    return [imp.b.op(g.MulOp, [e, imp.b.scalar(attribute(node, "gamma", 1.05070102214813232421875), x)])]


@handler("Celu", attrs=("alpha",))
def _celu(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "Celu")
    alpha = attribute(node, "alpha", 1.0)
    a = imp.b.scalar(alpha, x)
    e = imp.b.op(g.EluOp, [imp.b.op(g.DivOp, [x, a])], alpha=g.f64_attr(1.0))
    return [imp.b.op(g.MulOp, [e, a])]


@handler("HardSigmoid", attrs=("alpha", "beta", "consumed_inputs"))
def _hard_sigmoid(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "HardSigmoid")
    return [imp.b.op(g.HardSigmoidOp, [x], alpha=g.f64_attr(attribute(node, "alpha", 0.2)), beta=g.f64_attr(attribute(node, "beta", 0.5)))]


@handler("HardSwish")
def _hard_swish(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "HardSwish")
    hs = imp.b.op(g.HardSigmoidOp, [x], alpha=g.f64_attr(1 / 6), beta=g.f64_attr(0.5))
    return [imp.b.op(g.MulOp, [x, hs])]


@handler("Swish", attrs=("alpha",))
def _swish(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "Swish")
    alpha = float(attribute(node, "alpha", 1.0))
    if alpha == 1.0:
        return [imp.b.op(g.SiluOp, [x])]
    s = imp.b.op(g.SigmoidOp, [imp.b.op(g.MulOp, [x, imp.b.scalar(alpha, x)])])
    return [imp.b.op(g.MulOp, [x, s])]


@handler("Mish")
def _mish(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "Mish")
    return [imp.b.op(g.MulOp, [x, imp.b.op(g.TanhOp, [imp.b.op(g.SoftplusOp, [x])])])]


@handler("Softsign")
def _softsign(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "Softsign")
    d = imp.b.op(g.AddOp, [imp.b.op(g.AbsOp, [x]), imp.b.scalar(1, x)])
    return [imp.b.op(g.DivOp, [x, d])]


@handler("ThresholdedRelu", attrs=("alpha",))
def _thresholded_relu(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    cond = imp.b.op(g.GreaterOp, [x, imp.b.scalar(attribute(node, "alpha", 1.0), x)])
    return [imp.b.op(g.WhereOp, [cond, x, imp.b.scalar(0, x)])]


@handler("Shrink", attrs=("bias", "lambd"))
def _shrink(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    bias, lambd = attribute(node, "bias", 0.0), attribute(node, "lambd", 0.5)
    zero = imp.b.scalar(0, x)
    lo = imp.b.op(g.WhereOp, [imp.b.op(g.LessOp, [x, imp.b.scalar(-lambd, x)]), imp.b.op(g.AddOp, [x, imp.b.scalar(bias, x)]), zero])
    return [imp.b.op(g.WhereOp, [imp.b.op(g.GreaterOp, [x, imp.b.scalar(lambd, x)]), imp.b.op(g.SubOp, [x, imp.b.scalar(bias, x)]), lo])]


@handler("PRelu", attrs=("consumed_inputs",))
def _prelu(imp: Importer, node: onnx.NodeProto):
    x, slope = imp.value(node.input[0]), imp.value(node.input[1])
    neg = imp.b.op(g.LessOp, [x, imp.b.scalar(0, x)])
    return [imp.b.op(g.WhereOp, [neg, imp.b.op(g.MulOp, [x, slope]), x])]


@handler("Gelu", attrs=("approximate",))
def _gelu(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    require_float(x, "Gelu")
    approx = attribute(node, "approximate", "none")
    return [imp.b.op(g.GeluOp, [x], approximate=StringAttr(approx))]


@handler("Clip", attrs=("min", "max", "consumed_inputs"))
def _clip(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    lo = attribute(node, "min")
    hi = attribute(node, "max")
    out = x
    for idx, bound, cls in ((1, lo, g.MaximumOp), (2, hi, g.MinimumOp)):
        name = input_name(node, idx)
        if name and not imp.is_const(name):
            out = imp.b.op(cls, [out, imp.b.cast(imp.value(name), numpy_dtype_of(x))])
            continue
        if name:
            bound = np.asarray(imp.consts[name]).reshape(-1)[0].item()
        if bound is not None:
            out = imp.b.op(cls, [out, imp.b.scalar(bound, x)])
    return [out]


@handler("IsNaN")
def _isnan(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    return [imp.b.op(g.NotOp, [imp.b.op(g.EqualOp, [x, x])])]


@handler("IsInf", attrs=("detect_positive", "detect_negative"))
def _isinf(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    pos = imp.b.op(g.EqualOp, [x, imp.b.scalar(np.inf, x)])
    neg = imp.b.op(g.EqualOp, [x, imp.b.scalar(-np.inf, x)])
    dp, dn = attribute(node, "detect_positive", 1), attribute(node, "detect_negative", 1)
    if dp and dn:
        return [imp.b.op(g.OrOp, [pos, neg])]
    if dp:
        return [pos]
    if dn:
        return [neg]
    return [np.zeros(shape_of(x), dtype=np.bool_)]


def _trig(expr: Callable[[Importer, SSAValue], SSAValue]):
    def fn(imp: Importer, node: onnx.NodeProto):
        x = imp.value(node.input[0])
        require_float(x, node.op_type)
        return [expr(imp, x)]

    return fn


def _half(imp: Importer, x: SSAValue) -> SSAValue:
    return imp.b.op(g.MulOp, [x, imp.b.scalar(0.5, x)])


handler("Tan")(_trig(lambda imp, x: imp.b.op(g.DivOp, [imp.b.op(g.SinOp, [x]), imp.b.op(g.CosOp, [x])])))
handler("Sinh")(_trig(lambda imp, x: _half(imp, imp.b.op(g.SubOp, [imp.b.op(g.ExpOp, [x]), imp.b.op(g.ExpOp, [imp.b.op(g.NegOp, [x])])]))))
handler("Cosh")(_trig(lambda imp, x: _half(imp, imp.b.op(g.AddOp, [imp.b.op(g.ExpOp, [x]), imp.b.op(g.ExpOp, [imp.b.op(g.NegOp, [x])])]))))
handler("Asinh")(_trig(lambda imp, x: imp.b.op(g.LogOp, [imp.b.op(g.AddOp, [x, imp.b.op(g.SqrtOp, [imp.b.op(g.AddOp, [imp.b.op(g.MulOp, [x, x]), imp.b.scalar(1, x)])])])])))
handler("Acosh")(_trig(lambda imp, x: imp.b.op(g.LogOp, [imp.b.op(g.AddOp, [x, imp.b.op(g.SqrtOp, [imp.b.op(g.SubOp, [imp.b.op(g.MulOp, [x, x]), imp.b.scalar(1, x)])])])])))
handler("Atanh")(_trig(lambda imp, x: _half(imp, imp.b.op(g.LogOp, [imp.b.op(g.DivOp, [imp.b.op(g.AddOp, [imp.b.scalar(1, x), x]), imp.b.op(g.SubOp, [imp.b.scalar(1, x), x])])]))))
