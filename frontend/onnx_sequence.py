"""ONNX sequence ops whose sequences are known at import time: a sequence is a Python list of
its tensors (graph values, or arrays known at import time), so every op on it is list work and
each tensor stays an ordinary value of the graph. torch.onnx writes `tensor.chunk` / `unbind`
as SplitToSequence + SequenceAt (Mamba's mixer through the TorchScript exporter).

Positions (SequenceAt, SequenceInsert, SequenceErase) must be known at import time; sequences
cannot be graph inputs or outputs (the graph dialect has no sequence type)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import numpy_dtype_of, shape_of
from infer.frontend.onnx_ops import NodeProblem, attribute, handler, input_name, normalize_axis

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer

Tensor = SSAValue | np.ndarray


class TensorSequence(list):
    """An ONNX sequence value: its tensors, in order (SSA values or arrays)."""


def _tensor(imp: Importer, name: str) -> Tensor:
    return imp.consts[name] if imp.is_const(name) else imp.value(name)


def _position(imp: Importer, node: onnx.NodeProto, index: int, length: int, insert: bool = False) -> int:
    """The static position input `index` of `node` in a sequence of `length` (negative from
    the end; an insert may also name the end itself)."""
    pos = int(np.asarray(imp.static(node.input[index], "the position")).reshape(()))
    top = length + 1 if insert else length
    if not -top <= pos < top:
        raise NodeProblem(f"position {pos} is outside the sequence of {length} tensor(s)")
    return pos + top if pos < 0 else pos


def _shape(x: Tensor) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, np.ndarray) else shape_of(x)


@handler("SequenceConstruct", fold=False)
def _construct(imp: Importer, node: onnx.NodeProto):
    items = TensorSequence(_tensor(imp, i) for i in node.input)
    dtypes = {np.dtype(x.dtype) if isinstance(x, np.ndarray) else numpy_dtype_of(x) for x in items}
    if len(dtypes) > 1:
        raise NodeProblem(f"the tensors have different element types ({', '.join(sorted(map(str, dtypes)))})")
    return [items]


@handler("SequenceEmpty", attrs=("dtype",), fold=False)
def _empty(imp: Importer, node: onnx.NodeProto):
    return [TensorSequence()]


@handler("SequenceAt", fold=False)
def _at(imp: Importer, node: onnx.NodeProto):
    seq = imp.sequence(node.input[0])
    return [seq[_position(imp, node, 1, len(seq))]]


@handler("SequenceLength", fold=False)
def _length(imp: Importer, node: onnx.NodeProto):
    return [np.asarray(len(imp.sequence(node.input[0])), np.int64)]


@handler("SequenceInsert", fold=False)
def _insert(imp: Importer, node: onnx.NodeProto):
    seq = TensorSequence(imp.sequence(node.input[0]))
    pos = _position(imp, node, 2, len(seq), insert=True) if input_name(node, 2) else len(seq)
    seq.insert(pos, _tensor(imp, node.input[1]))
    return [seq]


@handler("SequenceErase", fold=False)
def _erase(imp: Importer, node: onnx.NodeProto):
    seq = TensorSequence(imp.sequence(node.input[0]))
    if not seq:
        raise NodeProblem("erasing from an empty sequence")
    del seq[_position(imp, node, 1, len(seq)) if input_name(node, 1) else -1]
    return [seq]


@handler("SplitToSequence", attrs=("axis", "keepdims"), fold=False)
def _split_to_sequence(imp: Importer, node: onnx.NodeProto):
    """Pieces along `axis`: of the sizes `split` lists, of `split` elements each (the last
    one shorter), or of one element each (without split; `keepdims` = 0 drops that axis)."""
    x = _tensor(imp, node.input[0])
    shape = _shape(x)
    axis = normalize_axis(int(attribute(node, "axis", 0)), len(shape))
    n = shape[axis]
    keep = True
    if input_name(node, 1):
        split = np.asarray(imp.static(node.input[1], "split"), np.int64)
        if split.ndim == 0:
            step = int(split)
            if step < 1:
                raise NodeProblem(f"split {step} must be positive")
            sizes = [min(step, n - i) for i in range(0, n, step)]
        else:
            sizes = [int(s) for s in split]
            if any(s < 0 for s in sizes) or sum(sizes) != n:
                raise NodeProblem(f"split {sizes} must be non-negative sizes summing to the axis's {n}")
    else:
        sizes, keep = [1] * n, bool(attribute(node, "keepdims", 1))
    pieces, start = TensorSequence(), 0
    for size in sizes:
        if isinstance(x, np.ndarray):
            piece = np.take(x, range(start, start + size), axis=axis)
            pieces.append(piece if keep else np.squeeze(piece, axis))
        else:
            piece = imp.b.slice_dim(x, axis, start, start + size)
            pieces.append(piece if keep else imp.b.reshape(piece, shape[:axis] + shape[axis + 1:]))
        start += size
    return [pieces]


@handler("ConcatFromSequence", attrs=("axis", "new_axis"), fold=False)
def _concat_from_sequence(imp: Importer, node: onnx.NodeProto):
    """The tensors joined along `axis`, or stacked along a new axis there (`new_axis` = 1)."""
    seq = imp.sequence(node.input[0])
    if not seq:
        raise NodeProblem("concatenating an empty sequence")
    new_axis = bool(attribute(node, "new_axis", 0))
    rank = len(_shape(seq[0])) + (1 if new_axis else 0)
    axis = normalize_axis(int(attribute(node, "axis")), rank)
    if all(isinstance(x, np.ndarray) for x in seq):
        return [np.stack(seq, axis) if new_axis else np.concatenate(seq, axis)]
    values = [imp.b.constant(x) if isinstance(x, np.ndarray) else x for x in seq]
    if new_axis:
        values = [imp.b.reshape(v, shape_of(v)[:axis] + (1,) + shape_of(v)[axis:]) for v in values]
    if len(values) == 1:
        return [values[0]]
    return [imp.b.op(g.ConcatOp, values, axis=g.i64_attr(axis))]
