"""torch.export handlers: ATen ops (core ATen after decomposition, plus KEPT_OPS) onto graph
ops, with the exact fusions of what transformers' modules decompose into (RMSNorm, rotate_half
RoPE)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_of, is_float, numpy_dtype_of, shape_of
from infer.frontend.conv_transpose import ConvTransposeProblem, conv_transpose
from infer.frontend.torch_ops import (
    HANDLERS,
    KnownTensor,
    Unsupported,
    aten,
    handles,
    normalize_dim,
    target_name,
    torch_numpy_dtype,
)

if TYPE_CHECKING:
    from infer.frontend.torch_import import Importer


def _broadcast_binary(imp: Importer, op_type, x, y, dtype: np.dtype | None = None) -> SSAValue:
    dtype = dtype or imp.out_dtype()
    return imp.b.op(op_type, [imp.operand(x, dtype), imp.operand(y, dtype)])


def _promoted(imp: Importer, node) -> np.dtype:
    """Common dtype of a comparison's operands (torch type promotion on the FX metadata)."""
    def proxy(a):
        if hasattr(a, "meta") and isinstance(a.meta.get("val"), torch.Tensor):
            val = a.meta["val"]
            return torch.empty((1,) * max(val.dim(), 1) if val.dim() else (), dtype=val.dtype)
        return a

    return torch_numpy_dtype(torch.result_type(proxy(node.args[0]), proxy(node.args[1])))


def _alpha(imp, y, kwargs):
    alpha = kwargs.get("alpha", 1)
    if alpha == 1:
        return y
    if isinstance(y, int | float):
        return y * alpha
    dt = imp.out_dtype()
    return imp.b.op(g.MulOp, [imp.operand(y, dt), imp.b.constant(np.asarray(alpha, dtype=dt))])


@handles(aten.add.Tensor, aten.add.Scalar)
def _add(imp, node, args, kwargs):
    m = _match_rotary(node) if node.target == aten.add.Tensor else None
    if m is not None:
        q, cos, sin = (imp.env.get(n) for n in m)
        if q is not None and cos is not None and sin is not None:
            qv = imp.value(q)
            cv, sv = imp.value(cos), imp.value(sin)
            dt = imp.out_dtype()
            try:
                if numpy_dtype_of(qv) == numpy_dtype_of(cv) == numpy_dtype_of(sv) == dt and shape_of(cv) == shape_of(sv):
                    target = (*shape_of(qv)[:-1], shape_of(cv)[-1])
                    if g.broadcast_shapes("", shape_of(cv), target) == target and shape_of(cv)[-1] == shape_of(qv)[-1]:
                        return imp.b.op(g.RotaryOp, [qv, cv, sv])
            except Exception:
                pass  # not broadcastable the rotary way: emit the elementwise ops
    return _broadcast_binary(imp, g.AddOp, args[0], _alpha(imp, args[1], kwargs))


@handles(aten.sub.Tensor, aten.sub.Scalar)
def _sub(imp, node, args, kwargs):
    return _broadcast_binary(imp, g.SubOp, args[0], _alpha(imp, args[1], kwargs))


@handles(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(imp, node, args, kwargs):
    return _broadcast_binary(imp, g.SubOp, args[1], _alpha(imp, args[0], kwargs))


# -- fusions: exact rewrites of what transformers' modules decompose into ---------


def _calls(n: Any, target: Any) -> bool:
    """FX node `n` calls `target`."""
    return hasattr(n, "target") and n.target == target


def _last_dim(n: Any, d: Any) -> bool:
    val = n.meta.get("val") if hasattr(n, "meta") else None
    return val is not None and isinstance(d, int) and d in (-1, val.dim() - 1)


def _match_rms(n: Any) -> tuple[Any, float] | None:
    """n = x * rsqrt(mean(x ** 2, -1, keepdim) + eps) -> (x, eps)."""
    if not _calls(n, aten.mul.Tensor):
        return None
    for x, r in (n.args, n.args[::-1]):
        if not _calls(r, aten.rsqrt.default) or not _calls(r.args[0], aten.add.Tensor):
            continue
        mean, eps = r.args[0].args
        if not isinstance(eps, float) or not _calls(mean, aten.mean.dim) or len(mean.args) < 3 or not mean.args[2]:
            continue
        if len(mean.args[1]) != 1 or not _last_dim(mean.args[0], mean.args[1][0]):
            continue
        p = mean.args[0]
        if _calls(p, aten.pow.Tensor_Scalar) and p.args[0] is x and p.args[1] == 2:
            return x, eps
    return None


def _match_rotary(n: Any) -> tuple[Any, Any, Any] | None:
    """n = q * cos + cat(-q[..., h:], q[..., :h]) * sin -> (q, cos, sin) (rotate_half)."""
    if not _calls(n, aten.add.Tensor) or len(n.args) != 2 or n.kwargs.get("alpha", 1) != 1:
        return None
    for m1, m2 in (n.args, n.args[::-1]):
        if not (_calls(m1, aten.mul.Tensor) and _calls(m2, aten.mul.Tensor)):
            continue
        for q, cos in (m1.args, m1.args[::-1]):
            for cat, sin in (m2.args, m2.args[::-1]):
                if not _calls(cat, aten.cat.default) or len(cat.args[0]) != 2 or not hasattr(q, "meta"):
                    continue
                if not _last_dim(q, cat.args[1] if len(cat.args) > 1 else 0):
                    continue
                neg, lo = cat.args[0]
                if not (_calls(neg, aten.neg.default) and _calls(neg.args[0], aten.slice.Tensor) and _calls(lo, aten.slice.Tensor)):
                    continue
                hi = neg.args[0]
                d = q.meta["val"].shape[-1]
                if hi.args[0] is not q or lo.args[0] is not q or d % 2:
                    continue
                if not (_last_dim(q, hi.args[1]) and _last_dim(q, lo.args[1])):
                    continue
                lo_range = slice(*(list(lo.args[2:4]) + [None] * 2)[:2]).indices(d)
                hi_range = slice(*(list(hi.args[2:4]) + [None] * 2)[:2]).indices(d)
                steps_ok = all(len(x.args) < 5 or x.args[4] == 1 for x in (lo, hi))
                if steps_ok and lo_range[:2] == (0, d // 2) and hi_range[:2] == (d // 2, d):
                    return q, cos, sin
    return None


@handles(aten.mul.Tensor, aten.mul.Scalar)
def _mul(imp, node, args, kwargs):
    for w, h in (node.args, node.args[::-1]):
        m = _match_rms(h) if node.target == aten.mul.Tensor else None
        if m is None or not hasattr(w, "meta"):
            continue
        x, wv = imp.env.get(m[0]), imp.env.get(w)
        if x is None or wv is None:
            continue
        xv, wv = imp.value(x), imp.value(wv)
        dt = imp.out_dtype()
        if shape_of(wv) == shape_of(xv)[-1:] and numpy_dtype_of(xv) == numpy_dtype_of(wv) == dt:
            return imp.b.op(g.RmsNormOp, [xv, wv], epsilon=g.f64_attr(m[1]))
    return _broadcast_binary(imp, g.MulOp, args[0], args[1])


@handles(aten.div.Tensor, aten.div.Scalar)
def _div(imp, node, args, kwargs):
    return _broadcast_binary(imp, g.DivOp, args[0], args[1])


@handles(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(imp, node, args, kwargs):
    mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
    dt = imp.out_dtype()
    integer = np.issubdtype(dt, np.integer)
    if mode is None or (integer and mode == "trunc"):
        return _broadcast_binary(imp, g.DivOp, args[0], args[1])
    if integer:  # floor division of integers: (x - mod(x, y)) / y is exact
        x, y = imp.operand(args[0], dt), imp.operand(args[1], dt)
        m = imp.b.op(g.ModOp, [x, y])
        return imp.b.op(g.DivOp, [imp.b.op(g.SubOp, [x, m]), y])
    q = _broadcast_binary(imp, g.DivOp, args[0], args[1])
    if mode == "floor":
        return imp.b.op(g.FloorOp, [q])
    neg = imp.b.op(g.LessOp, [q, imp.b.scalar(0, q)])
    return imp.b.op(g.WhereOp, [neg, imp.b.op(g.CeilOp, [q]), imp.b.op(g.FloorOp, [q])])


@handles(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(imp, node, args, kwargs):
    x, y = args
    dt = imp.out_dtype()
    if isinstance(y, int | float) and not isinstance(x, int | float):
        if y == 2:
            v = imp.operand(x, dt)
            return imp.b.op(g.MulOp, [v, v])
        if y == 1:
            return imp.operand(x, dt)
        if y == 0.5:
            return imp.b.op(g.SqrtOp, [imp.operand(x, dt)])
    return _broadcast_binary(imp, g.PowOp, x, y)


@handles(aten.maximum.default)
def _maximum(imp, node, args, kwargs):
    return _broadcast_binary(imp, g.MaximumOp, args[0], args[1])


@handles(aten.minimum.default)
def _minimum(imp, node, args, kwargs):
    return _broadcast_binary(imp, g.MinimumOp, args[0], args[1])


@handles(aten.remainder.Tensor, aten.remainder.Scalar)
def _remainder(imp, node, args, kwargs):
    return _broadcast_binary(imp, g.ModOp, args[0], args[1])


def _compare(op_type, swap: bool = False):
    def handler(imp, node, args, kwargs):
        dt = _promoted(imp, node)
        x, y = imp.operand(args[0], dt), imp.operand(args[1], dt)
        return imp.b.op(op_type, [y, x] if swap else [x, y])

    return handler


for _ops, _gop in [
    ((aten.eq.Tensor, aten.eq.Scalar), g.EqualOp),
    ((aten.lt.Tensor, aten.lt.Scalar), g.LessOp),
    ((aten.le.Tensor, aten.le.Scalar), g.LessEqualOp),
    ((aten.gt.Tensor, aten.gt.Scalar), g.GreaterOp),
    ((aten.ge.Tensor, aten.ge.Scalar), g.GreaterEqualOp),
]:
    for _op in _ops:
        HANDLERS[_op] = _compare(_gop)


@handles(aten.ne.Tensor, aten.ne.Scalar)
def _ne(imp, node, args, kwargs):
    return imp.b.op(g.NotOp, [_compare(g.EqualOp)(imp, node, args, kwargs)])


def _logical(op_type):
    def handler(imp, node, args, kwargs):
        if imp.out_dtype() != np.bool_:
            raise Unsupported("op:" + target_name(node.target) + " on integers (bitwise)")
        return imp.b.op(op_type, [imp.operand(args[0], np.bool_), imp.operand(args[1], np.bool_)])

    return handler


for _op, _gop in [
    (aten.logical_and.default, g.AndOp), (aten.bitwise_and.Tensor, g.AndOp),
    (aten.logical_or.default, g.OrOp), (aten.bitwise_or.Tensor, g.OrOp),
    (aten.logical_xor.default, g.XorOp), (aten.bitwise_xor.Tensor, g.XorOp),
]:
    HANDLERS[_op] = _logical(_gop)


@handles(aten.logical_not.default, aten.bitwise_not.default)
def _not(imp, node, args, kwargs):
    if node.target == aten.bitwise_not.default and imp.out_dtype() != np.bool_:
        raise Unsupported("op:aten.bitwise_not on integers")
    return imp.b.op(g.NotOp, [imp.operand(args[0], np.bool_)])


def _unary(op_type, **props):
    def handler(imp, node, args, kwargs):
        return imp.b.op(op_type, [imp.operand(args[0], imp.out_dtype())], **props)

    return handler


for _op, _gop in [
    (aten.neg.default, g.NegOp), (aten.abs.default, g.AbsOp), (aten.sign.default, g.SignOp),
    (aten.exp.default, g.ExpOp), (aten.log.default, g.LogOp), (aten.sqrt.default, g.SqrtOp),
    (aten.rsqrt.default, g.RsqrtOp), (aten.reciprocal.default, g.ReciprocalOp),
    (aten.tanh.default, g.TanhOp), (aten.sigmoid.default, g.SigmoidOp), (aten.erf.default, g.ErfOp),
    (aten.sin.default, g.SinOp), (aten.cos.default, g.CosOp), (aten.floor.default, g.FloorOp),
    (aten.ceil.default, g.CeilOp), (aten.round.default, g.RoundOp), (aten.relu.default, g.ReluOp),
    (aten.silu.default, g.SiluOp),
]:
    HANDLERS[_op] = _unary(_gop)


@handles(aten.log1p.default)
def _log1p(imp, node, args, kwargs):
    """log(1 + x), as ONNX writes it (no log1p op; softplus's, Mamba's)."""
    x = imp.operand(args[0], imp.out_dtype())
    return imp.b.op(g.LogOp, [imp.b.op(g.AddOp, [x, imp.b.scalar(1, x)])])


@handles(aten.flip.default)
def _flip(imp, node, args, kwargs):
    x = imp.value(args[0])
    shape = shape_of(x)
    for d in args[1]:
        axis = normalize_dim(d, len(shape))
        x = imp.b.slice_dim(x, axis, shape[axis] - 1, -1, -1)  # (normalized: -1 ends below index 0)
    return x


@handles(aten.cumsum.default, aten.cumprod.default)
def _cumulative(imp, node, args, kwargs):
    """torch.cumsum / cumprod (RoBERTa's and OPT's position ids from the attention mask, BLOOM's
    ALiBi): GraphBuilder.cumulative, on x cast to the result's type."""
    x = imp.b.cast(imp.value(args[0]), imp.out_dtype())  # `dtype`, or int64 for integers and bools
    axis = normalize_dim(args[1], len(shape_of(x)))
    return imp.b.cumulative(x, axis, product=node.target is aten.cumprod.default)


@handles(aten.gelu.default)
def _gelu(imp, node, args, kwargs):
    approx = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    return imp.b.op(g.GeluOp, [imp.value(args[0])], approximate=StringAttr(approx))


@handles(aten.clamp.default, aten.hardtanh.default)
def _clamp(imp, node, args, kwargs):
    lo = args[1] if len(args) > 1 else kwargs.get("min", kwargs.get("min_val", -1.0 if node.target == aten.hardtanh.default else None))
    hi = args[2] if len(args) > 2 else kwargs.get("max", kwargs.get("max_val", 1.0 if node.target == aten.hardtanh.default else None))
    props = {}
    if lo is not None:
        props["min"] = g.f64_attr(float(lo))
    if hi is not None:
        props["max"] = g.f64_attr(float(hi))
    return imp.b.op(g.ClipOp, [imp.value(args[0])], **props)


@handles(aten.leaky_relu.default)
def _leaky(imp, node, args, kwargs):
    alpha = args[1] if len(args) > 1 else 0.01
    return imp.b.op(g.LeakyReluOp, [imp.value(args[0])], alpha=g.f64_attr(float(alpha)))


@handles(aten.elu.default)
def _elu(imp, node, args, kwargs):
    alpha = args[1] if len(args) > 1 else 1.0
    if (len(args) > 2 and args[2] != 1) or (len(args) > 3 and args[3] != 1):
        raise Unsupported("op:aten.elu with scale != 1")
    return imp.b.op(g.EluOp, [imp.value(args[0])], alpha=g.f64_attr(float(alpha)))


@handles(aten.hardsigmoid.default)
def _hardsigmoid(imp, node, args, kwargs):
    return imp.b.op(g.HardSigmoidOp, [imp.value(args[0])], alpha=g.f64_attr(1 / 6), beta=g.f64_attr(0.5))


@handles(aten.hardswish.default)
def _hardswish(imp, node, args, kwargs):
    x = imp.value(args[0])
    hs = imp.b.op(g.HardSigmoidOp, [x], alpha=g.f64_attr(1 / 6), beta=g.f64_attr(0.5))
    return imp.b.op(g.MulOp, [x, hs])


@handles(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def _where(imp, node, args, kwargs):
    dt = imp.out_dtype()
    return imp.b.op(g.WhereOp, [imp.operand(args[0], np.bool_), imp.operand(args[1], dt), imp.operand(args[2], dt)])


@handles(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(imp, node, args, kwargs):
    dt = imp.out_dtype()
    return imp.b.op(g.WhereOp, [imp.operand(args[1], np.bool_), imp.operand(args[2], dt), imp.operand(args[0], dt)])


@handles(aten._to_copy.default, aten.to.dtype)
def _to_copy(imp, node, args, kwargs):
    return imp.b.cast(imp.value(args[0]), imp.out_dtype())


@handles(aten.clone.default, aten.alias.default, aten.detach.default, aten.contiguous.default,
          aten.lift_fresh_copy.default, aten.dropout.default)
def _identity(imp, node, args, kwargs):
    return imp.value(args[0])


# -- linear algebra -------------------------------------------------------------


@handles(aten.linear.default)
def _linear(imp, node, args, kwargs):
    x, w = imp.value(args[0]), imp.value(args[1])
    bias = imp.value(args[2]) if len(args) > 2 and args[2] is not None else None
    return imp.b.op(g.LinearOp, [x, w, bias])


@handles(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(imp, node, args, kwargs):
    return imp.b.op(g.MatmulOp, [imp.value(args[0]), imp.value(args[1])])


@handles(aten.addmm.default)
def _addmm(imp, node, args, kwargs):
    bias, x, w = args[:3]
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    y = imp.b.op(g.MatmulOp, [imp.value(x), imp.value(w)])
    if alpha != 1:
        y = imp.b.op(g.MulOp, [y, imp.b.scalar(alpha, y)])
    bv = imp.value(bias)
    if beta != 1:
        bv = imp.b.op(g.MulOp, [bv, imp.b.scalar(beta, bv)])
    return imp.b.op(g.AddOp, [y, bv])


@handles(aten.convolution.default)
def _conv(imp, node, args, kwargs):
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = args
    # one value stands for every spatial dim (conv2d(padding="valid") decomposes to padding [0])
    spatial = len(shape_of(imp.value(x))) - 2
    stride, padding, dilation, output_padding = (
        list(v) * spatial if len(v) == 1 else list(v) for v in (stride, padding, dilation, output_padding))
    if transposed:
        return _conv_transpose(imp, imp.value(x), imp.value(w), imp.value(bias) if bias is not None else None,
                               stride, padding, dilation, output_padding, groups)
    xv, wv = imp.value(x), imp.value(w)
    xs, ws = shape_of(xv), shape_of(wv)
    if len(xs) == 5:  # video models' 3-D convs: one 2-D conv over the depth taps
        return imp.b.conv3d(xv, wv, imp.value(bias) if bias is not None else None, list(stride),
                            [*padding, *padding], list(dilation), groups)
    if len(xs) not in (3, 4):
        raise Unsupported(f"op:aten.convolution ({len(xs) - 2}-d)")
    if len(xs) == 3:  # conv1d (Whisper's and wav2vec2's front ends) as a conv2d of height 1
        xv = imp.b.reshape(xv, (xs[0], xs[1], 1, xs[2]))
        wv = imp.b.reshape(wv, (ws[0], ws[1], 1, ws[2]))
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    ph, pw = padding
    y = imp.b.op(
        g.Conv2dOp, [xv, wv, imp.value(bias) if bias is not None else None],
        stride=g.i64_array(stride), padding=g.i64_array([ph, pw, ph, pw]), dilation=g.i64_array(dilation),
        groups=g.i64_attr(groups),
    )
    if len(xs) == 3:
        ys = shape_of(y)
        y = imp.b.reshape(y, (ys[0], ys[1], ys[3]))
    return y


def _conv_transpose(imp, x, w, bias, stride, padding, dilation, output_padding, groups):
    """ConvTranspose1d/2d (frontend/conv_transpose.py): torch pads each side alike."""
    try:
        return conv_transpose(imp.b, x, w, bias, list(stride), [*padding, *padding], list(dilation),
                              list(output_padding), groups)
    except ConvTransposeProblem as e:
        raise Unsupported(f"op:aten.convolution (transposed): {e}") from None


# -- normalization and pooling ----------------------------------------------------


@handles(aten.native_layer_norm.default)
def _layer_norm(imp, node, args, kwargs):
    x, normalized_shape, w, bias, eps = args
    xv = imp.value(x)
    rank = len(shape_of(xv))
    axis = rank - len(normalized_shape)
    scale = imp.value(w) if w is not None else imp.b.constant(np.ones(tuple(normalized_shape), numpy_dtype_of(xv)))
    y = imp.b.op(g.LayerNormOp, [xv, scale, imp.value(bias) if bias is not None else None],
                 axis=g.i64_attr(axis), epsilon=g.f64_attr(float(eps)))
    return (y, None, None)


@handles(aten.native_group_norm.default)
def _group_norm(imp, node, args, kwargs):
    """torch.nn.GroupNorm (wav2vec2's feature extractor: one group per channel). The mean and
    1/std outputs are for training's backward pass: not provided."""
    x, w, bias, n, c, hw, groups, eps = args
    if c % groups:
        raise Unsupported(f"op:aten.native_group_norm with {c} channels in {groups} groups")
    xv = imp.value(x)
    y = imp.b.group_norm(xv, int(groups), imp.value(w) if w is not None else None,
                         imp.value(bias) if bias is not None else None, float(eps))
    return (y, None, None)


@handles(aten._native_batch_norm_legit_no_training.default)
def _batch_norm(imp, node, args, kwargs):
    x, w, bias, mean, var, momentum, eps = args
    xv = imp.value(x)
    c = shape_of(xv)[1]
    dt = numpy_dtype_of(xv)
    scale = imp.value(w) if w is not None else imp.b.constant(np.ones(c, dt))
    bv = imp.value(bias) if bias is not None else imp.b.constant(np.zeros(c, dt))
    y = imp.b.op(g.BatchNormOp, [xv, scale, bv, imp.value(mean), imp.value(var)], epsilon=g.f64_attr(float(eps)))
    return (y, None, None)


@handles(aten.native_batch_norm.default)
def _native_bn(imp, node, args, kwargs):
    x, w, bias, mean, var, training, momentum, eps = args
    if training:
        raise Unsupported("op:aten.native_batch_norm in training mode")
    return _batch_norm(imp, node, [x, w, bias, mean, var, momentum, eps], kwargs)


def _pool_args(args, n_default_stride_from_kernel=True):
    kernel = list(args[1])
    kernel = kernel * 2 if len(kernel) == 1 else kernel
    stride = list(args[2]) if len(args) > 2 and args[2] else kernel
    stride = stride * 2 if len(stride) == 1 else stride
    padding = list(args[3]) if len(args) > 3 else [0, 0]
    padding = padding * 2 if len(padding) == 1 else padding
    return kernel, stride, padding


@handles(aten.max_pool2d_with_indices.default, aten.max_pool2d.default)
def _max_pool(imp, node, args, kwargs):
    kernel, stride, padding = _pool_args(args)
    dilation = list(args[4]) if len(args) > 4 else [1, 1]
    dilation = dilation * 2 if len(dilation) == 1 else dilation
    ceil_mode = bool(args[5]) if len(args) > 5 else False
    y = imp.b.op(g.MaxPool2dOp, [imp.value(args[0])], kernel=g.i64_array(kernel), stride=g.i64_array(stride),
                 padding=g.i64_array([padding[0], padding[1], padding[0], padding[1]]), dilation=g.i64_array(dilation),
                 ceil_mode=g.bool_attr(ceil_mode))
    return (y, None) if node.target == aten.max_pool2d_with_indices.default else y


@handles(aten.avg_pool2d.default)
def _avg_pool(imp, node, args, kwargs):
    kernel, stride, padding = _pool_args(args)
    ceil_mode = bool(args[4]) if len(args) > 4 else False
    include_pad = bool(args[5]) if len(args) > 5 else True
    if len(args) > 6 and args[6] is not None:
        raise Unsupported("op:aten.avg_pool2d with divisor_override")
    return imp.b.op(g.AvgPool2dOp, [imp.value(args[0])], kernel=g.i64_array(kernel), stride=g.i64_array(stride),
                    padding=g.i64_array([padding[0], padding[1], padding[0], padding[1]]),
                    ceil_mode=g.bool_attr(ceil_mode), count_include_pad=g.bool_attr(include_pad))


@handles(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def _adaptive_avg(imp, node, args, kwargs):
    x = imp.value(args[0])
    out = list(args[1])
    n, c, h, w = shape_of(x)
    if out == [1, 1]:
        return imp.b.op(g.GlobalAvgPoolOp, [x])
    if h % out[0] == 0 and w % out[1] == 0:
        k = [h // out[0], w // out[1]]
        return imp.b.op(g.AvgPool2dOp, [x], kernel=g.i64_array(k), stride=g.i64_array(k))
    # bins of different sizes (AlexNet's and VGG's 6x6 / 7x7 pools of an input of another size):
    # output (i, j) averages rows floor(i h / oh) .. ceil((i + 1) h / oh) and the columns alike,
    # PyTorch's rule; a linear map of each channel's pixels, so one graph.linear with the
    # compile-time [oh.ow, h.w] averaging matrix (the matrix unit does it)
    oh, ow = out
    bins = np.zeros((oh * ow, h * w), np.float32)
    for i in range(oh):
        r0, r1 = i * h // oh, -(-(i + 1) * h // oh)
        for j in range(ow):
            c0, c1 = j * w // ow, -(-(j + 1) * w // ow)
            cells = bins[i * ow + j].reshape(h, w)
            cells[r0:r1, c0:c1] = 1.0 / ((r1 - r0) * (c1 - c0))
    pixels = imp.b.reshape(x, (n, c, h * w))
    pooled = imp.b.op(g.LinearOp, [pixels, imp.b.constant(bins, name="adaptive_avg_pool_bins"), None])
    return imp.b.reshape(pooled, (n, c, oh, ow))


_RESAMPLING_OPS = {
    # op packet -> does it take align_corners (after output_size)
    aten.upsample_nearest1d: False, aten.upsample_nearest2d: False, aten.upsample_nearest3d: False,
    aten._upsample_nearest_exact1d: False, aten._upsample_nearest_exact2d: False,
    aten._upsample_nearest_exact3d: False,
    aten.upsample_linear1d: True, aten.upsample_bilinear2d: True, aten.upsample_trilinear3d: True,
    aten.upsample_bicubic2d: True, aten._upsample_bilinear2d_aa: True, aten._upsample_bicubic2d_aa: True,
    aten._upsample_lanczos2d_aa: True,
}
RESAMPLING_OVERLOADS = tuple(getattr(packet, overload) for packet in _RESAMPLING_OPS for overload in ("default", "vec"))
"""Kept out of the core-ATen decomposition (torch_import.KEPT_OPS): it writes some modes as
gathers and arithmetic per tap, where one product per axis does them all alike."""


@handles(*RESAMPLING_OVERLOADS)
def _upsample(imp, node, args, kwargs):
    """F.interpolate's nearest, nearest-exact, (bi/tri)linear, bicubic and antialiased modes
    (and torchvision's antialiased lanczos):
    separable and linear, so one [out, n] matrix per spatial axis (GraphBuilder.resample_axis).
    Each matrix is the op itself applied to an identity basis with that axis's size, output
    size and scale (the other spatial axes of size 1 and left alone), so it carries PyTorch's own rule for the source
    coordinate (align_corners, a given scale factor against the size ratio, the border clamp,
    the cubic coefficient, the antialiasing filter's support) and its float32 weights."""
    packet = node.target.overloadpacket
    has_align = _RESAMPLING_OPS[packet]
    x = imp.value(args[0])
    xs = shape_of(x)
    spatial = len(xs) - 2
    names = ["output_size"] + (["align_corners"] if has_align else [])
    if node.target._overloadname == "vec":
        names.append("scale_factors")
    else:
        names += ["scales"] if spatial == 1 else ["scales_d", "scales_h", "scales_w"][3 - spatial:]
    given = dict(zip(names, args[1:], strict=False)) | kwargs
    align = (bool(given.get("align_corners", False)),) if has_align else ()
    if node.target._overloadname == "vec":
        scales = given.get("scale_factors") or [None] * spatial
    else:
        scales = [given.get(n) for n in names[len(names) - spatial:]]
    out_shape = tuple(node.meta["val"].shape)
    y = x
    for k in range(spatial):
        axis, n, out = 2 + k, xs[2 + k], int(out_shape[2 + k])
        # the basis runs along the last spatial axis whichever axis k is (every mode's rule is the
        # same per axis): the antialiased kernels mix up the rows of an axis before one of size 1
        basis = torch.eye(n, dtype=torch.float32).reshape([1, n] + [1] * (spatial - 1) + [n])
        scales_k = [None] * (spatial - 1) + [None if scales[k] is None else float(scales[k])]
        response = packet.default(basis, [1] * (spatial - 1) + [out], *align, *scales_k)
        matrix = response.reshape(n, out).T.numpy()
        if out == n and np.array_equal(matrix, np.eye(n, dtype=matrix.dtype)):
            continue
        one_hot = np.all((matrix == 0) | (matrix == 1)) and np.all(matrix.sum(axis=1) == 1)
        if not one_hot and not is_float(element_type_of(y)):
            raise Unsupported(f"{target_name(node.target)} of {numpy_dtype_of(y)} values is not supported (floats only)")
        y = imp.b.resample_axis(y, axis, matrix, name="upsample")
    return y


def _reduce(op_type):
    def handler(imp, node, args, kwargs):
        x = imp.value(args[0])
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        if isinstance(dims, int):
            dims = [dims]
        rank = len(shape_of(x))
        dims = [normalize_dim(d, rank) for d in (dims or [])]
        if "dtype" in kwargs and kwargs["dtype"] is not None:
            x = imp.b.cast(x, torch_numpy_dtype(kwargs["dtype"]))
        elif op_type is g.ReduceSumOp and numpy_dtype_of(x) == np.bool_:
            x = imp.b.cast(x, imp.out_dtype())
        return imp.b.reduce(op_type, x, dims, keep)

    return handler


for _op, _gop in [
    (aten.mean.dim, g.ReduceMeanOp), (aten.sum.dim_IntList, g.ReduceSumOp), (aten.amax.default, g.ReduceMaxOp),
    (aten.amin.default, g.ReduceMinOp), (aten.mean.default, g.ReduceMeanOp), (aten.sum.default, g.ReduceSumOp),
]:
    HANDLERS[_op] = _reduce(_gop)


@handles(aten.linalg_vector_norm.default)
def _vector_norm(imp, node, args, kwargs):
    x = imp.b.cast(imp.value(args[0]), imp.out_dtype())
    order = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    dims = args[2] if len(args) > 2 else kwargs.get("dim")
    keep = args[3] if len(args) > 3 else kwargs.get("keepdim", False)
    rank = len(shape_of(x))
    dims = [dims] if isinstance(dims, int) else list(dims or range(rank))
    dims = [normalize_dim(d, rank) for d in dims]
    if order == 2:
        return imp.b.op(g.SqrtOp, [imp.b.reduce(g.ReduceSumOp, imp.b.op(g.MulOp, [x, x]), dims, keep)])
    if order == 1:
        return imp.b.reduce(g.ReduceSumOp, imp.b.op(g.AbsOp, [x]), dims, keep)
    if order == float("inf"):
        return imp.b.reduce(g.ReduceMaxOp, imp.b.op(g.AbsOp, [x]), dims, keep)
    raise Unsupported(f"op:aten.linalg_vector_norm with ord={order}")


@handles(aten.prod.dim_int)
def _prod(imp, node, args, kwargs):
    return _reduce(g.ReduceProdOp)(imp, node, [args[0], [args[1]], *args[2:]], kwargs)


@handles(aten.argmax.default, aten.argmin.default)
def _argreduce(imp, node, args, kwargs):
    x = imp.value(args[0])
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    op_type = g.ArgmaxOp if node.target == aten.argmax.default else g.ArgminOp
    if dim is None:
        x = imp.b.reshape(x, [int(np.prod(shape_of(x)))])
        dim = 0
    return imp.b.reduce(op_type, x, [dim], keep)


@handles(aten._softmax.default, aten.softmax.int)
def _softmax(imp, node, args, kwargs):
    return imp.b.op(g.SoftmaxOp, [imp.b.cast(imp.value(args[0]), imp.out_dtype())], axis=g.i64_attr(args[1]))


@handles(aten._log_softmax.default, aten.log_softmax.int)
def _log_softmax(imp, node, args, kwargs):
    return imp.b.op(g.LogSoftmaxOp, [imp.b.cast(imp.value(args[0]), imp.out_dtype())], axis=g.i64_attr(args[1]))


@handles(aten.scaled_dot_product_attention.default)
def _sdpa(imp, node, args, kwargs):
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    a = dict(zip(names, args))
    a.update(kwargs)
    q, k, v = imp.value(a["query"]), imp.value(a["key"]), imp.value(a["value"])
    if len(shape_of(q)) != 4:
        raise Unsupported(f"op:aten.scaled_dot_product_attention with rank-{len(shape_of(q))} inputs")
    mask = a.get("attn_mask")
    causal = bool(a.get("is_causal", False))
    sq, skv = shape_of(q)[2], shape_of(k)[2]
    props = {}
    if a.get("scale") is not None:
        props["scale"] = g.f64_attr(float(a["scale"]))
    mv = None
    if mask is not None:
        mv = imp.value(mask)
        if numpy_dtype_of(mv) != np.bool_:
            mv = imp.b.cast(mv, numpy_dtype_of(q))
    if causal and sq != skv:
        # torch aligns the causal mask to the top-left; graph.attention to the end.
        tri = np.tril(np.ones((sq, skv), dtype=np.bool_))
        cm = imp.b.constant(tri, name="causal_mask")
        if mv is None:
            mv = cm
        elif numpy_dtype_of(mv) == np.bool_:
            mv = imp.b.op(g.AndOp, [mv, cm])
        else:
            neg = imp.b.constant(np.where(tri, 0, -np.inf).astype(numpy_dtype_of(q)), name="causal_mask")
            mv = imp.b.op(g.AddOp, [mv, neg])
        causal = False
    return imp.b.op(g.AttentionOp, [q, k, v, mv], causal=g.bool_attr(causal), **props)


# -- structure -------------------------------------------------------------------


@handles(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(imp, node, args, kwargs):
    return imp.b.reshape(imp.value(args[0]), imp.out_shape())


@handles(aten.as_strided.default)
def _as_strided(imp, node, args, kwargs):
    """A strided view of a contiguous tensor (adaptive pooling's decompositions write one that
    is the tensor itself): element i of the view is the input's flat element offset + sum_k
    i_k * stride_k, so a reshape when those are 0, 1, 2, ..., else one graph.gather of the
    flattened input at those compile-time positions. The view reads the input's storage, which
    is its logical order only when the input is contiguous: a view of a view (a transpose's
    strides) is refused."""
    x, size, stride = args[0], [int(d) for d in args[1]], [int(d) for d in args[2]]
    offset = int(args[3]) if len(args) > 3 and args[3] is not None else int(kwargs.get("storage_offset") or 0)
    source = node.args[0]
    val = source.meta.get("val") if hasattr(source, "meta") else None
    if not isinstance(val, torch.Tensor) or not val.is_contiguous() or val.storage_offset() != 0:
        raise Unsupported("op:aten.as_strided of a non-contiguous tensor")
    xv = imp.value(x)
    numel = int(np.prod(shape_of(xv)))
    positions = np.full(size, offset, np.int64)
    for k, (d, s) in enumerate(zip(size, stride)):
        positions += (np.arange(d, dtype=np.int64) * s).reshape([d if j == k else 1 for j in range(len(size))])
    if positions.size and (positions.min() < 0 or positions.max() >= numel):
        raise Unsupported(f"op:aten.as_strided reading outside its input of {numel} elements")
    flat = imp.b.reshape(xv, (numel,))
    if np.array_equal(positions.reshape(-1), np.arange(positions.size)):
        return imp.b.reshape(flat, size)
    return imp.b.op(g.GatherOp, [flat, imp.b.constant(positions, name="as_strided_positions")], axis=g.i64_attr(0))


@handles(aten.permute.default)
def _permute(imp, node, args, kwargs):
    x = imp.value(args[0])
    rank = len(shape_of(x))
    return imp.b.transpose(x, [normalize_dim(p, rank) for p in args[1]])


@handles(aten.transpose.int)
def _transpose(imp, node, args, kwargs):
    x = imp.value(args[0])
    rank = len(shape_of(x))
    perm = list(range(rank))
    d0, d1 = normalize_dim(args[1], rank), normalize_dim(args[2], rank)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return imp.b.transpose(x, perm)


@handles(aten.t.default)
def _t(imp, node, args, kwargs):
    x = imp.value(args[0])
    if len(shape_of(x)) < 2:
        return x
    return imp.b.transpose(x, [1, 0])


@handles(aten.expand.default)
def _expand(imp, node, args, kwargs):
    return imp.b.broadcast(imp.value(args[0]), imp.out_shape())


@handles(aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _unsqueeze(imp, node, args, kwargs):
    return imp.b.reshape(imp.value(args[0]), imp.out_shape())


@handles(aten.slice.Tensor)
def _slice(imp, node, args, kwargs):
    x = imp.value(args[0])
    shape = shape_of(x)
    dim = normalize_dim(args[1] if len(args) > 1 else 0, len(shape))
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    end = args[3] if len(args) > 3 and args[3] is not None else shape[dim]
    step = args[4] if len(args) > 4 else 1
    start, end, _ = slice(start, end, step).indices(shape[dim])
    end = max(end, start)
    if (start, end, step) == (0, shape[dim], 1):
        return x
    return imp.b.slice_dim(x, dim, start, end, step)


@handles(aten.select.int)
def _select(imp, node, args, kwargs):
    x = imp.value(args[0])
    shape = shape_of(x)
    dim = normalize_dim(args[1], len(shape))
    i = args[2] % shape[dim]
    return imp.b.reshape(imp.b.slice_dim(x, dim, i, i + 1), imp.out_shape())


@handles(aten.split_with_sizes.default, aten.split.Tensor)
def _split(imp, node, args, kwargs):
    x = imp.value(args[0])
    shape = shape_of(x)
    dim = normalize_dim(args[2] if len(args) > 2 else kwargs.get("dim", 0), len(shape))
    sizes = args[1]
    if isinstance(sizes, int):
        sizes = [min(sizes, shape[dim] - s) for s in range(0, shape[dim], sizes)]
    outs, start = [], 0
    for s in sizes:
        outs.append(imp.b.slice_dim(x, dim, start, start + s))
        start += s
    return tuple(outs)


@handles(aten.unbind.int)
def _unbind(imp, node, args, kwargs):
    x = imp.value(args[0])
    shape = shape_of(x)
    dim = normalize_dim(args[1] if len(args) > 1 else 0, len(shape))
    rest = shape[:dim] + shape[dim + 1:]
    return tuple(imp.b.reshape(imp.b.slice_dim(x, dim, i, i + 1), rest) for i in range(shape[dim]))


@handles(aten.cat.default)
def _cat(imp, node, args, kwargs):
    dt = imp.out_dtype()
    vals = [imp.operand(t, dt) for t in args[0]]
    vals = [v for v in vals if 0 not in shape_of(v) or len(vals) == 1]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    if len(vals) == 1:
        return vals[0]
    return imp.b.op(g.ConcatOp, vals, axis=g.i64_attr(normalize_dim(dim, len(shape_of(vals[0])))))


@handles(aten.constant_pad_nd.default)
def _pad(imp, node, args, kwargs):
    x = imp.value(args[0])
    pad = list(args[1])
    value = args[2] if len(args) > 2 else 0.0
    rank = len(shape_of(x))
    before, after = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        d = rank - 1 - i
        before[d], after[d] = pad[2 * i], pad[2 * i + 1]
    if any(p < 0 for p in before + after):
        raise Unsupported("op:aten.constant_pad_nd with negative padding")
    return imp.b.op(g.PadOp, [x], pads=g.i64_array(before + after), value=g.f64_attr(float(value)))


@handles(aten.embedding.default)
def _embedding(imp, node, args, kwargs):
    return imp.b.op(g.GatherOp, [imp.value(args[0]), imp.value(args[1])], axis=g.i64_attr(0))


@handles(aten.index_select.default)
def _index_select(imp, node, args, kwargs):
    x = imp.value(args[0])
    return imp.b.op(g.GatherOp, [x, imp.value(args[2])], axis=g.i64_attr(normalize_dim(args[1], len(shape_of(x)))))


@handles(aten.index.Tensor)
def _index(imp, node, args, kwargs):
    """Advanced indexing with a contiguous block of index tensors: flatten the
    indexed dims into one and gather along it with the linearized index."""
    x = imp.value(args[0])
    shape = shape_of(x)
    idx = list(args[1])
    pos = [i for i, t in enumerate(idx) if t is not None]
    if not pos or pos != list(range(pos[0], pos[-1] + 1)):
        raise Unsupported("op:aten.index.Tensor with non-adjacent index tensors")
    p0, p1 = pos[0], pos[-1] + 1
    dims = shape[p0:p1]
    strides = [int(np.prod(dims[i + 1:])) for i in range(len(dims))]
    if all(isinstance(idx[i], KnownTensor) for i in pos):
        ts = [idx[i].tensor.to(torch.int64) for i in pos]
        ts = [torch.where(t < 0, t + d, t) for t, d in zip(ts, dims)]
        flat = sum(t * s for t, s in zip(ts, strides))
        flat = torch.broadcast_tensors(*([flat] + ts))[0]
        fv = imp.value(KnownTensor(flat.contiguous()))
    else:
        fv = None
        for i, s, d in zip(pos, strides, dims):
            t = imp.operand(idx[i], np.int64)
            t = imp.b.op(g.ModOp, [t, imp.b.constant(np.asarray(d, np.int64))])  # negative indices
            if s != 1:
                t = imp.b.op(g.MulOp, [t, imp.b.constant(np.asarray(s, np.int64))])
            fv = t if fv is None else imp.b.op(g.AddOp, [fv, t])
    xr = imp.b.reshape(x, (*shape[:p0], int(np.prod(dims)), *shape[p1:]))
    y = imp.b.op(g.GatherOp, [xr, fv], axis=g.i64_attr(p0))
    return imp.b.reshape(y, imp.out_shape())


@handles(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default)
def _full_like(imp, node, args, kwargs):
    val = node.meta["val"]
    if node.target == aten.full_like.default:
        fill = args[1]
    elif node.target == aten.ones_like.default:
        fill = 1
    else:
        fill = 0
    return KnownTensor(torch.full(tuple(val.shape), fill, dtype=val.dtype))


def _top_k_indices(imp, x: SSAValue, k: int, dim: int, largest: bool) -> tuple[SSAValue, int]:
    rank = len(shape_of(x))
    if rank == 0:
        raise Unsupported("a sort or top-k of a 0-d tensor")
    axis = dim % rank
    return imp.b.op(g.TopKOp, [x], k=g.i64_attr(k), axis=g.i64_attr(axis), largest=g.bool_attr(bool(largest))), axis


@handles(aten.topk.default)
def _topk(imp, node, args, kwargs):
    """(values, indices): graph.top_k's indices (the most extreme first, equal values in index
    order: one order torch.topk may return) and the values taken along `dim` at them."""
    x = imp.value(args[0])
    dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
    largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
    idx, axis = _top_k_indices(imp, x, int(args[1]), dim, largest)
    return (imp.b.take_along_axis(x, idx, axis), idx)


@handles(aten.sort.default, aten.sort.stable, aten.argsort.default, aten.argsort.stable)
def _sort(imp, node, args, kwargs):
    """torch.sort / argsort: graph.top_k of the whole axis (a stable sort, which every
    `stable` flag allows); sort's values taken along `dim` at the indices."""
    x = imp.value(args[0])
    if node.target in (aten.sort.stable, aten.argsort.stable):  # (self, *, stable, dim, descending)
        dim, descending = kwargs.get("dim", -1), kwargs.get("descending", False)
    else:  # (self, dim=-1, descending=False)
        dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
        descending = args[2] if len(args) > 2 else kwargs.get("descending", False)
    shape = shape_of(x)
    if not shape:
        raise Unsupported("a sort of a 0-d tensor")
    idx, axis = _top_k_indices(imp, x, shape[dim % len(shape)], dim, descending)
    if node.target in (aten.argsort.default, aten.argsort.stable):
        return idx
    return (imp.b.take_along_axis(x, idx, axis), idx)


@handles(aten.gather.default)
def _gather(imp, node, args, kwargs):
    """torch.gather(x, dim, index): x taken along `dim` at `index` (GraphBuilder.take_along_axis),
    x first cut to index's extent on the other dims (torch allows an index smaller there)."""
    if kwargs.get("sparse_grad"):
        raise Unsupported("gather with sparse_grad")
    x, idx = imp.value(args[0]), imp.value(args[2])
    xs, ish = shape_of(x), shape_of(idx)
    axis = int(args[1]) % max(len(xs), 1)
    ends = [ish[i] if i != axis else xs[i] for i in range(len(xs))]
    if ends != list(xs):
        x = imp.b.slice(x, [0] * len(xs), ends)
    return imp.b.take_along_axis(x, imp.b.cast(idx, np.dtype(np.int64)), axis)
