"""ONNX handlers for recurrent layers: RNN, GRU and LSTM.

The input projection of every time step is one `graph.linear` ([seq.batch, input] times W, its
bias folded in); the recurrence is then one step of graph ops per time step (the hidden state's
product with R, the gates, the state update), in the direction's order, and the steps' hidden
states are concatenated into Y. The graph has no loop, so a recurrence is unrolled over time at
this level, as torch.export's own LSTM and GRU decompositions are: the program grows with the
sequence length. W, R, B and P must be initializers; sequence_lens, when given, must be
known at import time and equal the sequence length (variable lengths are refused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import numpy_dtype_of, shape_of
from infer.frontend.onnx_ops import NodeProblem, attribute, handler, input_name, is_float_dtype

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer

ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout")
_ACTIVATIONS: dict[str, type[g.GraphOp]] = {"sigmoid": g.SigmoidOp, "tanh": g.TanhOp, "relu": g.ReluOp}


class _Layer:
    """What one recurrent node shares across its directions and steps."""

    def __init__(self, imp: Importer, node: onnx.NodeProto, gates: int, default_activations: tuple[str, ...]):
        self.imp, self.b = imp, imp.b
        x = imp.value(node.input[0])
        if not is_float_dtype(numpy_dtype_of(x)) or len(shape_of(x)) != 3:
            raise NodeProblem(f"X must be a float tensor of rank 3, got {numpy_dtype_of(x)} {list(shape_of(x))}")
        self.layout = int(attribute(node, "layout", 0))
        if self.layout not in (0, 1):
            raise NodeProblem(f"layout = {self.layout} is not supported (0 or 1)")
        self.x = self.b.transpose(x, [1, 0, 2]) if self.layout else x  # [seq, batch, input]
        self.seq, self.batch, self.inputs = shape_of(self.x)
        self.dtype = numpy_dtype_of(x)
        direction = attribute(node, "direction", "forward") or "forward"
        direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        if direction not in ("forward", "reverse", "bidirectional"):
            raise NodeProblem(f"direction = {direction} is not supported (forward, reverse, bidirectional)")
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        self.w = self._weights(imp, node, 1, "W")
        self.r = self._weights(imp, node, 2, "R")
        dirs = len(self.directions)
        if self.w.shape[0] != dirs or self.w.shape[1] % gates:
            raise NodeProblem(f"W has shape {list(self.w.shape)}, not [{dirs}, {gates} x hidden_size, input_size]")
        self.hidden = self.w.shape[1] // gates
        if int(attribute(node, "hidden_size", self.hidden)) != self.hidden or self.r.shape != (dirs, gates * self.hidden, self.hidden):
            raise NodeProblem(f"R has shape {list(self.r.shape)} and hidden_size {attribute(node, 'hidden_size')}, "
                              f"not [{dirs}, {gates * self.hidden}, {self.hidden}]")
        self.bias = (self._weights(imp, node, 3, "B") if input_name(node, 3)
                     else np.zeros((dirs, 2 * gates * self.hidden), self.dtype))
        self._check_lengths(imp, node)
        names = attribute(node, "activations")
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in names] if names else list(default_activations) * dirs
        if attribute(node, "activation_alpha") or attribute(node, "activation_beta"):
            raise NodeProblem("activation_alpha / activation_beta are not supported (Sigmoid, Tanh, Relu only)")
        unknown = sorted({n for n in names if n.lower() not in _ACTIVATIONS})
        if unknown or len(names) != len(default_activations) * dirs:
            raise NodeProblem(f"activations {names} are not supported: {len(default_activations)} per direction of "
                              f"{', '.join(n.capitalize() for n in _ACTIVATIONS)}")
        per = len(default_activations)
        self.activations = [[self._activation(n) for n in names[d * per:(d + 1) * per]] for d in range(dirs)]
        clip = attribute(node, "clip")
        self.clip = None if clip is None else float(clip)

    def _weights(self, imp: Importer, node: onnx.NodeProto, index: int, what: str) -> np.ndarray:
        return np.asarray(imp.static(node.input[index], f"{what} (the {what} weights)")).astype(self.dtype)

    def _check_lengths(self, imp: Importer, node: onnx.NodeProto) -> None:
        name = input_name(node, 4)
        if not name:
            return
        lengths = np.asarray(imp.static(name, "sequence_lens")).reshape(-1)
        if lengths.size != self.batch or (lengths != self.seq).any():
            raise NodeProblem(f"sequence_lens {lengths.tolist()} are not all the sequence length {self.seq} "
                              "(variable lengths are not supported)")

    def _activation(self, name: str) -> Callable[[SSAValue], SSAValue]:
        op = _ACTIVATIONS[name.lower()]
        return lambda v: self.b.op(op, [v])

    def initial(self, node: onnx.NodeProto, index: int, d: int) -> SSAValue:
        """initial_h / initial_c of direction d as [batch, hidden] (zeros when not given)."""
        name = input_name(node, index)
        if not name:
            return self.b.constant(np.zeros((self.batch, self.hidden), self.dtype), name="initial_state")
        v = self.imp.value(name)
        if self.layout:
            v = self.b.transpose(v, [1, 0, 2])
        return self.b.reshape(self.b.slice_dim(v, 0, d, d + 1), (self.batch, self.hidden))

    def projections(self, d: int, gates: int, bias: np.ndarray) -> SSAValue:
        """X times W[d] plus `bias` for every step: [seq, batch, gates.hidden]."""
        flat = self.b.reshape(self.x, (self.seq * self.batch, self.inputs))
        w = self.b.weight("recurrent_w", np.ascontiguousarray(self.w[d]))
        y = self.b.op(g.LinearOp, [flat, w, self.b.constant(bias.astype(self.dtype), name="recurrent_b")])
        return self.b.reshape(y, (self.seq, self.batch, gates * self.hidden))

    def recurrent(self, h: SSAValue, d: int, rows: slice, bias: np.ndarray | None = None) -> SSAValue:
        """h [batch, hidden] times the rows of R[d] (transposed), plus `bias`."""
        w = self.b.weight("recurrent_r", np.ascontiguousarray(self.r[d][rows]))
        b = None if bias is None else self.b.constant(bias.astype(self.dtype), name="recurrent_rb")
        return self.b.op(g.LinearOp, [h, w, b])

    def step_input(self, projected: SSAValue, t: int) -> SSAValue:
        return self.b.reshape(self.b.slice_dim(projected, 0, t, t + 1), (self.batch, shape_of(projected)[2]))

    def gate(self, pre: SSAValue, k: int) -> SSAValue:
        """Gate k ([batch, hidden]) of a [batch, gates.hidden] pre-activation, clipped."""
        v = self.b.slice_dim(pre, 1, k * self.hidden, (k + 1) * self.hidden)
        if self.clip is not None:
            v = self.b.op(g.ClipOp, [v], min=g.f64_attr(-self.clip), max=g.f64_attr(self.clip))
        return v

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.b.op(g.AddOp, [a, b])

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.b.op(g.MulOp, [a, b])

    def order(self, d: int) -> range:
        return range(self.seq - 1, -1, -1) if self.directions[d] == "reverse" else range(self.seq)

    def outputs(self, node: onnx.NodeProto, per_direction: list[tuple[list[SSAValue], list[SSAValue]]]):
        """Y [seq, dirs, batch, hidden] and the last states [dirs, batch, hidden] (layout 1:
        [batch, seq, dirs, hidden] and [batch, dirs, hidden]) from each direction's states by
        time step and its last states."""
        ys, lasts = [], []
        for states, last in per_direction:
            ys.append(self.b.op(g.ConcatOp, [self.b.reshape(h, (1, 1, self.batch, self.hidden)) for h in states],
                                axis=g.i64_attr(0)))
            lasts.append([self.b.reshape(s, (1, self.batch, self.hidden)) for s in last])
        y = ys[0] if len(ys) == 1 else self.b.op(g.ConcatOp, ys, axis=g.i64_attr(1))
        finals = [lasts[0][k] if len(lasts) == 1 else self.b.op(g.ConcatOp, [lst[k] for lst in lasts], axis=g.i64_attr(0))
                  for k in range(len(lasts[0]))]
        if self.layout:
            y = self.b.transpose(y, [2, 0, 1, 3])
            finals = [self.b.transpose(f, [1, 0, 2]) for f in finals]
        return [y, *finals][:len(node.output)]


@handler("RNN", attrs=ATTRS)
def _rnn(imp: Importer, node: onnx.NodeProto):
    """H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""
    layer = _Layer(imp, node, 1, ("Tanh",))
    results = []
    for d in range(len(layer.directions)):
        projected = layer.projections(d, 1, layer.bias[d, :layer.hidden] + layer.bias[d, layer.hidden:])
        (f,) = layer.activations[d]
        h = layer.initial(node, 5, d)
        states: list[SSAValue | None] = [None] * layer.seq
        for t in layer.order(d):
            h = f(layer.gate(layer.add(layer.step_input(projected, t), layer.recurrent(h, d, slice(None))), 0))
            states[t] = h
        results.append((states, [h]))
    return layer.outputs(node, results)


@handler("GRU", attrs=(*ATTRS, "linear_before_reset"))
def _gru(imp: Importer, node: onnx.NodeProto):
    """Gates z, r, h: z = f(X Wz + H Rz + b), r = f(X Wr + H Rr + b), the candidate
    h~ = g(X Wh + (r * H) Rh + Rbh + Wbh) or, with linear_before_reset, g(X Wh + r * (H Rh +
    Rbh) + Wbh); H = (1 - z) * h~ + z * H."""
    layer = _Layer(imp, node, 3, ("Sigmoid", "Tanh"))
    before_reset = bool(attribute(node, "linear_before_reset", 0))
    hid = layer.hidden
    results = []
    for d in range(len(layer.directions)):
        wb, rb = layer.bias[d, :3 * hid], layer.bias[d, 3 * hid:]
        # z and r take both biases in the projection; h~ takes Wbh there and Rbh with its product
        projected = layer.projections(d, 3, np.concatenate([wb[:2 * hid] + rb[:2 * hid], wb[2 * hid:]]))
        f, g_act = layer.activations[d]
        h = layer.initial(node, 5, d)
        one = layer.b.scalar(1.0, h)
        states: list[SSAValue | None] = [None] * layer.seq
        for t in layer.order(d):
            x_t = layer.step_input(projected, t)
            zr = layer.add(layer.b.slice_dim(x_t, 1, 0, 2 * hid), layer.recurrent(h, d, slice(0, 2 * hid)))
            z, r = f(layer.gate(zr, 0)), f(layer.gate(zr, 1))
            x_h = layer.b.slice_dim(x_t, 1, 2 * hid, 3 * hid)
            if before_reset:
                candidate_pre = layer.add(x_h, layer.mul(r, layer.recurrent(h, d, slice(2 * hid, 3 * hid), rb[2 * hid:])))
            else:
                candidate_pre = layer.add(x_h, layer.recurrent(layer.mul(r, h), d, slice(2 * hid, 3 * hid), rb[2 * hid:]))
            candidate = g_act(layer.gate(candidate_pre, 0))
            h = layer.add(layer.mul(layer.b.op(g.SubOp, [one, z]), candidate), layer.mul(z, h))
            states[t] = h
        results.append((states, [h]))
    return layer.outputs(node, results)


@handler("LSTM", attrs=(*ATTRS, "input_forget"))
def _lstm(imp: Importer, node: onnx.NodeProto):
    """Gates i, o, f, c (ONNX's order): i = f(X Wi + H Ri + Pi * C + b), f likewise with Pf,
    c~ = g(X Wc + H Rc + b), C = f * C + i * c~, o = f(X Wo + H Ro + Po * C_new + b),
    H = o * h(C)."""
    if attribute(node, "input_forget", 0):
        raise NodeProblem("input_forget = 1 is not supported")
    layer = _Layer(imp, node, 4, ("Sigmoid", "Tanh", "Tanh"))
    hid = layer.hidden
    peepholes = None
    if input_name(node, 7):
        peepholes = np.asarray(imp.static(node.input[7], "P (the peephole weights)")).astype(layer.dtype)
        if peepholes.shape != (len(layer.directions), 3 * hid):
            raise NodeProblem(f"P has shape {list(peepholes.shape)}, not [{len(layer.directions)}, {3 * hid}]")
    results = []
    for d in range(len(layer.directions)):
        projected = layer.projections(d, 4, layer.bias[d, :4 * hid] + layer.bias[d, 4 * hid:])
        f, g_act, h_act = layer.activations[d]
        h, c = layer.initial(node, 5, d), layer.initial(node, 6, d)
        p_i = p_o = p_f = None
        if peepholes is not None:
            p_i, p_o, p_f = (layer.b.constant(peepholes[d, k * hid:(k + 1) * hid], name="peephole") for k in range(3))
        states: list[SSAValue | None] = [None] * layer.seq
        for t in layer.order(d):
            pre = layer.add(layer.step_input(projected, t), layer.recurrent(h, d, slice(None)))
            i_pre, o_pre, f_pre, c_pre = (layer.gate(pre, k) for k in range(4))
            if p_i is not None:
                i_pre, f_pre = layer.add(i_pre, layer.mul(p_i, c)), layer.add(f_pre, layer.mul(p_f, c))
            c = layer.add(layer.mul(f(f_pre), c), layer.mul(f(i_pre), g_act(c_pre)))
            if p_o is not None:
                o_pre = layer.add(o_pre, layer.mul(p_o, c))
            h = layer.mul(f(o_pre), h_act(c))
            states[t] = h
        results.append((states, [h, c]))
    return layer.outputs(node, results)
