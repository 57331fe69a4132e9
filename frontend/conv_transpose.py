"""Transposed convolution (ONNX ConvTranspose, `aten.convolution(transposed=True)`) as graph ops
the compiler already lowers, shared by the ONNX and torch.export frontends.

A transposed convolution scatters each input pixel, times the kernel, into the output at
`stride` times its position. The same output is the ordinary stride-1 convolution of the
input with `stride - 1` zeros inserted between its pixels, padded by `dilation * (k - 1) - pad`
before and `dilation * (k - 1) - pad + output_padding` after (a crop where negative), with the
kernel flipped in space and its input and output channel axes swapped within each group:

    zeros inserted: x [N, C, H, W] -> reshape [N, C, H, 1, W, 1] -> graph.pad (s - 1 after the
                    unit axes) -> reshape [N, C, H*s, W*s] (the last s - 1 rows and columns are
                    zeros, which count towards the padding after)
    kernel:         w [C_in, C_out/g, kH, kW] -> [g, C_in/g, C_out/g, kH, kW] -> transpose
                    (0, 2, 1, 3, 4) -> [C_out, C_in/g, kH, kW] -> reversed in kH and kW
    graph.conv2d    stride 1, the transposed conv's dilation and groups, the padding above

The kernel's ops read only the weight, so graph constant folding (`graph-optimize`) makes them
a new weight at compile time. That conv multiplies s^2 times as many pixels as the transposed
conv needs (the inserted zeros). With a stride, dilation 1 and a kernel at least as large as the
stride, the output is instead split into its sH * sW phases (`_phases`): the output pixels of
one phase (row mod sH, column mod sW) all take the same taps of the flipped kernel (every s-th,
from an offset), so each phase is a stride-1 conv of the input itself with that sub-kernel;
the phases are concatenated and interleaved (reshape, transpose, reshape) and cropped. The MACs
are the transposed conv's own (up to the edges), at the cost of sH * sW smaller convs and one
interleaving copy.

The common upsampling of U-Nets, a kernel as large as its stride with no padding (2x2, stride
2), has one tap per output pixel: it is a 1x1 conv to C_out * sH * sW channels followed by a
depth-to-space (reshape [N, C_out, sH, sW, H, W], transpose to [N, C_out, H, sH, W, sW],
reshape), with no wasted MACs (`_kernel_as_large_as_stride`).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.frontend.builder import GraphBuilder


class ConvTransposeProblem(ValueError):
    """Parameters a transposed convolution cannot have (the frontends say which node)."""


def conv_transpose(b: GraphBuilder, x: SSAValue, w: SSAValue, bias: SSAValue | None,
                   strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int],
                   output_padding: Sequence[int], groups: int) -> SSAValue:
    """conv_transpose2d for a 1-D (x [N, C_in, L], made 2-D with H = 1) or 2-D input; pads as
    ONNX gives them: the begins of each spatial dim, then the ends."""
    rank = len(shape_of(x))
    if rank not in (3, 4):
        raise ConvTransposeProblem(f"{rank - 2}-D transposed convolution is not supported (1-D and 2-D only)")
    if rank == 4:
        return conv_transpose2d(b, x, w, bias, strides, pads, dilations, output_padding, groups)
    (n, c, length), ws = shape_of(x), shape_of(w)
    y = conv_transpose2d(b, b.reshape(x, (n, c, 1, length)), b.reshape(w, (ws[0], ws[1], 1, ws[2])), bias,
                         [1, *strides], [0, pads[0], 0, pads[1]], [1, *dilations], [0, *output_padding], groups)
    ys = shape_of(y)
    return b.reshape(y, (ys[0], ys[1], ys[3]))


def conv_transpose2d(b: GraphBuilder, x: SSAValue, w: SSAValue, bias: SSAValue | None,
                     strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int],
                     output_padding: Sequence[int], groups: int) -> SSAValue:
    """The transposed convolution of x [N, C_in, H, W] with w [C_in, C_out/groups, kH, kW]
    (+ bias [C_out]); pads = [top, left, bottom, right]; output [N, C_out, H_out, W_out] with
    H_out = (H - 1) sH - top - bottom + dH (kH - 1) + 1 + output_padding_H."""
    n, c_in, h, wd = shape_of(x)
    wc, c_out_group, kh, kw = shape_of(w)
    if groups < 1 or c_in % groups or wc != c_in:
        raise ConvTransposeProblem(f"the weight {list(shape_of(w))} does not match {c_in} input channels "
                                   f"in {groups} group(s) ([C_in, C_out/groups, kH, kW] expected)")
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or any(p < 0 for p in pads):
        raise ConvTransposeProblem(f"strides {list(strides)} and dilations {list(dilations)} must be "
                                   f"positive and pads {list(pads)} non-negative")
    if any(o < 0 for o in output_padding):
        raise ConvTransposeProblem(f"output_padding {list(output_padding)} must be non-negative")
    c_out = c_out_group * groups
    if (kh, kw) == tuple(strides) and not any(pads) and tuple(dilations) == (1, 1) \
            and not any(output_padding) and groups == 1:
        return _kernel_as_large_as_stride(b, x, w, bias)
    kernel = b.reshape(w, (groups, c_in // groups, c_out_group, kh, kw))
    kernel = b.transpose(kernel, (0, 2, 1, 3, 4))
    kernel = b.reshape(kernel, (c_out, c_in // groups, kh, kw))
    kernel = b.slice(kernel, [0, 0, kh - 1, kw - 1], [c_out, c_in // groups, -1, -1], [1, 1, -1, -1])

    sh, sw = strides
    if (sh > 1 or sw > 1) and tuple(dilations) == (1, 1) and kh >= sh and kw >= sw:
        out_size = [(size - 1) * s - p0 - p1 + k + o for size, s, p0, p1, k, o
                    in zip((h, wd), strides, pads[:2], pads[2:], (kh, kw), output_padding, strict=True)]
        if out_size[0] >= sh and out_size[1] >= sw:  # every phase has an output
            return _phases(b, x, kernel, bias, strides, pads[:2], out_size, groups)
    z = x
    if sh > 1 or sw > 1:
        z = b.reshape(x, (n, c_in, h, 1, wd, 1))
        z = b.op(g.PadOp, [z], pads=g.i64_array([0] * 9 + [sh - 1, 0, sw - 1]))
        z = b.reshape(z, (n, c_in, h * sh, wd * sw))
    # padding of the zero-inserted input; the s - 1 zeros after its last pixel are there already
    before = [d * (k - 1) - p for d, k, p in zip(dilations, (kh, kw), pads[:2], strict=True)]
    after = [d * (k - 1) - p + o - (s - 1)
             for d, k, p, o, s in zip(dilations, (kh, kw), pads[2:], output_padding, strides, strict=True)]
    size = list(shape_of(z)[2:])
    if any(v < 0 for v in before + after):  # more padding than the kernel reaches: a crop
        starts = [max(0, -v) for v in before]
        ends = [size[i] + min(0, after[i]) for i in range(2)]
        z = b.slice(z, [0, 0, *starts], [n, c_in, *ends])
        before, after = [max(0, v) for v in before], [max(0, v) for v in after]
    return b.op(g.Conv2dOp, [z, kernel, bias], stride=g.i64_array([1, 1]),
                padding=g.i64_array([before[0], before[1], after[0], after[1]]),
                dilation=g.i64_array(list(dilations)), groups=g.i64_attr(groups))


def _kernel_as_large_as_stride(b: GraphBuilder, x: SSAValue, w: SSAValue, bias: SSAValue | None) -> SSAValue:
    """A transposed conv whose kernel is its stride (no padding, dilation 1, one group): each
    input pixel writes its own sH x sW output block, so it is a 1x1 conv to every (channel,
    row, column) of the block and a depth-to-space."""
    n, c_in, h, wd = shape_of(x)
    _, c_out, sh, sw = shape_of(w)
    block = c_out * sh * sw
    kernel = b.reshape(b.transpose(b.reshape(w, (c_in, block)), (1, 0)), (block, c_in, 1, 1))
    if bias is not None:  # each channel's bias on each of its sH * sW block positions
        bias = b.reshape(b.broadcast(b.reshape(bias, (c_out, 1)), (c_out, sh * sw)), (block,))
    y = b.op(g.Conv2dOp, [x, kernel, bias], stride=g.i64_array([1, 1]), padding=g.i64_array([0, 0, 0, 0]),
             dilation=g.i64_array([1, 1]), groups=g.i64_attr(1))
    y = b.transpose(b.reshape(y, (n, c_out, sh, sw, h, wd)), (0, 1, 4, 2, 5, 3))
    return b.reshape(y, (n, c_out, h * sh, wd * sw))


def _phase_plan(size: int, k: int, s: int, pad: int, out: int) -> list[tuple[int, int, int, int, int]]:
    """Per output phase r (outputs r, r + s, ...) of one spatial dim: (first tap of the flipped
    kernel, input rows cropped before, zeros padded before, zeros padded after, outputs). Output
    o = s m + r of the zero-inserted form reads input row m + c + j with tap t0 + s j, where t0
    = (k - 1 - pad - r) mod s and c = (r + t0 - (k - 1 - pad)) / s."""
    plan = []
    for r in range(s):
        t0 = (k - 1 - pad - r) % s
        taps = len(range(t0, k, s))
        c = (r + t0 - (k - 1 - pad)) // s
        count = max(0, -(-(out - r) // s))
        last = count - 1 + c + taps - 1  # the last input row it reads
        plan.append((t0, max(0, c), max(0, -c), max(0, last - (size - 1)), count))
    return plan


def _phases(b: GraphBuilder, x: SSAValue, kernel: SSAValue, bias: SSAValue | None, strides: Sequence[int],
            pads_before: Sequence[int], out_size: Sequence[int], groups: int) -> SSAValue:
    """The transposed conv as one stride-1 conv per output phase (see the module docstring):
    `kernel` is the flipped, channel-swapped kernel [C_out, C_in/g, kH, kW]."""
    n, c_in, h, wd = shape_of(x)
    c_out, c_group, kh, kw = shape_of(kernel)
    sh, sw = strides
    rows = _phase_plan(h, kh, sh, pads_before[0], out_size[0])
    cols = _phase_plan(wd, kw, sw, pads_before[1], out_size[1])
    mh, mw = rows[0][4], cols[0][4]  # phase 0 has the most outputs
    phases = []
    for t0h, cut_h, before_h, after_h, count_h in rows:
        for t0w, cut_w, before_w, after_w, count_w in cols:
            sub = b.slice(kernel, [0, 0, t0h, t0w], [c_out, c_group, kh, kw], [1, 1, sh, sw])
            xi = b.slice(x, [0, 0, cut_h, cut_w], [n, c_in, h, wd]) if cut_h or cut_w else x
            y = b.op(g.Conv2dOp, [xi, sub, bias], stride=g.i64_array([1, 1]),
                     padding=g.i64_array([before_h, before_w, after_h, after_w]),
                     dilation=g.i64_array([1, 1]), groups=g.i64_attr(groups))
            yh, yw = shape_of(y)[2:]
            if (yh, yw) != (count_h, count_w):  # more input than this phase reads: fewer outputs
                y = b.slice(y, [0, 0, 0, 0], [n, c_out, count_h, count_w])
            if (count_h, count_w) != (mh, mw):  # past the output's end once interleaved: cropped
                y = b.op(g.PadOp, [y], pads=g.i64_array([0, 0, 0, 0, 0, 0, mh - count_h, mw - count_w]))
            phases.append(b.reshape(y, (n, c_out, 1, mh, mw)))
    y = b.op(g.ConcatOp, phases, axis=g.i64_attr(2)) if len(phases) > 1 else phases[0]
    y = b.transpose(b.reshape(y, (n, c_out, sh, sw, mh, mw)), (0, 1, 4, 2, 5, 3))
    y = b.reshape(y, (n, c_out, mh * sh, mw * sw))
    if (mh * sh, mw * sw) != tuple(out_size):
        y = b.slice(y, [0, 0, 0, 0], [n, c_out, *out_size])
    return y
