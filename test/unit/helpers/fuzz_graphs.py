"""Random graph-level models for differential fuzzing (test_fuzz_differential.py).

A generated model is a `FuzzGraph`: plain data (a tuple of `Node`s, the outputs, a seed), so
its `repr` is the Python that rebuilds it: a failing example printed by hypothesis pastes
into a regression test as is. `build(fg)` turns it into a graph-level module with
`GraphBuilder` (result types from each op's own shape inference), `make_inputs(fg)` makes
its inputs; weights and inputs are drawn from numpy generators seeded by (fg.seed, node
index), so dropping a node while shrinking leaves the other nodes' data unchanged.

`graphs()` is the hypothesis strategy. It only generates what docs/tiling.md says the
compiler lowers (f32 models; integer inputs as gather indices, casts to f32 and attention
masks; softmax on the last axis; compile-time conv/linear weights, where conditions and
norm parameters; no log_softmax, no reduce_prod, no runtime where), with
odd and prime sizes, partial tiles of both configs, batch dims and permuted layouts, and
keeps every tensor small enough for the simulator (MAX_ELEMENTS, LARGE_ELEMENTS).

Node kinds: "input" (a function argument), "weight" (a tensor in the weight store),
"scalar" (a rank-0 graph.constant) and every graph op by its name without the `graph.`
prefix. `attrs` are the op's properties by name (tuples of ints -> i64 arrays, floats ->
f64, bools -> i1, ints -> i64, strings) plus `result` = (shape, dtype) for the ops whose
result type is their meaning (cast, reshape, broadcast).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from xdsl.dialects.builtin import IntegerType, StringAttr, TensorType
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_name, from_numpy_dtype
from infer.frontend.builder import GraphBuilder

MAX_ELEMENTS = 4096       # per tensor, most graphs: one simulated example well under a second
LARGE_ELEMENTS = 32768    # per tensor, one graph in LARGE_SHARE: several tiles of server's 128 x 128
LARGE_SHARE = 0.2
MAX_NODES = 7             # graph ops per model (guards and helper nodes not counted)
SMALL = (1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 20, 23, 31, 32, 33)  # first = what shrinking goes to
LARGE = (47, 48, 64, 65, 96, 127, 128, 129, 131, 200, 257)  # partial tiles of edge (16) and server (128)
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "i1": np.bool_, "i32": np.int32, "i64": np.int64}


@dataclass(frozen=True)
class Node:
    op: str
    args: tuple[int, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, name: str, default: Any = None) -> Any:
        return dict(self.attrs).get(name, default)


@dataclass(frozen=True)
class FuzzGraph:
    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]
    seed: int = 0

    def describe(self) -> str:
        """One line: the ops in order (for tables of findings)."""
        return " -> ".join(n.op for n in self.nodes if n.op not in ("input", "weight", "scalar"))


# --------------------------------------------------------------------------- data

def _rng(fg: FuzzGraph, index: int) -> np.random.Generator:
    return np.random.default_rng([fg.seed, index])


def weight_array(node: Node, rng: np.random.Generator) -> np.ndarray:
    """The data of a "weight" node: `dist` normal (x `scale`), positive (in [0.5, 1.5]),
    mask (booleans; `first_key`: index 0 of the last axis true), additive (0 where the mask
    would be true, else -1e4), index (ints in [lo, hi)), cos/sin (tables of random angles)."""
    shape = tuple(node.attr("shape"))
    dist = node.attr("dist", "normal")
    if dist == "normal":
        return (rng.standard_normal(shape) * node.attr("scale", 1.0)).astype(np.float32)
    if dist == "positive":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if dist in ("mask", "additive"):
        keep = rng.random(shape) < 0.7
        if node.attr("first_key") and shape:
            keep[..., 0] = True  # attention: every query row sees key 0 (causal or not)
        return keep if dist == "mask" else np.where(keep, 0.0, -1e4).astype(np.float32)
    if dist == "index":
        lo, hi = node.attr("range")
        return rng.integers(lo, hi, shape).astype(DTYPES[node.attr("dtype", "i64")])
    if dist in ("cos", "sin"):
        angles = np.random.default_rng(node.attr("angles_seed", 0)).uniform(-3.2, 3.2, shape)
        return (np.cos(angles) if dist == "cos" else np.sin(angles)).astype(np.float32)
    raise ValueError(f"unknown weight distribution {dist!r}")


def input_array(node: Node, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(node.attr("shape"))
    dtype = node.attr("dtype", "f32")
    if dtype == "f32":
        return rng.standard_normal(shape).astype(np.float32)
    lo, hi = node.attr("range")
    a = rng.integers(lo, hi, shape).astype(DTYPES[dtype])
    if node.attr("first_key") and shape:
        a[..., 0] = hi - 1  # a padding mask from ids: key 0 is never padding
    return a


def _perturbed(a: np.ndarray, relative: float, rng: np.random.Generator) -> np.ndarray:
    """Floats times (1 + relative * N(0, 1)); integers, booleans and masks unchanged."""
    if relative == 0.0 or a.dtype != np.float32:
        return a
    return (a * (1 + relative * rng.standard_normal(a.shape))).astype(np.float32)


def make_inputs(fg: FuzzGraph, perturb: float = 0.0) -> list[np.ndarray]:
    """The inputs of `fg`; `perturb` > 0: each float input perturbed by that relative noise."""
    return [_perturbed(input_array(n, _rng(fg, i)), perturb, np.random.default_rng([fg.seed, i, 1]))
            for i, n in enumerate(fg.nodes) if n.op == "input"]


# --------------------------------------------------------------------------- building

_OP_CLASSES: dict[str, type[g.GraphOp]] = {
    cls.name.removeprefix("graph."): cls
    for cls in vars(g).values()
    if isinstance(cls, type) and issubclass(cls, g.GraphOp) and isinstance(getattr(cls, "name", None), str)
}


def _property(value: Any):
    if isinstance(value, bool):
        return g.bool_attr(value)
    if isinstance(value, int):
        return g.i64_attr(value)
    if isinstance(value, float):
        return g.f64_attr(value)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, tuple):
        return g.i64_array(list(value))
    raise TypeError(f"no property for {value!r}")


def add_node(b: GraphBuilder, values: list[SSAValue], index: int, node: Node, fg_seed: int,
             perturb: float = 0.0) -> SSAValue:
    """Append `node` (the index-th) to the builder; returns its value. `perturb`: as make_inputs,
    for float weights."""
    rng = np.random.default_rng([fg_seed, index])
    if node.op == "input":
        return b.input(f"in{index}", node.attr("shape"), DTYPES[node.attr("dtype", "f32")])
    if node.op == "weight":
        data = weight_array(node, rng)
        if node.attr("dist", "normal") in ("normal", "positive", "cos", "sin"):
            data = _perturbed(data, perturb, np.random.default_rng([fg_seed, index, 1]))
        return b.weight(f"w{index}", data)
    if node.op == "scalar":
        return b.constant(np.array(node.attr("value"), np.float32))
    props = {k: _property(v) for k, v in node.attrs if k != "result"}
    result = node.attr("result")
    rtype = TensorType(from_numpy_dtype(DTYPES[result[1]]), list(result[0])) if result else None
    out = b.op(_OP_CLASSES[node.op], [values[a] for a in node.args], result_type=rtype, **props)
    cast_of_integers = node.op == "cast" and result and result[1] == "f32" and _is_integer(values[node.args[0]])
    if perturb and (cast_of_integers or (node.op in SUMS and str(out.type.get_element_type()) == "f32")):
        # floats made from integer inputs are data the compiled program rounds like any other
        # (an attention over cast ids), but the integers themselves cannot be perturbed: the
        # perturbation goes on the cast's result. A sum's elements are each rounded in the
        # program's own order (SUMS)
        shape = shape_of(out)
        noise = _perturbed(np.ones(shape, np.float32), perturb, np.random.default_rng([fg_seed, index, 1]))
        out = b.op(_OP_CLASSES["mul"], [out, b.weight(f"p{index}", noise)])
    return out


#: float sums the conditioning probe perturbs element by element: the program sums each output
#: element in an order of its own, so sums of equal terms can differ in their last bits from
#: element to element, which a layer norm of the row then scales by 1/sqrt(eps) (a mean of
#: equal rows: fuzz seed 71, bf16, 4.2e-4 where the reference is 0); perturbing the inputs
#: keeps such terms equal. An attention's output is a weighted mean over the keys, and the
#: program multiplies V at the matrix unit's operand precision (fp32: a bf16 hi and lo pair, 2^-17
#: of |V|): attention of equal rows minus its own input (fuzz seed 246, fp32, -2.7e-6 where the
#: reference is exactly 0 on both configs) did not move when only the inputs moved
SUMS = frozenset({"reduce_sum", "reduce_mean", "attention"})


def _is_integer(value: SSAValue) -> bool:
    ty = value.type
    return isinstance(ty, TensorType) and isinstance(ty.get_element_type(), IntegerType)


def build(fg: FuzzGraph, perturb: float = 0.0):
    """The graph-level module of `fg` (weights in its store); `perturb` as make_inputs."""
    b = GraphBuilder()
    values: list[SSAValue] = []
    for i, node in enumerate(fg.nodes):
        values.append(add_node(b, values, i, node, fg.seed, perturb))
    return b.finish([values[i] for i in fg.outputs], [f"out{i}" for i in fg.outputs])


# --------------------------------------------------------------------------- generation

def shape_of(v: SSAValue) -> tuple[int, ...]:
    ty = v.type
    assert isinstance(ty, TensorType)
    return tuple(ty.get_shape())


@dataclass
class Draft:
    """A graph being generated: the builder holds what the nodes so far build, so every
    choice sees the real shapes (from the ops' own shape inference)."""

    draw: Callable
    seed: int
    max_elements: int = MAX_ELEMENTS
    b: GraphBuilder = field(default_factory=GraphBuilder)
    values: list[SSAValue] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    runtime: list[bool] = field(default_factory=list)  # depends on an input (not folded away)
    exact: list[bool] = field(default_factory=list)    # computed exactly on both sides (EXACT_OPS)

    def add(self, op: str, args: Sequence[int] = (), runtime: bool | None = None, **attrs: Any) -> int:
        node = Node(op, tuple(args), tuple(sorted(attrs.items())))
        index = len(self.nodes)
        self.values.append(add_node(self.b, self.values, index, node, self.seed))
        self.nodes.append(node)
        if runtime is None:
            runtime = op == "input" or any(self.runtime[a] for a in args)
        self.runtime.append(runtime)
        self.exact.append(_is_exact(node, [self.nodes[a] for a in args]) and all(self.exact[a] for a in args))
        return index

    def fits(self, shape: Sequence[int]) -> bool:
        return 0 < math.prod(shape) <= self.max_elements

    def shape(self, i: int) -> tuple[int, ...]:
        return shape_of(self.values[i])

    def dtype(self, i: int) -> str:
        ty = self.values[i].type
        assert isinstance(ty, TensorType)
        return element_type_name(ty.get_element_type())

    def floats(self) -> list[int]:
        """Runtime f32 values, the ones ops can take as their main operand. Not rank-0 ones: a
        rank-0 runtime value as an operand that broadcasts is documented as unsupported."""
        return [i for i in range(len(self.nodes))
                if self.runtime[i] and self.dtype(i) == "f32" and self.shape(i)]

    # -- drawing helpers
    def pick(self, options: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def flag(self, p_true: float = 0.5) -> bool:
        # integers shrink to 0: False is the simple choice
        return self.draw(st.integers(0, 99)) < int(p_true * 100)

    def dim(self, large: float = 0.2, max_size: int | None = None) -> int:
        if self.max_elements > MAX_ELEMENTS:
            large = max(large, 0.5)
        pool = SMALL + LARGE if self.flag(large) else SMALL
        if max_size is not None:
            pool = tuple(d for d in pool if d <= max_size) or (1,)
        return self.pick(pool)

    def weight(self, shape: Sequence[int], dist: str = "normal", **attrs: Any) -> int:
        return self.add("weight", (), False, shape=tuple(shape), dist=dist, **attrs)

    def new_input(self, shape: Sequence[int], dtype: str = "f32", **attrs: Any) -> int:
        return self.add("input", (), True, shape=tuple(shape), dtype=dtype, **attrs)


# Ops whose compiled form computes exactly what the reference does (data movement, sign and
# max/min, the compile-time where, scaling by a power of two), whatever the precision.
EXACT_OPS = {"input", "weight", "scalar", "relu", "neg", "abs", "reshape", "transpose", "slice", "pad",
             "concat", "broadcast", "gather", "maximum", "minimum", "max_pool2d", "global_max_pool",
             "reduce_max", "reduce_min", "clip", "where", "cast"}


def _is_exact(node: Node, args: list[Node]) -> bool:
    if node.op == "mul":
        return any(a.op == "scalar" and math.log2(abs(a.attr("value")) or 3).is_integer() for a in args)
    return node.op in EXACT_OPS




def _shape(d: Draft, rank: int) -> tuple[int, ...]:
    """A shape of `rank` that fits the graph's element budget."""
    dims: list[int] = []
    for _ in range(rank):
        room = d.max_elements // max(1, math.prod(dims))
        dims.append(d.dim(max_size=max(1, room // 2) if len(dims) < rank - 1 else room))
    return tuple(dims)


def _broadcastable(d: Draft, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts onto `shape`: some dims 1, maybe fewer leading dims."""
    drop = d.draw(st.integers(0, len(shape))) if d.flag(0.3) else 0
    kept = shape[drop:]
    return tuple(1 if d.flag(0.3) else s for s in kept)


# Each family adds one op (and the operands it needs) on value x; returns the new value or
# None when x does not suit it. Families that need a rank check it themselves.

UNARY = ("relu", "neg", "abs", "exp", "tanh", "sigmoid", "silu", "gelu", "leaky_relu", "elu",
         "hard_sigmoid", "clip", "sqrt", "rsqrt", "reciprocal")
GUARDED = {"sqrt", "rsqrt", "reciprocal"}  # applied to |x| + c (c >= 0.5): no NaN/inf


def _positive(d: Draft, x: int) -> int:
    a = d.add("abs", (x,))
    c = d.add("scalar", value=d.pick((0.5, 1.0, 2.0)))
    return d.add("add", (a, c))


def fam_unary(d: Draft, x: int) -> int | None:
    op = d.pick(UNARY)
    if op in GUARDED:
        return d.add(op, (_positive(d, x),))
    if op == "exp":
        x = d.add("clip", (x,), min=-8.0, max=8.0) if d.flag(0.5) else x
        return d.add("exp", (x,))
    attrs: dict[str, Any] = {}
    if op == "gelu":
        attrs["approximate"] = d.pick(("none", "tanh"))
    elif op in ("leaky_relu", "elu"):
        attrs["alpha"] = d.pick((0.01, 0.2, 1.0))
    elif op == "hard_sigmoid":
        attrs.update(alpha=d.pick((0.2, 1 / 6)), beta=0.5)
    elif op == "clip":
        lo, hi = d.pick(((0.0, 6.0), (-1.0, 1.0), (-0.5, None), (None, 0.25)))
        if lo is not None:
            attrs["min"] = lo
        if hi is not None:
            attrs["max"] = hi
    return d.add(op, (x,), **attrs)


BINARY = ("add", "sub", "mul", "maximum", "minimum", "div", "pow")


def _partner(d: Draft, x: int) -> int:
    """A second operand for x: another runtime value that broadcasts with it, x itself, a
    new input, a weight of a broadcastable shape, or a scalar."""
    sx = d.shape(x)
    same = [i for i in d.floats() if i != x and _compatible(d, d.shape(i), sx)]
    kind = d.pick(("weight", "scalar", "value", "input", "self"))
    if kind == "value" and same:
        return d.pick(same)
    if kind == "scalar":
        return d.add("scalar", value=d.pick((0.5, -1.25, 3.0)))
    if kind == "self":
        return x
    shape = _broadcastable(d, sx)
    return d.new_input(shape) if kind == "input" else d.weight(shape)


def _compatible(d: Draft, a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        out = g.broadcast_shapes("fuzz", a, b)
    except Exception:
        return False
    return out == b and d.fits(out)


def fam_binary(d: Draft, x: int) -> int | None:
    op = d.pick(BINARY)
    if op == "pow":
        e = d.pick((2.0, 3.0, 1.0, 0.5, -1.0, -0.5))
        base = _positive(d, x) if e in (0.5, -1.0, -0.5) else x
        return d.add("pow", (base, d.add("scalar", value=e)))
    y = _partner(d, x)
    if op == "div":
        return d.add("div", (x, _positive(d, y)))  # a divisor away from zero
    if d.flag(0.25) and y != x:
        x, y = y, x  # the runtime value on the right
    return d.add(op, (x, y))


def fam_linear(d: Draft, x: int) -> int | None:
    sx = d.shape(x)
    if not sx:
        return None
    k = sx[-1]
    n = d.dim(large=0.2, max_size=max(1, d.max_elements // max(1, math.prod(sx[:-1]))))
    w = d.weight((n, k), scale=1 / math.sqrt(k))
    args = [x, w]
    if d.flag(0.6):
        args.append(d.weight((n,)))
    return d.add("linear", args)


def fam_matmul(d: Draft, x: int) -> int | None:
    sx = d.shape(x)
    if len(sx) < 2:
        return None
    *batch, m, k = sx
    kind = d.pick(("weight", "self", "input"))
    if kind == "self":  # x @ x^T
        if not d.fits((*batch, m, m)):
            return None
        return d.add("matmul", (x, x), transpose_b=True)
    n = d.dim(large=0.2, max_size=max(1, d.max_elements // max(1, math.prod((*batch, m)))))
    tb = d.flag(0.4)
    rb = tuple(batch) if kind == "input" and d.flag(0.5) else ()
    if rb and d.flag(0.3):  # batch dims broadcast in part ([1, B2] against [B1, B2])
        rb = tuple(1 if d.flag(0.5) else b for b in rb)
    shape = (*rb, n, k) if tb else (*rb, k, n)
    if kind == "input":
        y = d.new_input(shape)
    else:
        y = d.weight(shape, scale=1 / math.sqrt(k))
    return d.add("matmul", (x, y), transpose_b=tb)


def _rank4(d: Draft, x: int, image: bool = True) -> int:
    """x if it has rank 4, else x reshaped to rank 4 or a new rank-4 input (NCHW for conv and
    pooling: spatial dims of 3..33; [B, H, S, D] for attention)."""
    sx = d.shape(x)
    if len(sx) == 4:
        return x
    if d.flag(0.5) and len(sx) < 4:
        return d.add("reshape", (x,), result=((1,) * (4 - len(sx)) + sx, "f32"))
    if image:
        shape = (d.pick((1, 2)), d.dim(max_size=160), d.pick((3, 4, 5, 7, 8, 13, 16, 17, 33)),
                 d.pick((3, 4, 5, 7, 8, 13, 16, 17, 33)))
    else:
        shape = (d.pick((1, 2)), d.pick((1, 2, 4)), d.dim(max_size=64), d.pick((1, 2, 4, 8, 16, 17, 32, 64)))
    while not d.fits(shape):
        shape = (shape[0], max(1, shape[1] // 2), shape[2], shape[3])
        if shape[1] == 1 and not d.fits(shape):
            shape = (1, 1, shape[2], shape[3] // 2 or 1)
    return d.new_input(shape)


def fam_conv(d: Draft, x: int) -> int | None:
    x = _rank4(d, x)
    sx = d.shape(x)
    n, c, h, w = sx
    groups = d.pick([gr for gr in (1, c, 2, 3, 4) if gr <= c and c % gr == 0]) if d.flag(0.4) else 1
    per = d.pick((1, 2, 3)) if groups > 1 else 1
    o = groups * per if groups > 1 else d.dim(max_size=160)
    dil = (d.pick((1, 2)), d.pick((1, 2))) if d.flag(0.2) else (1, 1)
    kh, kw = d.pick((1, 2, 3, 5)), d.pick((1, 2, 3, 5))
    pads = tuple(d.draw(st.integers(0, max(0, k - 1))) if d.flag(0.5) else 0 for k in (kh, kw, kh, kw))
    eh, ew = dil[0] * (kh - 1) + 1, dil[1] * (kw - 1) + 1
    if h + pads[0] + pads[2] < eh or w + pads[1] + pads[3] < ew:
        return None
    stride = (d.pick((1, 2, 3)), d.pick((1, 2, 3))) if d.flag(0.35) else (1, 1)
    oh = (h + pads[0] + pads[2] - eh) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - ew) // stride[1] + 1
    if not d.fits((n, o, oh, ow)) or not d.fits((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3])):
        return None
    wt = d.weight((o, c // groups, kh, kw), scale=1 / math.sqrt(c // groups * kh * kw))
    args = [x, wt] + ([d.weight((o,))] if d.flag(0.6) else [])
    return d.add("conv2d", args, groups=groups, stride=stride, padding=pads, dilation=dil)


def fam_pool(d: Draft, x: int) -> int | None:
    x = _rank4(d, x)
    sx = d.shape(x)
    n, c, h, w = sx
    op = d.pick(("max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool"))
    if op.startswith("global"):
        return d.add(op, (x,))
    kh, kw = d.pick((1, 2, 3)), d.pick((1, 2, 3))
    pads = tuple(d.draw(st.integers(0, k // 2)) if d.flag(0.4) else 0 for k in (kh, kw, kh, kw))
    if h + pads[0] + pads[2] < kh or w + pads[1] + pads[3] < kw:
        return None
    stride = (d.pick((1, 2, 3)), d.pick((1, 2, 3))) if d.flag(0.6) else (kh, kw)
    attrs: dict[str, Any] = dict(kernel=(kh, kw), stride=stride, padding=pads, ceil_mode=d.flag(0.25))
    if op == "avg_pool2d":
        attrs["count_include_pad"] = d.flag(0.5)
    if not d.fits((n, c, h + pads[0] + pads[2] + stride[0], w + pads[1] + pads[3] + stride[1])):
        return None
    return d.add(op, (x,), **attrs)


def fam_norm(d: Draft, x: int) -> int | None:
    sx = d.shape(x)
    if not sx:
        return None
    op = d.pick(("layer_norm", "rms_norm", "batch_norm", "softmax"))
    if op == "softmax":
        return d.add("softmax", (x,), axis=d.pick((-1, len(sx) - 1)))
    if op == "batch_norm":
        if len(sx) < 2:
            return None
        c = sx[1]
        return d.add("batch_norm", (x, d.weight((c,)), d.weight((c,)), d.weight((c,)),
                                    d.weight((c,), "positive")), epsilon=1e-5)
    axis = d.draw(st.integers(-len(sx), -1)) if d.flag(0.3) else -1
    norm_shape = sx[axis:]
    args = [x, d.weight(norm_shape, "positive")]
    if op == "layer_norm" and d.flag(0.6):
        args.append(d.weight(norm_shape))
    return d.add(op, args, axis=axis, epsilon=d.pick((1e-5, 1e-6)))


def fam_attention(d: Draft, x: int) -> int | None:
    x = _rank4(d, x, image=False)
    sx = d.shape(x)
    b, hq, sq, dh = sx
    hkv = d.pick([h for h in (hq, 1, 2) if hq % h == 0])
    causal = d.flag(0.4)
    if d.flag(0.3) and hkv == hq:
        k = v = x
        skv = sq
    else:
        skv = d.dim(max_size=64)
        if causal and skv < sq:
            skv = sq
        dv = dh if d.flag(0.7) else d.dim(max_size=32)
        if not d.fits((b, hkv, skv, max(dh, dv))) or not d.fits((b, hq, sq, dv)):
            return None
        k = d.new_input((b, hkv, skv, dh))
        v = d.new_input((b, hkv, skv, dv))
    args = [x, k, v]
    mask = d.pick(("none", "bool", "additive", "runtime"))
    # A query row whose keys are all masked is a documented deviation (docs/tiling.md: the
    # mean of V, not the reference's zeros): every mask keeps key 0, which causal never hides.
    if mask == "bool":
        args.append(d.weight((1, 1, sq, skv) if d.flag(0.5) else (b, hq, sq, skv), "mask", first_key=True))
    elif mask == "additive":
        args.append(d.weight((1, 1, sq, skv), "additive", first_key=True))
    elif mask == "runtime":  # BERT-style padding mask from integer ids: ids != 0 attends
        ids = d.new_input((b, skv), d.pick(("i64", "i32")), range=(0, 3), first_key=True)
        r = d.add("reshape", (ids,), result=((b, 1, 1, skv), d.dtype(ids)))
        args.append(d.add("cast", (r,), result=((b, 1, 1, skv), "i1")))
    attrs: dict[str, Any] = {"causal": causal}
    if d.flag(0.3):
        attrs["scale"] = d.pick((0.125, 0.5, 1.0))
    return d.add("attention", args, **attrs)


def fam_layout(d: Draft, x: int) -> int | None:
    """transpose, reshape, slice, pad, concat, broadcast, channel shuffle."""
    sx = d.shape(x)
    op = d.pick(("transpose", "reshape", "slice", "pad", "concat", "broadcast", "shuffle"))
    r = len(sx)
    if op == "shuffle":  # ShuffleNet's channel shuffle: [N, g, C/g, H, W] -> [N, C/g, g, H, W]
        groups = [k for k in (2, 3, 4) if r == 4 and sx[1] % k == 0 and sx[1] > k]
        if not groups:
            return None
        k = d.pick(groups)
        n, c, h, w = sx
        a = d.add("reshape", (x,), result=((n, k, c // k, h, w), "f32"))
        t = d.add("transpose", (a,), perm=(0, 2, 1, 3, 4))
        return d.add("reshape", (t,), result=(sx, "f32"))
    if op == "transpose":
        if r < 2:
            return None
        perm = tuple(d.draw(st.permutations(range(r))))
        return d.add("transpose", (x,), perm=perm)
    if op == "reshape":
        return d.add("reshape", (x,), result=(_reshape_target(d, sx), "f32"))
    if op == "slice":
        if r == 0:
            return None
        starts, ends, steps = [], [], []
        for s in sx:
            step = d.pick((1, 1, 2, 3, -1, -2)) if d.flag(0.5) else 1
            a = d.draw(st.integers(0, s - 1))
            if step > 0:
                e = d.draw(st.integers(a + 1, s))
            else:
                e = d.draw(st.integers(-1, a - 1))
            starts.append(a)
            ends.append(e)
            steps.append(step)
        return d.add("slice", (x,), starts=tuple(starts), ends=tuple(ends), steps=tuple(steps))
    if op == "pad":
        if r == 0:
            return None
        pads = tuple(d.pick((0, 0, 1, 2, 3)) for _ in range(2 * r))
        out = tuple(s + pads[i] + pads[i + r] for i, s in enumerate(sx))
        if not d.fits(out):
            return None
        return d.add("pad", (x,), pads=pads, value=d.pick((0.0, -1.5, 2.0)))
    if op == "concat":
        if r == 0:
            return None
        axis = d.draw(st.integers(0, r - 1))
        parts = [x]
        for _ in range(d.pick((1, 1, 2))):
            shape = tuple(d.dim(max_size=16) if i == axis else s for i, s in enumerate(sx))
            kind = d.pick(("weight", "input", "self"))
            parts.append(x if kind == "self" else d.new_input(shape) if kind == "input" else d.weight(shape))
        total = sum(d.shape(p)[axis] for p in parts)
        if not d.fits(tuple(total if i == axis else s for i, s in enumerate(sx))):
            return None
        if d.flag(0.3):
            parts.reverse()
        return d.add("concat", parts, axis=d.pick((axis, axis - r)))
    # broadcast: dims of size 1 grow, maybe a new leading dim
    out = tuple(d.dim(max_size=16) if s == 1 and d.flag(0.7) else s for s in sx)
    if d.flag(0.4):
        out = (d.dim(max_size=8),) + out
    if not d.fits(out) or out == sx:
        return None
    return d.add("broadcast", (x,), result=(out, "f32"))


def _reshape_target(d: Draft, sx: tuple[int, ...]) -> tuple[int, ...]:
    n = math.prod(sx)
    how = d.pick(("flatten", "merge", "split", "unsqueeze", "rank4"))
    if how == "flatten" or len(sx) == 0:
        return (n,)
    if how == "merge" and len(sx) >= 2:
        i = d.draw(st.integers(0, len(sx) - 2))
        return sx[:i] + (sx[i] * sx[i + 1],) + sx[i + 2:]
    if how == "split":
        i = d.draw(st.integers(0, len(sx) - 1))
        f = [k for k in range(2, sx[i]) if sx[i] % k == 0]
        if f:
            k = d.pick(f)
            return sx[:i] + (k, sx[i] // k) + sx[i + 1:]
    if how == "rank4" and len(sx) < 4:
        return (1,) * (4 - len(sx)) + sx
    i = d.draw(st.integers(0, len(sx)))
    return sx[:i] + (1,) + sx[i:]


def fam_reduce(d: Draft, x: int) -> int | None:
    sx = d.shape(x)
    if not sx:
        return None
    op = d.pick(("reduce_sum", "reduce_mean", "reduce_max", "reduce_min"))
    axes = tuple(sorted(set(d.draw(st.lists(st.integers(0, len(sx) - 1), min_size=1, max_size=len(sx))))))
    if d.flag(0.2):
        axes = tuple(a - len(sx) for a in axes)
    return d.add(op, (x,), axes=axes, keepdims=d.flag(0.5))


def fam_cast(d: Draft, x: int) -> int | None:
    """f32 -> bf16 -> f32 or f32 -> i32 -> f32 (the round trips the compiler lowers), on values
    computed exactly: rounding is discontinuous, so the last-bit differences of a matmul or an
    exp would flip a rounding here and there and be magnified to a whole bf16 ulp or 1.0."""
    if not d.exact[x]:
        return None
    sx = d.shape(x)
    mid = d.pick(("bf16", "i32"))
    src = d.add("mul", (x, d.add("scalar", value=4.0))) if mid == "i32" and d.flag(0.7) else x
    c = d.add("cast", (src,), result=(sx, mid))
    return d.add("cast", (c,), result=(sx, "f32"))


def fam_where(d: Draft, x: int) -> int | None:
    sx = d.shape(x)
    cond = d.weight(_broadcastable(d, sx), "mask")
    y = _partner(d, x)
    if not _compatible(d, d.shape(y), sx):
        return None
    args = (cond, x, y) if d.flag(0.5) else (cond, y, x)
    return d.add("where", args)


def fam_rotary(d: Draft, x: int) -> int | None:
    sx = d.shape(x)
    if len(sx) < 2 or sx[-1] < 2:
        return None
    s, dd = sx[-2], sx[-1]
    rdim = d.pick([r for r in range(2, dd + 1, 2)])
    table = (s, rdim) if d.flag(0.6) else (1, s, rdim) if len(sx) >= 3 else (s, rdim)
    seed = d.draw(st.integers(0, 3))
    cos = d.weight(table, "cos", angles_seed=seed)
    sin = d.weight(table, "sin", angles_seed=seed)
    return d.add("rotary", (x, cos, sin), interleaved=d.flag(0.4))


def fam_gather(d: Draft, x: int) -> int | None:
    """Compile-time indices along any axis of x (at most 8 of them)."""
    sx = d.shape(x)
    if not sx:
        return None
    axis = d.draw(st.integers(0, len(sx) - 1))
    count = d.pick((1, 2, 3, 5, 8))
    out = sx[:axis] + (count,) + sx[axis + 1:]
    if not d.fits(out):
        return None
    idx = d.weight((count,), "index", range=(0, sx[axis]), dtype=d.pick(("i64", "i32")))
    return d.add("gather", (x, idx), axis=axis)


FAMILIES: dict[str, Callable[[Draft, int], int | None]] = {
    "unary": fam_unary, "binary": fam_binary, "linear": fam_linear, "matmul": fam_matmul,
    "conv": fam_conv, "pool": fam_pool, "norm": fam_norm, "attention": fam_attention,
    "layout": fam_layout, "reduce": fam_reduce, "cast": fam_cast, "where": fam_where,
    "rotary": fam_rotary, "gather": fam_gather,
}
# How often each family is drawn (hypothesis draws list positions about uniformly, and the
# first one when shrinking: the simplest family first).
WEIGHTS = {"unary": 2, "binary": 3, "linear": 2, "matmul": 2, "conv": 2, "pool": 2, "norm": 2,
           "attention": 1, "layout": 5, "reduce": 1, "cast": 1, "where": 1, "rotary": 1, "gather": 1}
FAMILY_DRAWS = [name for name in FAMILIES for _ in range(WEIGHTS[name])]


def _start(d: Draft) -> int:
    """The first runtime f32 value: an input of rank 1-4, or an embedding lookup / a cast
    of integer inputs."""
    how = d.pick(("input", "input", "embedding", "int_cast"))
    if how == "embedding":
        rows = d.dim(max_size=64)
        width = d.dim(large=0.2, max_size=256)
        ishape = (d.dim(max_size=16),) if d.flag(0.5) else (d.dim(max_size=4), d.dim(max_size=16))
        if not d.fits(ishape + (width,)):
            ishape = (1,)
        ids = d.new_input(ishape, d.pick(("i64", "i32")), range=(0, rows))
        table = d.weight((rows, width))
        return d.add("gather", (table, ids), axis=0)
    if how == "int_cast":
        # an integer input's cast to f32, used by anything (graph-fuse may put it in an
        # elementwise chain: test_integer_input_cast_then_elementwise)
        shape = _shape(d, d.draw(st.integers(1, 3)))
        ids = d.new_input(shape, d.pick(("i64", "i32")), range=d.pick(((-8, 8), (-1000, 1000))))
        x = d.add("cast", (ids,), result=(shape, "f32"))
        user = d.pick(("reduce_mean", "transpose", "linear", "any"))
        if user == "any":
            return x
        if user == "reduce_mean":
            return d.add("reduce_mean", (x,), axes=(len(shape) - 1,), keepdims=d.flag(0.5))
        if user == "transpose" and len(shape) >= 2:
            return d.add("transpose", (x,), perm=tuple(range(len(shape) - 2)) + (len(shape) - 1, len(shape) - 2))
        return d.add("linear", (x, d.weight((d.dim(max_size=64), shape[-1]), scale=0.01)))
    rank = d.pick((2, 4, 3, 1))
    return d.new_input(_shape(d, rank))


@st.composite
def graphs(draw, max_nodes: int = MAX_NODES) -> FuzzGraph:
    d = Draft(draw, draw(st.integers(0, 2**16)))
    if draw(st.integers(0, 99)) < int(LARGE_SHARE * 100):
        d.max_elements = LARGE_ELEMENTS
    produced = [_start(d)]
    steps = draw(st.integers(1, max_nodes))
    for _ in range(4 * steps):
        if len(produced) > steps:
            break
        family = draw(st.sampled_from(FAMILY_DRAWS))
        # mostly continue the latest value (chains fuse into kernels), sometimes branch
        candidates = d.floats()
        if not candidates:
            break
        latest = produced[-1] if produced[-1] in candidates else None
        x = latest if latest is not None and draw(st.integers(0, 3)) else draw(st.sampled_from(candidates))
        y = FAMILIES[family](d, x)
        if y is not None:
            produced.append(y)
    if d.nodes[produced[-1]].op == "input":
        produced.append(d.add("relu", (produced[-1],)))
    outputs = [produced[-1]]
    if draw(st.integers(0, 3)) == 0 and d.floats():  # more outputs: an intermediate (maybe used further), an input, a repeat
        outputs.append(draw(st.sampled_from(d.floats())))
    return FuzzGraph(tuple(d.nodes), tuple(outputs), d.seed)
