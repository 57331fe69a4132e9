"""Neural-network graph ops: matmul and linear, convolution and pooling, batch/layer/RMS
normalization, softmax."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence

from xdsl.dialects.builtin import I64, BoolAttr, DenseArrayBase, FloatAttr, IntegerAttr, TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, prop_def
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import element_type_of, format_shape, shape_of
from infer.dialects.graph.base import (
    bool_attr,
    broadcast_shapes,
    DYNAMIC,
    f64_attr,
    FUNCTIONAL,
    GraphOp,
    i64_array,
    i64_attr,
    i64_values,
    normalize_axis,
    require_float,
    require_rank,
    require_same_elem,
    Shape,
    TensorResultOp,
)


# --------------------------------------------------------------------------
# Linear algebra
# --------------------------------------------------------------------------


def matmul_shape(op_name: str, a: Shape, b: Shape, transpose_a: bool, transpose_b: bool) -> Shape:
    """numpy.matmul semantics (rank-1 promotion, batch broadcasting), optional transposes."""
    if not a or not b:
        raise VerifyException("operands must have rank >= 1 (scalars cannot be multiplied)")
    if (transpose_a and len(a) < 2) or (transpose_b and len(b) < 2):
        raise VerifyException("a transposed operand must have rank >= 2")
    if transpose_a:
        a = (*a[:-2], a[-1], a[-2])
    if transpose_b:
        b = (*b[:-2], b[-1], b[-2])
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    k_a, k_b = a2[-1], b2[-2]
    if DYNAMIC not in (k_a, k_b) and k_a != k_b:
        raise VerifyException(
            f"contraction dimensions differ: lhs {format_shape(a)} has K={k_a}, "
            f"rhs {format_shape(b)} has K={k_b}"
        )
    batch = broadcast_shapes(op_name, a2[:-2], b2[:-2])
    out = [*batch, a2[-2], b2[-1]]
    if len(b) == 1:
        out.pop(-1)
    if len(a) == 1:
        out.pop(-1 if len(b) == 1 else -2)
    return tuple(out)


@irdl_op_definition
class MatmulOp(TensorResultOp):
    """Batched matrix product, numpy.matmul semantics, with optional transposes of
    the last two dimensions of either operand."""

    name = "graph.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    transpose_a = prop_def(BoolAttr, default_value=bool_attr(False))
    transpose_b = prop_def(BoolAttr, default_value=bool_attr(False))
    assembly_format = "$lhs `,` $rhs " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = require_same_elem(self, [self.lhs, self.rhs])
        shape = matmul_shape(
            self.name, shape_of(self.lhs), shape_of(self.rhs),
            bool(self.transpose_a.value.data), bool(self.transpose_b.value.data),
        )
        return [TensorType(elem, shape)]


@irdl_op_definition
class LinearOp(TensorResultOp):
    """y = x @ W^T + b with W of shape [out, in] (torch.nn.Linear layout)."""

    name = "graph.linear"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    assembly_format = "$input `,` $weight (`,` $bias^)? " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        operands = [self.input, self.weight] + ([self.bias] if self.bias else [])
        elem = require_same_elem(self, operands)
        return [TensorType(elem, linear_shape(self, self.input, self.weight, self.bias))]


def linear_shape(op: GraphOp, input: SSAValue, weight: SSAValue, bias: SSAValue | None) -> Shape:
    """The result shape of x @ W^T (+ b) with W of shape [out, in] (linear, linear_integer)."""
    x = shape_of(input)
    w = require_rank(op, weight, "the weight [out, in]", [2])
    if not x:
        raise VerifyException("the input must have rank >= 1")
    if DYNAMIC not in (x[-1], w[1]) and x[-1] != w[1]:
        raise VerifyException(
            f"input features {x[-1]} (shape {format_shape(x)}) do not match "
            f"the weight's in-features {w[1]} (weight shape {format_shape(w)}, expected [out, in])"
        )
    if bias is not None and shape_of(bias) != (w[0],):
        raise VerifyException(
            f"bias must have shape {w[0]}, got {format_shape(shape_of(bias))}"
        )
    return (*x[:-1], w[0])


# --------------------------------------------------------------------------
# Convolution, pooling, normalization (CNN)
# --------------------------------------------------------------------------


def window_out(op_name: str, size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int, ceil_mode: bool = False) -> int:
    if size == DYNAMIC:
        return DYNAMIC
    span = dilation * (kernel - 1) + 1
    padded = size + pad_lo + pad_hi
    if padded < span:
        raise VerifyException(
            f"the window (kernel {kernel}, dilation {dilation}) is larger than the "
            f"padded input ({size} + padding {pad_lo}+{pad_hi})"
        )
    if ceil_mode:
        out = -(-(padded - span) // stride) + 1
        # the last window must start inside the input or left padding (PyTorch rule)
        if (out - 1) * stride >= size + pad_lo:
            out -= 1
        return out
    return (padded - span) // stride + 1


class WindowedOp(TensorResultOp, ABC):
    """Shared attributes of conv and pooling: 2-D stride, dilation and padding
    given as [top, left, bottom, right]."""

    stride = prop_def(DenseArrayBase, default_value=i64_array([1, 1]))
    padding = prop_def(DenseArrayBase, default_value=i64_array([0, 0, 0, 0]))
    dilation = prop_def(DenseArrayBase, default_value=i64_array([1, 1]))

    def _check_window_attrs(self) -> tuple[Shape, Shape, Shape]:
        stride, padding, dilation = i64_values(self.stride), i64_values(self.padding), i64_values(self.dilation)
        if len(stride) != 2 or any(s < 1 for s in stride):
            raise VerifyException(f"stride must be 2 positive integers, got {list(stride)}")
        if len(dilation) != 2 or any(d < 1 for d in dilation):
            raise VerifyException(f"dilation must be 2 positive integers, got {list(dilation)}")
        if len(padding) != 4 or any(p < 0 for p in padding):
            raise VerifyException(
                f"padding must be 4 non-negative integers [top, left, bottom, right], "
                f"got {list(padding)}"
            )
        return stride, padding, dilation

    def _spatial_out(self, hw: Shape, kernel: Shape, ceil_mode: bool = False) -> Shape:
        stride, padding, dilation = self._check_window_attrs()
        return tuple(
            window_out(self.name, hw[i], kernel[i], stride[i], padding[i], padding[i + 2], dilation[i], ceil_mode)
            for i in range(2)
        )

    def _conv_shape(self, input: SSAValue, weight: SSAValue, bias: SSAValue | None, groups: int) -> Shape:
        """The NCHW result shape (conv2d, conv2d_integer)."""
        n, c, h, w = require_rank(self, input, "the input (NCHW)", [4])
        o, ci, kh, kw = require_rank(self, weight, "the weight (OIHW)", [4])
        if groups < 1:
            raise VerifyException(f"groups must be >= 1, got {groups}")
        if c % groups or o % groups:
            raise VerifyException(
                f"input channels ({c}) and output channels ({o}) must both be "
                f"divisible by groups ({groups})"
            )
        if ci * groups != c:
            raise VerifyException(
                f"the weight expects {ci} input channels per group, but the input has "
                f"{c} channels in {groups} group(s) ({c // groups} per group)"
            )
        if bias is not None and shape_of(bias) != (o,):
            raise VerifyException(
                f"bias must have shape {o} (one per output channel), got "
                f"{format_shape(shape_of(bias))}"
            )
        oh, ow = self._spatial_out((h, w), (kh, kw))
        return (n, o, oh, ow)


@irdl_op_definition
class Conv2dOp(WindowedOp):
    """2-D convolution (cross-correlation) of NCHW input with OIHW weights; `groups`
    splits channels (groups == C for depthwise)."""

    name = "graph.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    groups = prop_def(IntegerAttr[I64], default_value=i64_attr(1))
    assembly_format = "$input `,` $weight (`,` $bias^)? " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        operands = [self.input, self.weight] + ([self.bias] if self.bias else [])
        elem = require_same_elem(self, operands)
        return [TensorType(elem, self._conv_shape(self.input, self.weight, self.bias, self.groups.value.data))]


class Pool2dOp(WindowedOp, ABC):
    input = operand_def(TensorType)
    kernel = prop_def(DenseArrayBase)
    ceil_mode = prop_def(BoolAttr, default_value=bool_attr(False))
    assembly_format = "$input " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        n, c, h, w = require_rank(self, self.input, "the input (NCHW)", [4])
        kernel = i64_values(self.kernel)
        if len(kernel) != 2 or any(k < 1 for k in kernel):
            raise VerifyException(f"kernel must be 2 positive integers, got {list(kernel)}")
        padding = i64_values(self.padding)
        if len(padding) == 4 and any(padding[i] > kernel[i % 2] // 2 for i in range(4)):
            raise VerifyException(
                f"padding {list(padding)} must be at most half the kernel {list(kernel)}"
            )
        oh, ow = self._spatial_out((h, w), kernel, bool(self.ceil_mode.value.data))
        return [TensorType(element_type_of(self.input), (n, c, oh, ow))]


@irdl_op_definition
class MaxPool2dOp(Pool2dOp):
    """Max over each window; padding never wins (acts as -inf)."""

    name = "graph.max_pool2d"


@irdl_op_definition
class AvgPool2dOp(Pool2dOp):
    """Mean over each window; `count_include_pad` chooses the divisor at the borders.
    With `ceil_mode`, the part of a window past the bottom/right padding never
    counts in the divisor (PyTorch's rule)."""

    name = "graph.avg_pool2d"
    count_include_pad = prop_def(BoolAttr, default_value=bool_attr(False))

    def infer_result_types(self) -> list[TensorType]:
        if i64_values(self.dilation) not in ((1, 1), ()):
            raise VerifyException("dilation is not supported for average pooling")
        return super().infer_result_types()


class GlobalPoolOp(TensorResultOp, ABC):
    input = operand_def(TensorType)
    assembly_format = "$input " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        shape = shape_of(self.input)
        if len(shape) < 3:
            raise VerifyException(
                f"the input must be N x C x spatial... (rank >= 3), got {format_shape(shape)}"
            )
        return [TensorType(element_type_of(self.input), (*shape[:2], *([1] * (len(shape) - 2))))]


@irdl_op_definition
class GlobalAvgPoolOp(GlobalPoolOp):
    """Mean over all spatial dimensions, kept as size-1 dims."""

    name = "graph.global_avg_pool"


@irdl_op_definition
class GlobalMaxPoolOp(GlobalPoolOp):
    """Max over all spatial dimensions, kept as size-1 dims."""

    name = "graph.global_max_pool"


@irdl_op_definition
class BatchNormOp(TensorResultOp):
    """Inference batch norm over dim 1: (x - mean) / sqrt(var + eps) * scale + bias."""

    name = "graph.batch_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    mean = operand_def(TensorType)
    var = operand_def(TensorType)
    epsilon = prop_def(FloatAttr, default_value=f64_attr(1e-5))
    assembly_format = "$input `,` $scale `,` $bias `,` $mean `,` $var " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        params = [self.scale, self.bias, self.mean, self.var]
        elem = require_same_elem(self, [self.input, *params])
        require_float(self, self.input, "the input")
        x = shape_of(self.input)
        if len(x) < 2:
            raise VerifyException(f"the input must have rank >= 2 (N x C x ...), got {format_shape(x)}")
        for what, p in zip(("scale", "bias", "mean", "var"), params, strict=True):
            if shape_of(p) != (x[1],):
                raise VerifyException(
                    f"{what} must have shape {x[1]} (one per channel), got {format_shape(shape_of(p))}"
                )
        if self.epsilon.value.data < 0:
            raise VerifyException("epsilon must be >= 0")
        return [TensorType(elem, x)]


class NormOp(TensorResultOp, ABC):
    """Normalization over the trailing dimensions starting at `axis`."""

    axis = prop_def(IntegerAttr[I64], default_value=i64_attr(-1))
    epsilon = prop_def(FloatAttr, default_value=f64_attr(1e-5))

    def _check(self, x: SSAValue, params: Sequence[tuple[str, SSAValue]]) -> TensorType:
        elem = require_same_elem(self, [x, *(p for _, p in params)])
        require_float(self, x, "the input")
        shape = shape_of(x)
        axis = normalize_axis(self.name, self.axis.value.data, len(shape))
        normalized = shape[axis:]
        for what, p in params:
            ps = shape_of(p)
            try:
                ok = broadcast_shapes(self.name, ps, normalized) == normalized
            except VerifyException:
                ok = False
            if not ok:
                raise VerifyException(
                    f"{what} of shape {format_shape(ps)} does not broadcast to the "
                    f"normalized shape {format_shape(normalized)}"
                )
        if self.epsilon.value.data < 0:
            raise VerifyException("epsilon must be >= 0")
        return TensorType(elem, shape)


@irdl_op_definition
class LayerNormOp(NormOp):
    """(x - mean) / sqrt(var + eps) * scale (+ bias), statistics over dims >= axis."""

    name = "graph.layer_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    assembly_format = "$input `,` $scale (`,` $bias^)? " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        params = [("scale", self.scale)] + ([("bias", self.bias)] if self.bias else [])
        return [self._check(self.input, params)]


@irdl_op_definition
class RmsNormOp(NormOp):
    """x / sqrt(mean(x^2) + eps) * scale, statistics over dims >= axis (Llama RMSNorm)."""

    name = "graph.rms_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    assembly_format = "$input `,` $scale " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        return [self._check(self.input, [("scale", self.scale)])]


class AxisOp(TensorResultOp, ABC):
    input = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64], default_value=i64_attr(-1))
    assembly_format = "$input " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        require_float(self, self.input, "the input")
        normalize_axis(self.name, self.axis.value.data, len(shape_of(self.input)))
        return [self.input.type]


@irdl_op_definition
class SoftmaxOp(AxisOp):
    """exp(x - max) / sum(exp(x - max)) along `axis`."""

    name = "graph.softmax"


@irdl_op_definition
class LogSoftmaxOp(AxisOp):
    """log(softmax(x)) along `axis`, computed stably."""

    name = "graph.log_softmax"
