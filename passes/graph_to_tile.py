"""`graph-to-tile`: lower graph-level functions to the tile dialect.

    graph-to-tile{target=edge precision=fp32|bf16 overrides="" debug-tiling=false}

Each func.func becomes a destination-passing function on DRAM memrefs: its
tensor arguments become DRAM memrefs, each result becomes one more DRAM memref
argument marked `tile.output` (model names stay in `graph.name`), the function
returns nothing. Intermediates are `tile.alloc` in "dram" (offsets are left to
memory planning), weights are `tile.weight` ops on pre-packed copies added to the
module's weight store, and the module gets `tile.target`.

Kernel classes (see docs/tiling.md for the schemes and the cost model):
  matmul  graph.linear / graph.matmul (2-D and batched) + bias + elementwise epilogue
  conv    graph.conv2d (NCHW) as a sum over taps of strided window loads x weight blocks
  elementwise, pool, norm (layer/rms), softmax, attention (flash, online softmax),
  structure (reshape = view; transpose = DMA copies), and (passes/lower_data.py)
  slice, concat, broadcast, pad, where (compile-time condition), reductions,
  gather (runtime indices on axis 0: tile.gather_rows), rotary, attention masks,
  f32 -> bf16/i32 -> f32 casts.

Precision: the matrix unit takes bf16. `precision=bf16` rounds matmul inputs to
bf16 (fp32 accumulation); `precision=fp32` emulates fp32 products with three
bf16 passes (hi*hi + hi*lo + lo*hi): activations are split on the vector unit,
weights at compile time. Vector math is fp32.

Tile sizes come from the cost model in `infer.passes.tiling_cost`; each lowered
op gets a stable name `kernel<N>` (N counts lowered ops in program order), which
`overrides="kernel3=64x64x32,kernel5=8"` keys and `debug-tiling=true` prints.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    DictionaryAttr,
    Float32Type,
    FloatAttr,
    FunctionType,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
    bf16,
    f32,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.dtypes import dense_to_numpy, element_type_name
from infer.dialects.ir_io import IRError, describe_location
from infer.dialects.weights import weights_of
from infer.passes import tiling_cost as tc
from infer.target.hw import HardwareConfig, load_config

Index = int | SSAValue  # a tile origin: a compile-time int or an index value
NEG = -1.0e30  # "minus infinity" of masks and max pooling (finite: no inf - inf)


class LoweringError(IRError):
    pass


def _err(op: Operation, msg: str) -> LoweringError:
    return LoweringError(f"{describe_location(op)}: error: '{op.name}' op graph-to-tile: {msg}")


def local_bytes(a: t.AllocOp) -> int:
    """Bytes a local alloc takes in the memory plan (all its buffers; each rounded up to
    4 bytes so the planner's element alignment never pushes a fitting nest over)."""
    ty = a.buffer.type
    assert isinstance(ty, MemRefType)
    n = _prod(ty.get_shape()) * t.elem_bytes(a.buffer)
    return -(-n // 4) * 4 * a.buffers.value.data


def _shape(v: SSAValue) -> tuple[int, ...]:
    ty = v.type
    assert isinstance(ty, TensorType | MemRefType)
    return tuple(ty.get_shape())


def _prod(xs: Sequence[int]) -> int:
    return math.prod(xs) if xs else 1


# ----------------------------------------------------------------------------
# IR emission helpers
# ----------------------------------------------------------------------------


class Emitter:
    """Builds tile IR into one function body; constants are hoisted to its entry."""

    def __init__(self, block: Block):
        self.block = block
        self.ip = InsertPoint.at_end(block)
        self._consts: dict[int, SSAValue] = {}
        self.alloc_after: Operation | None = None  # local buffers go before the kernel's loops
        self._marker: Operation | None = None
        self.local_allocs: list[t.AllocOp] = []  # spad/acc allocs of the current kernel (stage)

    def hoist(self, op: Operation) -> Operation:
        """Insert at the function entry (constants, weights)."""
        first = self.block.first_op
        if first is None:
            self.block.add_op(op)
        else:
            self.block.insert_op_before(op, first)
        return op

    def begin_kernel(self) -> None:
        """Local buffers allocated from now on go here, before the kernel's loop nest."""
        marker = arith.ConstantOp(IntegerAttr(0, IndexType()))
        self.insert(marker)
        self.alloc_after = marker
        self._marker = marker
        self.local_allocs = []

    def end_kernel(self) -> None:
        self.alloc_after = None
        m = self._marker
        if m is not None and not m.result.uses:
            m.detach()
            m.erase()
        self._marker = None

    def insert(self, op: Operation) -> Operation:
        blk = self.ip.block
        if self.ip.insert_before is not None:
            blk.insert_op_before(op, self.ip.insert_before)
        else:
            blk.add_op(op)
        return op

    # -- index arithmetic (folded when static) --
    def c(self, v: int) -> SSAValue:
        if v not in self._consts:
            op = arith.ConstantOp(IntegerAttr(v, IndexType()))
            self.hoist(op)
            self._consts[v] = op.result
        return self._consts[v]

    def ix(self, v: Index) -> SSAValue:
        return self.c(v) if isinstance(v, int) else v

    def add(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return self.insert(arith.AddiOp(self.ix(a), self.ix(b))).results[0]

    def sub(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if isinstance(b, int) and b == 0:
            return a
        return self.insert(arith.SubiOp(self.ix(a), self.ix(b))).results[0]

    def mul(self, a: Index, k: int) -> Index:
        if isinstance(a, int):
            return a * k
        if k == 1:
            return a
        if k == 0:
            return 0
        return self.insert(arith.MuliOp(a, self.c(k))).results[0]

    # -- loops --
    def loop(self, lb: Index, ub: Index, step: int, body: Callable[[SSAValue], None]) -> None:
        blk = Block(arg_types=[IndexType()])
        op = scf.ForOp(self.ix(lb), self.ix(ub), self.c(step), [], Region(blk))
        self.insert(op)
        saved = self.ip
        self.ip = InsertPoint.at_end(blk)
        body(blk.args[0])
        self.insert(scf.YieldOp())
        self.ip = saved

    def tiles(self, extent: int, tile: int, body: Callable[[Index, int], None]) -> None:
        """body(origin, size) over [0, extent) in tiles: one scf.for over the full
        tiles (never unrolled) and the remainder tile after it, sizes static."""
        tile = max(1, min(tile, extent))
        full, rem = divmod(extent, tile)
        if full == 1:
            body(0, tile)
        elif full > 1:
            self.loop(0, full * tile, tile, lambda iv: body(iv, tile))
        if rem:
            body(full * tile, rem)

    def range(self, n: int, body: Callable[[Index], None]) -> None:
        if n == 1:
            body(0)
        elif n > 1:
            self.loop(0, n, 1, body)

    # -- tile ops --
    def alloc(self, shape: Sequence[int], elem: Attribute, space: str, buffers: int = 1) -> SSAValue:
        op = t.AllocOp(t.memref(shape, elem, space), buffers=buffers)
        if space != "dram":
            self.local_allocs.append(op)
        if space != "dram" and self.alloc_after is not None:
            self.alloc_after.parent_block().insert_op_after(op, self.alloc_after)
            self.alloc_after = op
            return op.results[0]
        return self.insert(op).results[0]

    def view(self, src: SSAValue, shape: Sequence[int]) -> SSAValue:
        ty = src.type
        assert isinstance(ty, MemRefType)
        if tuple(ty.get_shape()) == tuple(shape):
            return src
        out = MemRefType(ty.get_element_type(), list(shape), memory_space=ty.memory_space)
        return self.insert(t.ViewOp.build(operands=[src], result_types=[out])).results[0]

    def dma(self, src: SSAValue, si: Sequence[Index], dst: SSAValue, di: Sequence[Index],
            shape: Sequence[int], steps: Sequence[int] | None = None) -> None:
        props: dict[str, Attribute] = {"shape": t.i64_array(shape)}
        if steps is not None and any(s != 1 for s in steps):
            props["src_steps"] = t.i64_array(steps)
        self.insert(t.DmaOp.build(operands=[src, [self.ix(i) for i in si], dst, [self.ix(i) for i in di]],
                                  properties=props))

    def matmul(self, lhs: SSAValue, li: Sequence[Index], rhs: SSAValue, ri: Sequence[Index],
               acc: SSAValue, ai: Sequence[Index], m: int, k: int, n: int) -> None:
        self.insert(t.MatmulOp.build(
            operands=[lhs, [self.ix(i) for i in li], rhs, [self.ix(i) for i in ri], acc, [self.ix(i) for i in ai]],
            properties={"m": IntegerAttr(m, i64), "k": IntegerAttr(k, i64), "n": IntegerAttr(n, i64),
                        "accumulate": IntegerAttr(1, i1)}))

    def vec(self, op: str, dst: SSAValue, di: Sequence[Index], a: SSAValue, ai: Sequence[Index],
            rows: int, cols: int, b: SSAValue | None = None, bi: Sequence[Index] = (),
            bmode: str | None = None, imm: float | None = None) -> None:
        props: dict[str, Attribute] = {"op": StringAttr(op), "rows": IntegerAttr(rows, i64),
                                       "cols": IntegerAttr(cols, i64)}
        if bmode is not None:
            props["bmode"] = StringAttr(bmode)
        if imm is not None:
            props["imm"] = FloatAttr(float(np.float32(imm)), Float32Type())
        self.insert(t.VectorOp.build(
            operands=[dst, [self.ix(i) for i in di], a, [self.ix(i) for i in ai],
                      [b] if b is not None else [], [self.ix(i) for i in bi]],
            properties=props))

    def fill(self, dst: SSAValue, di: Sequence[Index], rows: int, cols: int, value: float) -> None:
        self.insert(t.FillOp.build(operands=[dst, [self.ix(i) for i in di]],
                                   properties={"rows": IntegerAttr(rows, i64), "cols": IntegerAttr(cols, i64),
                                               "value": FloatAttr(float(value), Float32Type())}))


# ----------------------------------------------------------------------------
def _tile_sizes(total: int, tile: int) -> list[int]:
    """The tile extents `em.tiles(total, tile, ...)` emits code for: the full tile and, when
    tile does not divide total, the remainder (each emission allocates its own buffers)."""
    tile = max(1, min(tile, total))
    return [tile] + ([total % tile] if total % tile else [])


# Operands of tile epilogues: how a tensor broadcasts onto an output tile
# ----------------------------------------------------------------------------


@dataclass
class TileFrame:
    """An output tile in a 3-group view of the output shape S = B + R + C:
    batch index `b` (over prod(B)), rows [r0, r0 + rows) of prod(R), columns
    [c0, c0 + cols) of prod(C)."""

    B: tuple[int, ...]
    R: tuple[int, ...]
    C: tuple[int, ...]
    b: Index
    r0: Index
    c0: Index
    rows: int
    cols: int

    @property
    def shape(self) -> tuple[int, ...]:
        return self.B + self.R + self.C


def classify(S_groups: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], T: Sequence[int]) -> tuple[bool, bool, bool] | None:
    """For each group: True = full (same as S), False = broadcast (all ones); None = other."""
    B, R, C = S_groups
    S = B + R + C
    if len(T) > len(S):
        return None
    T = (1,) * (len(S) - len(T)) + tuple(T)
    out = []
    pos = 0
    for grp in (B, R, C):
        seg = T[pos:pos + len(grp)]
        pos += len(grp)
        if tuple(seg) == tuple(grp):
            out.append(True)
        elif all(d == 1 for d in seg):
            out.append(False)
        else:
            return None
    return out[0], out[1], out[2]


# ----------------------------------------------------------------------------
# The lowering
# ----------------------------------------------------------------------------

UNARY_VEC = {"graph.relu": "relu", "graph.neg": "neg", "graph.abs": "abs", "graph.exp": "exp",
             "graph.sqrt": "sqrt", "graph.rsqrt": "rsqrt", "graph.reciprocal": "recip",
             "graph.tanh": "tanh", "graph.sigmoid": "sigmoid", "graph.silu": "silu"}
BINARY_VEC = {"graph.add": "add", "graph.sub": "sub", "graph.mul": "mul", "graph.maximum": "max",
              "graph.minimum": "min", "graph.div": "div"}
# Abramowitz & Stegun 7.1.26: erf(a) = 1 - t (p1 + t (p2 + ...)) e^{-a^2}, t = 1 / (1 + p a), |err| < 1.5e-7
_AS_P = 0.3275911
_AS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


@dataclass
class Ctx:
    hw: HardwareConfig
    precision: str
    overrides: dict[str, tuple[int, ...]]
    debug: bool
    module: ModuleOp
    counter: int = 0
    log: list[str] = field(default_factory=list)

    @property
    def passes(self) -> int:
        return 3 if self.precision == "fp32" else 1


class FunctionLowering:
    def __init__(self, ctx: Ctx, fn: func.FuncOp):
        self.ctx = ctx
        self.hw = ctx.hw
        self.fn = fn
        self.store = weights_of(ctx.module)
        self.vmap: dict[SSAValue, SSAValue] = {}  # tensor -> DRAM memref
        self.consts: dict[SSAValue, np.ndarray] = {}
        self.dest: dict[SSAValue, SSAValue] = {}  # tensor -> output memref to write into
        self.weight_cache: dict[tuple, SSAValue] = {}
        self.fused: set[Operation] = set()
        self._keep: list[np.ndarray] = []
        self._cur_op: Operation = fn  # the op being lowered (error locations)
        self._last_name: str | None = None
        self.masks: set[SSAValue] = set()  # i1 attention masks held as additive f32 buffers

    # -- constants --------------------------------------------------------
    def const(self, v: SSAValue) -> np.ndarray | None:
        """The compile-time value of v (weights, constants, ops of those), or None."""
        if v in self.consts:
            return self.consts[v]
        op = v.owner
        val: np.ndarray | None = None
        if isinstance(op, g.WeightOp):
            val = np.asarray(self.store.get(op.weight_key))
        elif isinstance(op, g.ConstantOp):
            val = dense_to_numpy(op.value)
        elif isinstance(op, g.GraphOp) and not isinstance(op, g.KernelOp) and op.operands and isinstance(v.type, TensorType):
            ins = [self.const(o) for o in op.operands]
            if all(x is not None for x in ins) and _prod(_shape(v)) <= (1 << 26):
                from infer.dialects.graph_interpreter import evaluate_op

                val = evaluate_op(op, ins, self.store)[list(op.results).index(v)]
        if val is not None:
            self.consts[v] = val
        return val

    def weight(self, hint: str, array: np.ndarray, elem: Attribute) -> SSAValue:
        key = (hint, id(array), array.shape, str(elem))
        if key not in self.weight_cache:
            self._keep.append(array)  # the cache keys on id(array): keep it alive
            if element_type_name(elem) == "bf16":
                import ml_dtypes

                arr = np.ascontiguousarray(array.astype(ml_dtypes.bfloat16))
            elif element_type_name(elem) == "i32":
                arr = np.ascontiguousarray(np.asarray(array, dtype=np.int32))
            else:
                arr = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
            name = self.store.add(hint, arr)
            self.weight_cache[key] = self.em.hoist(
                t.WeightOp(name, t.memref(arr.shape, elem, "dram"))).results[0]
        return self.weight_cache[key]

    def buf(self, v: SSAValue) -> SSAValue:
        """The DRAM memref holding tensor v (constants become weights on first use)."""
        if v in self.vmap:
            return self.vmap[v]
        c = self.const(v)
        if c is None:
            raise _err(v.owner if isinstance(v.owner, Operation) else self.fn, "value has no buffer")
        shape = _shape(v)
        if isinstance(v.owner, g.WeightOp) and c.dtype == np.float32 and c.shape == shape:
            op = t.WeightOp(v.owner.weight_key, t.memref(shape, f32, "dram"))
            self.vmap[v] = self.em.hoist(op).results[0]
            return self.vmap[v]
        hint = v.owner.weight_key if isinstance(v.owner, g.WeightOp) else "const"
        arr = np.broadcast_to(c, shape).astype(np.float32)
        self.vmap[v] = self.weight(hint, np.ascontiguousarray(arr), f32)
        return self.vmap[v]

    def out_buf(self, v: SSAValue) -> SSAValue:
        if v in self.dest:
            buf = self.dest[v]
        else:
            buf = self.em.alloc(_shape(v), f32, "dram")
        self.vmap[v] = buf
        return buf

    def name(self) -> str:
        n = f"kernel{self.ctx.counter}"
        self.ctx.counter += 1
        self._last_name = n
        return n

    # -- local-memory budget -------------------------------------------------
    @contextlib.contextmanager
    def stage(self, op: Operation | None = None, what: str = "") -> Iterator[None]:
        """One loop nest (a kernel, or a helper nest of it such as a padded copy): its
        local buffers are allocated before the nest and are all live together, and no
        buffer outlives it. On exit the buffers are summed per memory and checked
        against the target's capacities: a kernel whose own tiling does not fit is a
        located error (a cost-model bug, never left to the memory planner)."""
        em = self.em
        saved = (em.alloc_after, em._marker, em.local_allocs, self._cur_op, self._last_name)
        if op is not None:
            self._cur_op = op
        self._last_name = None
        em.begin_kernel()
        ok = False
        try:
            yield
            ok = True
        finally:
            allocs = em.local_allocs
            kernel = self._last_name or f"kernel{self.ctx.counter}"
            where = self._cur_op
            em.end_kernel()
            em.alloc_after, em._marker, em.local_allocs = saved[:3]
            self._cur_op, self._last_name = saved[3], saved[4] or self._last_name
        if ok:
            self.check_local(allocs, where, kernel + (f" ({what})" if what else ""))

    def check_local(self, allocs: Sequence[t.AllocOp], op: Operation, kernel: str) -> None:
        caps = {"spad": ("scratchpad", self.hw.memory.scratchpad_bytes),
                "acc": ("accumulator", self.hw.memory.accumulator_bytes)}
        for space, (what, cap) in caps.items():
            bufs = [a for a in allocs if t.space_of(a.buffer) == space]
            sizes = [local_bytes(a) for a in bufs]
            need = sum(sizes)
            if need <= cap:
                continue
            top = sorted(zip(sizes, bufs), key=lambda p: -p[0])[:4]
            listing = ", ".join(f"{sz} B {a.buffer.type}" + (" x2" if a.buffers.value.data == 2 else "")
                                for sz, a in top)
            raise _err(op, f"{kernel}: the local buffers of its loop nest need {need} bytes of {what} but "
                       f"target '{self.hw.name}' holds {cap} bytes (the chosen tiles do not fit: a tiling "
                       f"cost-model bug unless they come from an override); largest: {listing}")

    def override(self, name: str, n: int) -> tuple[int, ...] | None:
        o = self.ctx.overrides.get(name)
        if o is not None and len(o) != n:
            raise LoweringError(f"error: graph-to-tile: override for {name} needs {n} sizes, got {len(o)}")
        return o

    def debug(self, text: str) -> None:
        if self.ctx.debug:
            print(text, file=sys.stderr)
        self.ctx.log.append(text)

    # -- driver -----------------------------------------------------------
    def run(self) -> func.FuncOp:
        fn = self.fn
        ftype = fn.function_type
        old_args = list(fn.body.block.args)
        in_types = []
        host_dtypes: dict[int, str] = {}
        for i, ty in enumerate(list(ftype.inputs.data) + list(ftype.outputs.data)):
            ename = element_type_name(ty.get_element_type()) if isinstance(ty, TensorType) else ""
            ok = ename == "f32"
            if (not ok and i < len(old_args) and ename in _ld.INDEX_TYPES
                    and _ld.int_input_ok(self, old_args[i])):
                ok = True  # integer inputs: gather indices, casts to f32, attention masks
            if not ok:
                raise _err(fn, f"only f32 tensor arguments and results are supported (and i32/i64 "
                           f"arguments that feed gather indices, casts to f32 or attention masks), got {ty}")
            if i < len(old_args):
                elem = ty.get_element_type()
                if ename == "i64" and not _ld.index_source(self, old_args[i]):
                    # narrowed: DRAM holds int32 for the vector unit, the runtime converts (range-checked);
                    # i64 arguments that only feed gathers stay i64 (gather_rows reads the low word)
                    from xdsl.dialects.builtin import i32

                    elem = i32
                    host_dtypes[i] = "i64"
                in_types.append(t.memref(_shape_t(ty), elem, "dram"))
        out_types = [t.memref(_shape_t(ty), f32, "dram") for ty in ftype.outputs.data]
        block = Block(arg_types=in_types + out_types)
        self.em = Emitter(block)
        old = fn.body.block
        for a, na in zip(old.args, block.args[:len(in_types)], strict=True):
            self.vmap[a] = na
        ret = old.last_op
        assert isinstance(ret, func.ReturnOp)
        outs = list(block.args[len(in_types):])
        pending_copies: list[tuple[SSAValue, SSAValue]] = []
        for v, o in zip(ret.arguments, outs, strict=True):
            if v in self.dest or v in self.vmap or self.const(v) is not None:
                pending_copies.append((v, o))
            else:
                self.dest[v] = o
        for op in list(old.ops):
            if op is ret or op in self.fused:
                continue
            if all(self.const(r) is not None for r in op.results) and op.results:
                continue  # folded at compile time, materialized on use
            self.lower_op(op)
        for v, o in pending_copies:
            with self.stage(ret, "result copy"):
                self.copy(self.buf(v), o, _shape(v))
        for i, op in enumerate(old.ops):  # per-layer check (runtime/check.py): the DRAM buffer of op #i
            b = self.vmap.get(op.results[0]) if op.results else None
            while b is not None and isinstance(b.owner, t.ViewOp):
                b = b.owner.source
            if b is not None and isinstance(b.owner, t.AllocOp) and t.LAYER_ATTR not in b.owner.attributes:
                b.owner.attributes[t.LAYER_ATTR] = IntegerAttr(i, i64)
        # function attributes
        arg_attrs = []
        old_arg_attrs = list(fn.arg_attrs.data) if fn.arg_attrs is not None else [DictionaryAttr({})] * len(in_types)
        for i, a in enumerate(old_arg_attrs):
            if i in host_dtypes:
                a = DictionaryAttr({**a.data, "tile.host_dtype": StringAttr(host_dtypes[i])})
            arg_attrs.append(a)
        old_res = list(fn.res_attrs.data) if fn.res_attrs is not None else [DictionaryAttr({})] * len(out_types)
        for i, r in enumerate(old_res):
            d = dict(r.data)
            d.setdefault("graph.name", StringAttr(f"output{i}" if len(old_res) > 1 else "output"))
            d["tile.output"] = UnitAttr()
            arg_attrs.append(DictionaryAttr(d))
        self.em.insert(func.ReturnOp())
        new = func.FuncOp(fn.sym_name.data, FunctionType.from_lists(in_types + out_types, []),
                          Region(block), fn.sym_visibility)
        from xdsl.dialects.builtin import ArrayAttr

        new.arg_attrs = ArrayAttr(arg_attrs)
        return new

    # -- dispatch -----------------------------------------------------------
    def lower_op(self, op: Operation) -> None:
        with self.stage(op):
            self._lower_op(op)

    def _lower_op(self, op: Operation) -> None:
        if _ld.runtime_int_op(self, op):
            _ld.lower_runtime_int(self, op)
            return
        if isinstance(op, g.KernelOp):
            self.lower_kernel(op)
            return
        if isinstance(op, g.CastOp | g.ReshapeOp) and _ld._is_int_index(op.results[0]) and \
                _ld.index_source(self, op.results[0]):
            _ld.lower_index_passthrough(self, op)
            return
        if _ld.inner_round_trip_cast(op):
            return  # lowered with the cast back to f32
        if _ld.outer_round_trip_cast(op):
            _ld.lower_cast_round_trip(self, op)
            return
        for r in op.results:
            if not isinstance(r.type, TensorType) or element_type_name(r.type.get_element_type()) != "f32":
                raise _err(op, f"only f32 tensors are supported, got {r.type}")
        if isinstance(op, g.LinearOp | g.MatmulOp):
            epi = self.fusable_chain(op)
            self.lower_gemm(op, epi, (epi[-1] if epi else op).results[0], {})
        elif isinstance(op, g.Conv2dOp):
            epi = self.fusable_chain(op)
            self.lower_conv(op, epi, (epi[-1] if epi else op).results[0], {})
        elif isinstance(op, g.BatchNormOp):
            self.lower_batch_norm(op)
        elif isinstance(op, (g.UnaryOp, g.BinaryOp, g.WhereOp)) and op.name not in _UNSUPPORTED_EW:
            self.lower_elementwise([op], op.results[0], {})
        elif isinstance(op, g.ReshapeOp):
            self.vmap[op.output] = self.em.view(self.buf(op.input), _shape(op.output))
            if op.output in self.dest:
                self.copy(self.vmap[op.output], self.dest[op.output], _shape(op.output))
        else:
            lower = _OTHER.get(op.name)
            if lower is None:
                raise _err(op, "this op has no tile lowering (supported: linear, matmul, conv2d, "
                           "elementwise, where, pooling, batch/layer/rms norm, softmax, attention, reshape, "
                           "transpose, slice, concat, broadcast, pad, reduce_sum/mean/max/min, gather, "
                           "rotary)")
            lower(self, op)

    def fusable_chain(self, anchor: Operation) -> list[Operation]:
        """Elementwise ops that only consume the anchor's result (a chain of single
        uses, same shape, other operands already available): fused as the epilogue."""
        chain: list[Operation] = []
        v = anchor.results[0]
        while len(list(v.uses)) == 1:
            user = next(iter(v.uses)).operation
            if not isinstance(user, g.UnaryOp | g.BinaryOp) or user.name in _UNSUPPORTED_EW:
                break
            if isinstance(user, g.BinaryOp) and user.name == "graph.pow":
                break
            if _shape(user.results[0]) != _shape(v) or user.parent_block() is not anchor.parent_block():
                break
            others = [o for o in user.operands if o is not v]
            if not all(o in self.vmap or self.const(o) is not None for o in others):
                break
            if v in self.dest:
                break
            chain.append(user)
            v = user.results[0]
        self.fused.update(chain)
        return chain

    def lower_kernel(self, k: g.KernelOp) -> None:
        block = k.body.block
        env: dict[SSAValue, SSAValue] = dict(zip(block.args, k.inputs, strict=True))
        yield_op = k.yield_op
        assert yield_op is not None
        anchor = k.anchor()
        ops = [o for o in block.ops if o is not yield_op]
        # constants inside the region are plain constants
        for o in ops:
            if isinstance(o, g.ConstantOp):
                self.consts[o.output] = dense_to_numpy(o.value)
        ops = [o for o in ops if not isinstance(o, g.ConstantOp)]
        for a, v in env.items():
            if v in self.vmap:
                self.vmap[a] = self.vmap[v]
            if v in self.masks:
                self.masks.add(a)
            c = self.const(v)
            if c is not None:
                self.consts[a] = c
        if len(yield_op.values) != 1:
            raise _err(k, "kernels with several results are not supported yet")
        res = yield_op.values[0]
        if k.outputs[0] in self.dest:
            self.dest[res] = self.dest[k.outputs[0]]
        if anchor is None and any(_ld.inner_round_trip_cast(o) or _ld.outer_round_trip_cast(o) for o in ops):
            for o in ops:  # cast round trips have their own kernel: lower the region op by op
                self.lower_op(o)
        elif anchor is None:
            self.lower_elementwise(ops, res, {})
        else:
            epi = [o for o in ops if o is not anchor]
            ai = ops.index(anchor)
            if ai != 0 and any(o in ops[:ai] for o in ops):
                # ops before the anchor feed it: lower them standalone first
                for o in ops[:ai]:
                    self.lower_op(o)
                epi = ops[ai + 1:]
            if isinstance(anchor, g.LinearOp | g.MatmulOp):
                self.lower_gemm(anchor, epi, res, {})
            elif isinstance(anchor, g.Conv2dOp):
                self.lower_conv(anchor, epi, res, {})
            else:
                self.lower_op(anchor)
                for o in epi:
                    self.lower_op(o)
        self.vmap[k.outputs[0]] = self.vmap[res]

    # -- copies ------------------------------------------------------------
    def copy(self, src: SSAValue, dst: SSAValue, shape: Sequence[int]) -> None:
        n = _prod(shape)
        cols = shape[-1] if shape else 1
        rows = n // cols
        s2, d2 = self.em.view(src, (rows, cols)), self.em.view(dst, (rows, cols))
        tr = max(1, min(rows, (self.hw.memory.scratchpad_bytes // 4) // (cols * 4 * 2)))
        if tr < 1 or cols * 4 > self.hw.memory.scratchpad_bytes // 4:
            s2, d2 = self.em.view(src, (n, 1)), self.em.view(dst, (n, 1))
            rows, cols, tr = n, 1, min(n, self.hw.memory.scratchpad_bytes // 16)
        buf = self.em.alloc((tr, cols), f32, "spad", 2)
        self.em.tiles(rows, tr, lambda r0, r: (self.em.dma(s2, [r0, 0], buf, [0, 0], [r, cols]),
                                               self.em.dma(buf, [0, 0], d2, [r0, 0], [r, cols])))

    # -- epilogues ---------------------------------------------------------
    def load_operand(self, v: SSAValue, frame: TileFrame, op: Operation) -> tuple[str, object]:
        """Bring tensor v onto the tile: ("imm", float) | (bmode, local buffer)."""
        c = self.const(v)
        if c is not None and c.size == 1:
            return "imm", float(c.reshape(()))
        cls = classify((frame.B, frame.R, frame.C), _shape(v))
        if cls is None:
            raise _err(op, f"operand of shape {_shape(v)} broadcasts onto the output "
                       f"{frame.shape} in a way the tile lowering does not support")
        if not cls[1] and not cls[2]:
            raise _err(op, "a runtime scalar operand is not supported (only compile-time scalars)")
        return self._load_buf(self.buf(v), _shape(v), frame, op)

    def _load_buf(self, src: SSAValue, shape: tuple[int, ...], frame: TileFrame, op: Operation) -> tuple[str, object]:
        cls = classify((frame.B, frame.R, frame.C), shape)
        assert cls is not None
        fb, fr, fcl = cls
        assert fr or fcl
        nb = _prod(frame.B) if fb else 1
        R, C = _prod(frame.R), _prod(frame.C)
        b = frame.b if fb else 0
        if fr and fcl:
            view = self.em.view(src, (nb * R, C))
            loc = self.em.alloc((frame.rows, frame.cols), f32, "spad", 2)
            self.em.dma(view, [self.em.add(self.em.mul(b, R), frame.r0), frame.c0], loc, [0, 0], [frame.rows, frame.cols])
            return "tile", loc
        if fcl:  # row vector
            view = self.em.view(src, (nb, C))
            loc = self.em.alloc((1, frame.cols), f32, "spad", 2)
            self.em.dma(view, [b, frame.c0], loc, [0, 0], [1, frame.cols])
            return "row", loc
        view = self.em.view(src, (nb * R, 1))
        loc = self.em.alloc((frame.rows, 1), f32, "spad", 2)
        self.em.dma(view, [self.em.add(self.em.mul(b, R), frame.r0), 0], loc, [0, 0], [frame.rows, 1])
        return "col", loc

    def epilogue(self, ops: Sequence[Operation], tiles: dict[SSAValue, SSAValue], frame: TileFrame,
                 result: SSAValue) -> SSAValue:
        """Apply elementwise ops to local tiles; `tiles` maps tensors already on the
        tile (the anchor's result) to [rows x cols] fp32 local buffers at [0, 0]."""
        em, rows, cols = self.em, frame.rows, frame.cols

        def operand(v: SSAValue, op: Operation) -> tuple[str, object]:
            if v in tiles:
                return "tile", tiles[v]
            return self.load_operand(v, frame, op)

        def new_tile() -> SSAValue:
            return em.alloc((rows, cols), f32, "spad", 2)

        for op in ops:
            out = op.results[0]
            if _shape(out) != frame.shape:
                raise _err(op, f"result {_shape(out)} is not the kernel's output shape {frame.shape}")
            dst = new_tile()
            z = [0, 0]
            if isinstance(op, g.WhereOp):
                self._where(op, dst, frame, operand)
            elif op.name in UNARY_VEC or isinstance(op, g.UnaryOp):
                kind, x = operand(op.operands[0], op)
                if kind != "tile":  # broadcast operand: materialize it on the tile
                    x = self._bcast_tile(kind, x, frame)
                self._unary(op, dst, x, rows, cols)
            elif isinstance(op, g.BinaryOp):
                ka, a = operand(op.lhs, op)
                kb, b = operand(op.rhs, op)
                name = BINARY_VEC.get(op.name)
                if name is None:
                    if op.name == "graph.pow" and kb == "imm" and b in (2.0, 0.5, 1.0, -1.0, -0.5, 3.0):
                        if ka != "tile":
                            a = self._bcast_tile(ka, a, frame)
                        self._pow(dst, a, b, rows, cols)
                        tiles[out] = dst
                        continue
                    raise _err(op, "this elementwise op has no vector-unit lowering")
                if ka != "tile":
                    if name in ("add", "mul", "max", "min"):
                        ka, a, kb, b = kb, b, ka, a
                    else:
                        a = self._bcast_tile(ka, a, frame)
                        ka = "tile"
                if ka != "tile":
                    a = self._bcast_tile(ka, a, frame)
                if name == "div":
                    if kb == "imm":
                        em.vec("mul", dst, z, a, z, rows, cols, bmode="imm", imm=1.0 / b)
                    else:
                        shp = {"tile": (rows, cols), "row": (1, cols), "col": (rows, 1)}[kb]
                        rb = em.alloc(shp, f32, "spad", 2)
                        em.vec("recip", rb, z, b, z, *shp)
                        em.vec("mul", dst, z, a, z, rows, cols, rb, z, bmode=kb)
                elif kb == "imm":
                    em.vec(name, dst, z, a, z, rows, cols, bmode="imm", imm=b)
                else:
                    em.vec(name, dst, z, a, z, rows, cols, b, z, bmode=kb)
            else:
                raise _err(op, "only elementwise unary/binary ops can follow a kernel's anchor")
            tiles[out] = dst
        if result not in tiles:
            kind, x = operand(result, ops[-1] if ops else result.owner)
            return self._bcast_tile(kind, x, frame)
        return tiles[result]

    def _where(self, op: g.WhereOp, dst: SSAValue, frame: TileFrame, operand) -> None:
        """where(c, x, y) with a compile-time condition: x*c + y*(1-c) on the tile
        (exact for finite values); a compile-time branch is masked at compile time."""
        em, rows, cols, z = self.em, frame.rows, frame.cols, [0, 0]
        c = self.const(op.condition)
        if c is None:
            raise _err(op, "where needs a compile-time condition (runtime i1 tensors are not lowered)")
        cb = np.asarray(c).astype(np.bool_)
        terms: list[SSAValue] = []
        for v, mask in ((op.lhs, cb), (op.rhs, ~cb)):
            if not mask.any():
                continue
            cv = self.const(v)
            if cv is not None:  # the masked branch is a constant: fold it
                arr = np.where(mask, np.asarray(cv, np.float32), np.float32(0)).astype(np.float32)
                terms.append(self._bcast_tile(*self.load_array(arr, frame, op), frame))
                continue
            kind, x = operand(v, op)
            x = self._bcast_tile(kind, x, frame)
            if mask.all():
                terms.append(x)
                continue
            mk, mb = self.load_array(mask.astype(np.float32), frame, op)
            tt = em.alloc((rows, cols), f32, "spad", 2)
            em.vec("mul", tt, z, x, z, rows, cols, mb, z, bmode=mk)
            terms.append(tt)
        if not terms:
            em.fill(dst, z, rows, cols, 0.0)
        elif len(terms) == 1:
            em.vec("copy", dst, z, terms[0], z, rows, cols)
        else:
            em.vec("add", dst, z, terms[0], z, rows, cols, terms[1], z, bmode="tile")

    def load_array(self, arr: np.ndarray, frame: TileFrame, op: Operation) -> tuple[str, object]:
        """A compile-time array onto the tile: ("imm", float) | (bmode, local buffer)."""
        if arr.size == 1:
            return "imm", float(arr.reshape(()))
        cls = classify((frame.B, frame.R, frame.C), tuple(arr.shape))
        if cls is None or not (cls[1] or cls[2]):
            arr = np.broadcast_to(arr, frame.shape)
        return self._load_buf(self.weight("const", np.ascontiguousarray(arr, np.float32), f32),
                              tuple(arr.shape), frame, op)

    def _bcast_tile(self, kind: str, x: object, frame: TileFrame) -> SSAValue:
        em, rows, cols = self.em, frame.rows, frame.cols
        if kind == "tile":
            return x  # type: ignore[return-value]
        dst = em.alloc((rows, cols), f32, "spad", 2)
        em.fill(dst, [0, 0], rows, cols, 0.0)
        if kind == "imm":
            em.vec("add", dst, [0, 0], dst, [0, 0], rows, cols, bmode="imm", imm=x)  # type: ignore[arg-type]
        else:
            em.vec("add", dst, [0, 0], dst, [0, 0], rows, cols, x, [0, 0], bmode=kind)  # type: ignore[arg-type]
        return dst

    def _pow(self, dst, a, p, rows, cols):
        em, z = self.em, [0, 0]
        if p == 2.0:
            em.vec("mul", dst, z, a, z, rows, cols, a, z, bmode="tile")
        elif p == 3.0:
            em.vec("mul", dst, z, a, z, rows, cols, a, z, bmode="tile")
            em.vec("mul", dst, z, dst, z, rows, cols, a, z, bmode="tile")
        elif p == 0.5:
            em.vec("sqrt", dst, z, a, z, rows, cols)
        elif p == -0.5:
            em.vec("rsqrt", dst, z, a, z, rows, cols)
        elif p == -1.0:
            em.vec("recip", dst, z, a, z, rows, cols)
        else:
            em.vec("copy", dst, z, a, z, rows, cols)

    def _unary(self, op: Operation, dst: SSAValue, x: SSAValue, rows: int, cols: int) -> None:
        em, z = self.em, [0, 0]
        name = op.name
        if name in UNARY_VEC:
            em.vec(UNARY_VEC[name], dst, z, x, z, rows, cols)
        elif isinstance(op, g.GeluOp) and op.approximate.data == "tanh":
            em.vec("gelu", dst, z, x, z, rows, cols)
        elif isinstance(op, g.GeluOp):
            # 0.5 (x + |x| erf(|x| / sqrt 2)) with A&S 7.1.26 for erf on a >= 0
            a = em.alloc((rows, cols), f32, "spad", 1)
            tt = em.alloc((rows, cols), f32, "spad", 1)
            p = em.alloc((rows, cols), f32, "spad", 1)
            em.vec("abs", a, z, x, z, rows, cols)
            em.vec("mul", a, z, a, z, rows, cols, bmode="imm", imm=1 / math.sqrt(2))  # a = |x|/sqrt2
            em.vec("mul", tt, z, a, z, rows, cols, bmode="imm", imm=_AS_P)
            em.vec("add", tt, z, tt, z, rows, cols, bmode="imm", imm=1.0)
            em.vec("recip", tt, z, tt, z, rows, cols)  # t
            em.vec("mul", p, z, tt, z, rows, cols, bmode="imm", imm=_AS[4])
            for coef in reversed(_AS[:4]):
                em.vec("add", p, z, p, z, rows, cols, bmode="imm", imm=coef)
                em.vec("mul", p, z, p, z, rows, cols, tt, z, bmode="tile")  # p = t * poly(t)
            em.vec("mul", tt, z, a, z, rows, cols, a, z, bmode="tile")
            em.vec("neg", tt, z, tt, z, rows, cols)
            em.vec("exp", tt, z, tt, z, rows, cols)  # e^{-a^2}
            em.vec("mul", p, z, p, z, rows, cols, tt, z, bmode="tile")
            em.vec("sub", p, z, p, z, rows, cols, bmode="imm", imm=1.0)  # -(erf(a))
            em.vec("abs", a, z, x, z, rows, cols)
            em.vec("mul", p, z, p, z, rows, cols, a, z, bmode="tile")  # -|x| erf
            em.vec("sub", dst, z, x, z, rows, cols, p, z, bmode="tile")
            em.vec("mul", dst, z, dst, z, rows, cols, bmode="imm", imm=0.5)
        elif isinstance(op, g.ClipOp):
            src = x
            if op.min is not None:
                em.vec("max", dst, z, src, z, rows, cols, bmode="imm", imm=op.min.value.data)
                src = dst
            if op.max is not None:
                em.vec("min", dst, z, src, z, rows, cols, bmode="imm", imm=op.max.value.data)
                src = dst
            if src is x:
                em.vec("copy", dst, z, x, z, rows, cols)
        elif isinstance(op, g.LeakyReluOp):
            alpha = op.alpha.value.data
            tmp = em.alloc((rows, cols), f32, "spad", 1)
            em.vec("min", tmp, z, x, z, rows, cols, bmode="imm", imm=0.0)
            em.vec("mul", tmp, z, tmp, z, rows, cols, bmode="imm", imm=alpha)
            em.vec("relu", dst, z, x, z, rows, cols)
            em.vec("add", dst, z, dst, z, rows, cols, tmp, z, bmode="tile")
        elif isinstance(op, g.EluOp):
            alpha = op.alpha.value.data
            tmp = em.alloc((rows, cols), f32, "spad", 1)
            em.vec("min", tmp, z, x, z, rows, cols, bmode="imm", imm=0.0)
            em.vec("exp", tmp, z, tmp, z, rows, cols)
            em.vec("add", tmp, z, tmp, z, rows, cols, bmode="imm", imm=-1.0)
            em.vec("mul", tmp, z, tmp, z, rows, cols, bmode="imm", imm=alpha)
            em.vec("relu", dst, z, x, z, rows, cols)
            em.vec("add", dst, z, dst, z, rows, cols, tmp, z, bmode="tile")
        elif isinstance(op, g.HardSigmoidOp):
            em.vec("mul", dst, z, x, z, rows, cols, bmode="imm", imm=op.alpha.value.data)
            em.vec("add", dst, z, dst, z, rows, cols, bmode="imm", imm=op.beta.value.data)
            em.vec("max", dst, z, dst, z, rows, cols, bmode="imm", imm=0.0)
            em.vec("min", dst, z, dst, z, rows, cols, bmode="imm", imm=1.0)
        elif isinstance(op, g.CastOp) and _shape(op.input) == _shape(op.output):
            em.vec("copy", dst, z, x, z, rows, cols)
        else:
            raise _err(op, "this elementwise op has no vector-unit lowering")

    def epi_footprint(self, ops: Sequence[Operation], result: SSAValue, on_tile: Sequence[SSAValue],
                      groups: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]) -> Callable[[int, int], int]:
        """Scratchpad bytes of the local buffers `epilogue(ops, ...)` allocates for a
        [rows, cols] output tile (it mirrors the allocation decisions of `epilogue`,
        `_where`, `_unary`, `_load_buf` and `_bcast_tile`): (rows, cols) -> bytes."""
        T = Rw = Cl = 0  # fp32 [rows, cols] tiles, [1, cols] rows, [rows, 1] columns (buffers counted)
        tiles = set(on_tile)

        def kind_of(shape: tuple[int, ...], const_scalar: bool) -> str:
            if const_scalar:
                return "imm"
            cls = classify(groups, shape)
            if cls is None or not (cls[1] or cls[2]):
                return "tile"
            return "tile" if cls[1] and cls[2] else ("row" if cls[2] else "col")

        def load(k: str, bufs: int = 2) -> None:
            nonlocal T, Rw, Cl
            if k == "tile":
                T += bufs
            elif k == "row":
                Rw += bufs
            elif k == "col":
                Cl += bufs

        def operand(v: SSAValue) -> str:
            if v in tiles:
                return "tile"
            c = self.const(v)
            k = kind_of(_shape(v), c is not None and c.size == 1)
            load(k)
            return k

        def bcast(k: str) -> str:
            nonlocal T
            if k != "tile":
                T += 2
            return "tile"

        for op in ops:
            T += 2  # dst
            if isinstance(op, g.WhereOp):
                c = self.const(op.condition)
                cb = np.asarray(c).astype(np.bool_) if c is not None else np.ones((1,), np.bool_)
                for v, mask in ((op.lhs, cb), (op.rhs, ~cb)):
                    if not mask.any():
                        continue
                    cv = self.const(v)
                    if cv is not None:
                        arr = np.broadcast_shapes(np.shape(cv), mask.shape)
                        size = _prod(arr)
                        bcast(load_k := kind_of(tuple(arr), size == 1))
                        load(load_k)
                        continue
                    bcast(operand(v))
                    if mask.all():
                        continue
                    load(kind_of(tuple(mask.shape), mask.size == 1))
                    T += 2
            elif op.name in UNARY_VEC or isinstance(op, g.UnaryOp):
                bcast(operand(op.operands[0]))
                if isinstance(op, g.GeluOp) and op.approximate.data != "tanh":
                    T += 3
                elif isinstance(op, g.LeakyReluOp | g.EluOp):
                    T += 1
            elif isinstance(op, g.BinaryOp):
                ka, kb = operand(op.lhs), operand(op.rhs)
                name = BINARY_VEC.get(op.name)
                if name is None:
                    bcast(ka)
                else:
                    if ka != "tile":
                        if name in ("add", "mul", "max", "min"):
                            ka, kb = kb, ka
                        else:
                            ka = bcast(ka)
                    bcast(ka)
                    if name == "div" and kb != "imm":
                        load(kb)
            tiles.update(op.results)
        if result not in tiles:
            bcast(operand(result))
        T, Rw, Cl = T, Rw, Cl
        return lambda rows, cols: 4 * (T * rows * cols + Rw * cols + Cl * rows)

    def epi_cost(self, ops: Sequence[Operation]) -> int:
        cost = self.hw.vector.cost
        total = 0
        for o in ops:
            if isinstance(o, g.GeluOp) and o.approximate.data == "none":
                total += 20
            else:
                total += cost.get(UNARY_VEC.get(o.name, BINARY_VEC.get(o.name, "add")), 1)
        return total

    # -- elementwise kernels -------------------------------------------------
    def lower_elementwise(self, ops: Sequence[Operation], result: SSAValue, _opts: dict) -> None:
        S = _shape(result)
        inputs: list[SSAValue] = []
        produced = {r for o in ops for r in o.results}
        for o in ops:
            for v in o.operands:
                if v not in produced and v not in inputs:
                    inputs.append(v)
        split = None
        rank = len(S)
        for i in range(rank):
            for j in range(rank - 1, i - 1, -1):
                grp = (S[:i], S[i:j], S[j:])
                if all(classify(grp, _shape(v)) is not None and not (
                        (c := classify(grp, _shape(v))) and not c[1] and not c[2] and self.const(v) is None
                        and _prod(_shape(v)) == 1) for v in inputs):
                    split = grp
                    break
            if split:
                break
        if split is None:
            split = ((), S[:-1] if S else (), S[-1:] if S else (1,))
        B, R, C = split
        if not C:
            C = (1,)
        nb, M, N = _prod(B), _prod(R), _prod(C)
        name = self.name()
        out = self.out_buf(result)
        out2 = self.em.view(out, (nb * M, N))
        full_in = [v for v in inputs if (c := classify(split, _shape(v))) and c[1] and c[2]]
        live = 2 + len(full_in) + len(ops)
        epi_bytes = self.epi_footprint(ops, result, [], (B, R, C))
        rc = tc.choose_rows(self.hw, nb * M, N, bytes_in=4 * max(1, len(full_in)), bytes_out=4,
                            vec_cost=max(1, self.epi_cost(ops)), live_tiles=live,
                            override=(o[0] if (o := self.override(name, 1)) else None),
                            footprint=epi_bytes)
        rc.rows = min(rc.rows, M)
        self.debug(tc.describe_rows(name, "elementwise " + "+".join(o.name.split(".")[1] for o in ops),
                                    "x".join(map(str, S)), rc))

        def body(b: Index, r0: Index, rows: int, c0: Index, cols: int) -> None:
            frame = TileFrame(B, R, C, b, r0, c0, rows, cols)
            res = self.epilogue(ops, {}, frame, result)
            self.em.dma(res, [0, 0], out2, [self.em.add(self.em.mul(b, M), r0), c0], [rows, cols])

        self.em.range(nb, lambda b: self.em.tiles(
            M, rc.rows, lambda r0, rows: self.em.tiles(N, rc.cols, lambda c0, cols: body(b, r0, rows, c0, cols))))

    # -- split fp32 -> bf16 hi (/lo) ---------------------------------------------
    def split(self, src: SSAValue, hi: SSAValue, lo: SSAValue | None, rows: int, cols: int) -> None:
        z = [0, 0]
        self.em.vec("copy", hi, z, src, z, rows, cols)
        if lo is not None:
            self.em.vec("sub", src, z, src, z, rows, cols, hi, z, bmode="tile")
            self.em.vec("copy", lo, z, src, z, rows, cols)

    def packed_splits(self, arr: np.ndarray) -> list[np.ndarray]:
        import ml_dtypes

        a32 = arr.astype(np.float32)
        hi = a32.astype(ml_dtypes.bfloat16)
        if self.ctx.passes == 1:
            return [hi]
        lo = (a32 - hi.astype(np.float32)).astype(ml_dtypes.bfloat16)
        return [hi, lo]

    # -- GEMM ------------------------------------------------------------------
    def lower_gemm(self, op: Operation, epi: Sequence[Operation], result: SSAValue, _opts: dict) -> None:
        em, hw = self.em, self.hw
        R_, C_ = hw.matrix.rows, hw.matrix.cols
        if isinstance(op, g.LinearOp):
            x, wv, bias = op.input, op.weight, op.bias
            w = self.const(wv)
            xs = _shape(x)
            K = xs[-1]
            N = _shape(wv)[0]
            a_batch: tuple[int, ...] = ()
            M = _prod(xs[:-1])
            batch: tuple[int, ...] = ()
            wT = None if w is None else np.ascontiguousarray(np.asarray(w, np.float32).T)
            rhs_act = None
            if w is None:
                raise _err(op, "graph.linear with a runtime weight is not supported (use graph.matmul)")
            Rg: tuple[int, ...] = tuple(xs[:-1])
        else:
            assert isinstance(op, g.MatmulOp)
            x, wv, bias = op.lhs, op.rhs, None
            if op.transpose_a.value.data:
                raise _err(op, "transpose_a is not supported by the tile lowering")
            xs, ws = _shape(x), _shape(wv)
            if len(xs) == 1:
                xs = (1, xs[0])
            if len(ws) == 1:
                ws = (ws[0], 1)
            tb = bool(op.transpose_b.value.data)
            w = self.const(wv)
            if w is not None and _prod(ws[:-2]) == 1:
                w2 = np.asarray(w, np.float32).reshape(ws[-2:])
                wT = np.ascontiguousarray(w2.T if tb else w2)
                K, N = wT.shape
                rhs_act = None
                batch = tuple(xs[:-2])
                a_batch = batch
                M = xs[-2]
            else:
                wT = None
                src = self.buf(wv)
                if tb:
                    src = self.transpose_last2(src, ws)
                    ws = (*ws[:-2], ws[-1], ws[-2])
                K, N = ws[-2], ws[-1]
                M = xs[-2]
                batch = tuple(_shape(result)[:-2]) if len(_shape(op.lhs)) > 1 and len(_shape(op.rhs)) > 1 else tuple(np.broadcast_shapes(xs[:-2], ws[:-2]))
                a_batch = tuple(xs[:-2])
                rhs_act = (src, tuple(ws[:-2]))
            Rg = (M,)
        out_shape = _shape(result)
        nbatch = _prod(batch)
        out = self.out_buf(result)
        out2 = em.view(out, (nbatch * M, N))
        a_full = _prod(a_batch) == nbatch and nbatch > 1
        if a_batch and _prod(a_batch) not in (1, nbatch):
            raise _err(op, "partial batch broadcasting is not supported")
        xv = em.view(self.buf(x), ((nbatch if a_full else 1) * M, K))
        if isinstance(op, g.LinearOp) or wT is not None:
            frame_groups = ((), tuple(out_shape[:-1]), (N,)) if isinstance(op, g.LinearOp) else (tuple(batch), (M,), (N,))
        else:
            frame_groups = (tuple(batch), (M,), (N,))
        if isinstance(op, g.LinearOp):
            frame_groups = ((), tuple(out_shape[:-1]), (N,))
            nbatch, M = 1, _prod(out_shape[:-1])
        name = self.name()
        passes = self.ctx.passes
        ncp = 2 if passes == 3 else 1
        epi_bytes = self.epi_footprint(epi, result, [op.results[0]], frame_groups)

        def footprint(tm: int, tn: int, tk: int) -> tuple[int, int]:
            # x staging f32 + bf16 hi(/lo); weight bf16 hi(/lo) (+ f32 staging when a runtime
            # operand); bias row; epilogue tiles -- all double buffered; the accumulator tile
            spad = 2 * (tm * tk * (4 + 2 * ncp) + tk * tn * (2 * ncp + (4 if rhs_act else 0)))
            spad += (2 * tn * 4 if bias is not None else 0)
            # each emitted tile shape (full, remainder) allocates its own epilogue buffers
            spad += sum(epi_bytes(a, b) for a in _tile_sizes(M, tm) for b in _tile_sizes(N, tn))
            return spad, 2 * tm * tn * 4

        spec = tc.GemmSpec(lhs_bytes=4, lhs_split=True,
                           rhs_bytes=(4 if rhs_act else 2 * (2 if passes == 3 else 1)),
                           rhs_split=rhs_act is not None, passes=passes, batch=nbatch,
                           epi_cost=self.epi_cost(epi) + (1 if bias is not None else 0),
                           epi_tiles=sum(1 for o in epi for v in o.operands if v not in {r for e in epi for r in e.results}
                                         and v is not op.results[0] and _shape(v) == out_shape),
                           footprint=footprint)
        ch = tc.choose_gemm(hw, M, N, K, spec, override=self.override(name, 3))
        TM, TN, TK = ch.tiles
        self.debug(tc.describe_choice(name, op.name.split(".")[1], f"M={M} N={N} K={K}" + (f" batch={nbatch}" if nbatch > 1 else ""), ch))
        copies = 2 if passes == 3 else 1
        # pre-packed weights: [N/TN tiles][Kp][TN] so one weight tile is one contiguous DMA
        packs: list[SSAValue] = []
        Kp = -(-K // TK) * TK
        if wT is not None:
            Np = -(-N // TN) * TN
            wpad = np.zeros((Kp, Np), np.float32)
            wpad[:K, :N] = wT
            blocked = wpad.reshape(Kp, Np // TN, TN).transpose(1, 0, 2).reshape(Np // TN * Kp, TN)
            hint = (wv.owner.weight_key if isinstance(wv.owner, g.WeightOp) else f"{name}.weight") + ".packed"
            for i, part in enumerate(self.packed_splits(blocked)):
                packs.append(self.weight(hint + ("_hi" if i == 0 else "_lo") if copies == 2 else hint, part, bf16))
        bias_v = None
        if bias is not None:
            bias_v = em.view(self.buf(bias), (1, N))
        # local buffers
        xs_ = em.alloc((TM, TK), f32, "spad", 2)
        xh = em.alloc((TM, TK), bf16, "spad", 2)
        xl = em.alloc((TM, TK), bf16, "spad", 2) if copies == 2 else None
        wh = em.alloc((TK, TN), bf16, "spad", 2)
        wl = em.alloc((TK, TN), bf16, "spad", 2) if copies == 2 else None
        ws_ = em.alloc((TK, TN), f32, "spad", 2) if rhs_act else None
        acc = em.alloc((TM, TN), f32, "acc", 2)
        bias_t = em.alloc((1, TN), f32, "spad", 2) if bias_v is not None else None
        rb = None
        if rhs_act:
            rsrc, rbatch = rhs_act
            r_full = _prod(rbatch) == nbatch and nbatch > 1
            rb = em.view(rsrc, ((nbatch if r_full else 1) * K, N))

        def tile_body(b: Index, m0: Index, tm: int, jn: Index, n0: Index, tn: int) -> None:
            em.fill(acc, [0, 0], tm, tn, 0.0)

            def kstep(k0: Index, tk: int) -> None:
                em.dma(xv, [em.add(em.mul(b, M) if a_full else 0, m0), k0], xs_, [0, 0], [tm, tk])
                self.split(xs_, xh, xl, tm, tk)
                if packs:
                    row = em.add(em.mul(jn, Kp), k0)
                    em.dma(packs[0], [row, 0], wh, [0, 0], [TK, TN])
                    if copies == 2:
                        em.dma(packs[1], [row, 0], wl, [0, 0], [TK, TN])
                else:
                    rrow = em.add(em.mul(b, K) if r_full_flag else 0, k0)
                    em.dma(rb, [rrow, n0], ws_, [0, 0], [tk, tn])
                    self.split(ws_, wh, wl, tk, tn)

                def mm(kk: Index, kc: int) -> None:
                    def mm2(nn: Index, nc: int) -> None:
                        em.matmul(xh, [0, kk], wh, [kk, nn], acc, [0, nn], tm, kc, nc)
                        if copies == 2:
                            em.matmul(xh, [0, kk], wl, [kk, nn], acc, [0, nn], tm, kc, nc)
                            em.matmul(xl, [0, kk], wh, [kk, nn], acc, [0, nn], tm, kc, nc)
                    em.tiles(tn, C_, mm2)
                em.tiles(tk, R_, mm)

            em.tiles(K, TK, kstep)
            z = [0, 0]
            if bias_v is not None:
                em.dma(bias_v, [0, n0], bias_t, z, [1, tn])
                em.vec("add", acc, z, acc, z, tm, tn, bias_t, z, bmode="row")
            B, Rg2, Cg = frame_groups
            frame = TileFrame(B, Rg2, Cg, b, m0, n0, tm, tn)
            res = self.epilogue(epi, {op.results[0]: acc}, frame, result)
            em.dma(res, z, out2, [em.add(em.mul(b, M), m0), n0], [tm, tn])

        r_full_flag = bool(rhs_act) and _prod(rhs_act[1]) == nbatch and nbatch > 1

        def over_n(b: Index, m0: Index, tm: int) -> None:
            full, rem = divmod(N, TN)
            if full == 1:
                tile_body(b, m0, tm, 0, 0, TN)
            elif full > 1:
                em.loop(0, full, 1, lambda j: tile_body(b, m0, tm, j, em.mul(j, TN), TN))
            if rem:
                tile_body(b, m0, tm, full, full * TN, rem)

        em.range(nbatch, lambda b: em.tiles(M, TM, lambda m0, tm: over_n(b, m0, tm)))

    def transpose_last2(self, src: SSAValue, shape: Sequence[int]) -> SSAValue:
        """A DRAM copy with the last two dims swapped (blocks transposed on the vector unit)."""
        with self.stage(what="transposed copy"):
            return self._transpose_last2(src, shape)

    def _transpose_last2(self, src: SSAValue, shape: Sequence[int]) -> SSAValue:
        r = len(shape)
        dst = self.em.alloc((*shape[:-2], shape[-1], shape[-2]), f32, "dram")
        _ld.permute_copy(self, src, shape, (*range(r - 2), r - 1, r - 2), dst)
        return dst

    # -- conv ------------------------------------------------------------------
    def pad_copy(self, x: SSAValue, NC: int, H: int, W: int, pads: tuple[int, int, int, int],
                 value: float) -> tuple[SSAValue, int, int]:
        with self.stage(what="padded copy"):
            return self._pad_copy(x, NC, H, W, pads, value)

    def _pad_copy(self, x: SSAValue, NC: int, H: int, W: int, pads: tuple[int, int, int, int],
                  value: float) -> tuple[SSAValue, int, int]:
        """x viewed [NC, H, W] copied into a DRAM buffer [NC, H + top + bottom, W + left + right]
        whose border is `value` (zero padding of convs, -inf of max pooling)."""
        em = self.em
        pt, pl, pb, pr = pads
        x3 = em.view(x, (NC, H, W))
        if not any(pads):
            return x3, H, W
        Hp, Wp = H + pt + pb, W + pl + pr
        xp = em.alloc((NC, Hp, Wp), f32, "dram")
        quarter = self.hw.memory.scratchpad_bytes // 4
        rows2 = em.view(xp, (NC * Hp, Wp))
        zr = max(1, min(NC * Hp, quarter // (Wp * 4)))
        z = em.alloc((zr, Wp), f32, "spad")
        em.fill(z, [0, 0], zr, Wp, value)
        em.tiles(NC * Hp, zr, lambda r0, r: em.dma(z, [0, 0], rows2, [r0, 0], [r, Wp]))
        th = max(1, min(H, quarter // (W * 4 * 2)))
        tnc = max(1, min(NC, quarter // (th * W * 4 * 2)))
        st = em.alloc((tnc, th, W), f32, "spad", 2)

        def body(c0: Index, cn: int, h0: Index, hn: int) -> None:
            em.dma(x3, [c0, h0, 0], st, [0, 0, 0], [cn, hn, W])
            em.dma(st, [0, 0, 0], xp, [c0, em.add(h0, pt), pl], [cn, hn, W])

        em.tiles(NC, tnc, lambda c0, cn: em.tiles(H, th, lambda h0, hn: body(c0, cn, h0, hn)))
        return xp, Hp, Wp

    def lower_conv(self, op: g.Conv2dOp, epi: Sequence[Operation], result: SSAValue, _opts: dict) -> None:
        em, hw = self.em, self.hw
        R_, C_ = hw.matrix.rows, hw.matrix.cols
        w = self.const(op.weight)
        if w is None:
            raise _err(op, "conv2d needs a compile-time weight")
        N, C, H, W = _shape(op.input)
        O, Cg, KH, KW = _shape(op.weight)
        G = op.groups.value.data
        Og = O // G
        sh, sw = g._ints(op.stride)
        dh, dw = g._ints(op.dilation)
        pads = tuple(g._ints(op.padding))
        _, _, OH, OW = _shape(op.results[0])
        T = KH * KW
        xp, Hp, Wp = self.pad_copy(self.buf(op.input), N * C, H, W, (pads[0], pads[1], pads[2], pads[3]), 0.0)
        name = self.name()
        passes = self.ctx.passes
        copies = 2 if passes == 3 else 1
        out_shape = _shape(result)
        epi_bytes = self.epi_footprint(epi, result, [op.results[0]], ((N,), (O,), (OH, OW)))
        has_bias = op.bias is not None

        def footprint(to: int, tp: int, tcn: int) -> tuple[int, int]:
            # window f32 staging + bf16 hi(/lo) [TC, TP]; weight block bf16 hi(/lo) [TO, TC];
            # bias column; epilogue tiles [TO, TP] -- double buffered; the accumulator tile
            spad = 2 * (tcn * tp * (4 + 2 * copies) + to * tcn * 2 * copies)
            spad += (2 * to * 4 if has_bias else 0)
            # each emitted tile shape (full, remainder) allocates its own epilogue buffers
            toh = max(1, tp // OW)
            spad += sum(epi_bytes(a, b * OW) for a in _tile_sizes(Og, to) for b in _tile_sizes(OH, toh))
            return spad, 2 * to * tp * 4

        spec = tc.GemmSpec(lhs_bytes=2 * copies, lhs_split=False, rhs_bytes=4, rhs_split=True, passes=passes,
                           taps=T, batch=N * G, epi_cost=self.epi_cost(epi) + (1 if op.bias else 0),
                           epi_tiles=sum(1 for o in epi for v in o.operands if _shape(v) == out_shape
                                         and v not in {r for e in epi for r in e.results} and v is not op.results[0]),
                           footprint=footprint)
        tn_cands = sorted({min(OH, 1 << i) * OW for i in range(0, max(1, OH).bit_length() + 1)})
        ovr = self.override(name, 3)
        if ovr is not None and ovr[1] % OW:
            raise LoweringError(f"error: graph-to-tile: {name}: the pixel tile (TN) must be a multiple of OW = {OW}")
        ch = tc.choose_gemm(hw, Og, OH * OW, Cg, spec, tn_cands=tn_cands, override=ovr)
        TO, TP, TC = ch.tiles
        TOH = max(1, TP // OW)
        self.debug(tc.describe_choice(name, "conv2d", f"O={Og} P={OH}x{OW} C={Cg} taps={KH}x{KW}"
                                      + (f" groups={G}" if G > 1 else "") + f" batch={N}", ch))
        # weights: per (group, tap) a [Og, Cg] block: rows ((g*T + kh*KW + kw)*Og + o)
        wa = np.asarray(w, np.float32).reshape(G, Og, Cg, KH, KW).transpose(0, 3, 4, 1, 2).reshape(G * T * Og, Cg)
        hint = (op.weight.owner.weight_key if isinstance(op.weight.owner, g.WeightOp) else f"{name}.weight") + ".packed"
        packs = [self.weight(hint + (("_hi" if i == 0 else "_lo") if copies == 2 else ""), part, bf16)
                 for i, part in enumerate(self.packed_splits(np.ascontiguousarray(wa)))]
        out = self.out_buf(result)
        out2 = em.view(out, (N * O, OH * OW))
        xs = em.alloc((TC, TOH, OW), f32, "spad", 2)
        xs2 = em.view(xs, (TC, TOH * OW))
        xh = em.alloc((TC, TP), bf16, "spad", 2)
        xl = em.alloc((TC, TP), bf16, "spad", 2) if copies == 2 else None
        wh = em.alloc((TO, TC), bf16, "spad", 2)
        wl = em.alloc((TO, TC), bf16, "spad", 2) if copies == 2 else None
        acc = em.alloc((TO, TP), f32, "acc", 2)
        bias_v = em.view(self.buf(op.bias), (O, 1)) if op.bias is not None else None
        bias_t = em.alloc((TO, 1), f32, "spad", 2) if bias_v is not None else None
        z = [0, 0]

        def tile(n: Index, gi: Index, o0: Index, to: int, oh0: Index, toh: int) -> None:
            tp = toh * OW
            em.fill(acc, z, to, tp, 0.0)

            def cstep(c0: Index, tcn: int) -> None:
                def tap(kh: Index, kw: Index) -> None:
                    row = em.add(em.add(em.mul(n, C), em.mul(gi, Cg)), c0)
                    em.dma(xp, [row, em.add(em.mul(oh0, sh), em.mul(kh, dh)), em.mul(kw, dw)], xs, [0, 0, 0],
                           [tcn, toh, OW], [1, sh, sw])
                    self.split(xs2, xh, xl, tcn, tp)
                    wrow = em.add(em.mul(em.add(em.add(em.mul(gi, T), em.mul(kh, KW)), kw), Og), o0)
                    em.dma(packs[0], [wrow, c0], wh, z, [to, tcn])
                    if copies == 2:
                        em.dma(packs[1], [wrow, c0], wl, z, [to, tcn])

                    def mm(pp: Index, pc: int) -> None:
                        def mm2(cc: Index, kc: int) -> None:
                            em.matmul(wh, [0, cc], xh, [cc, pp], acc, [0, pp], to, kc, pc)
                            if copies == 2:
                                em.matmul(wh, [0, cc], xl, [cc, pp], acc, [0, pp], to, kc, pc)
                                em.matmul(wl, [0, cc], xh, [cc, pp], acc, [0, pp], to, kc, pc)
                        em.tiles(tcn, R_, mm2)
                    em.tiles(tp, C_, mm)

                em.range(KH, lambda kh: em.range(KW, lambda kw: tap(kh, kw)))

            em.tiles(Cg, TC, cstep)
            r0 = em.add(em.mul(gi, Og), o0)
            if bias_v is not None:
                em.dma(bias_v, [r0, 0], bias_t, z, [to, 1])
                em.vec("add", acc, z, acc, z, to, tp, bias_t, z, bmode="col")
            frame = TileFrame((N,), (O,), (OH, OW), n, r0, em.mul(oh0, OW), to, tp)
            res = self.epilogue(epi, {op.results[0]: acc}, frame, result)
            em.dma(res, z, out2, [em.add(em.mul(n, O), r0), em.mul(oh0, OW)], [to, tp])

        em.range(N, lambda n: em.range(G, lambda gi: em.tiles(
            Og, TO, lambda o0, to: em.tiles(OH, TOH, lambda oh0, toh: tile(n, gi, o0, to, oh0, toh)))))

    # -- pooling -----------------------------------------------------------------
    def lower_pool(self, op: Operation) -> None:
        em = self.em
        N, C, H, W = _shape(op.input)
        _, _, OH, OW = _shape(op.results[0])
        KH, KW = g._ints(op.kernel)
        sh, sw = g._ints(op.stride)
        dh, dw = g._ints(op.dilation) or (1, 1)
        pt, pl, pb, pr = g._ints(op.padding)
        is_max = isinstance(op, g.MaxPool2dOp)
        # pad bottom/right so every window (ceil_mode included) stays inside
        need_h = (OH - 1) * sh + (KH - 1) * dh + 1
        need_w = (OW - 1) * sw + (KW - 1) * dw + 1
        pb2 = max(pb, need_h - H - pt)
        pr2 = max(pr, need_w - W - pl)
        xp, Hp, Wp = self.pad_copy(self.buf(op.input), N * C, H, W, (pt, pl, pb2, pr2), NEG if is_max else 0.0)
        name = self.name()
        ov = self.override(name, 2)
        def toh_of(tcn: int) -> int:
            return max(1, min(OH, tcn // OW))

        def footprint(tr: int, tcn: int) -> int:  # window + running result [TR, TOH*OW] x2, 1/count row x2
            tp = toh_of(tcn) * OW
            return 2 * 2 * tr * tp * 4 + (0 if is_max else 2 * tp * 4)

        rc = tc.choose_rows(self.hw, N * C, OH * OW, bytes_in=4 * KH * KW, bytes_out=4,
                            vec_cost=KH * KW + 1, live_tiles=3, override=(ov[0] if ov else None),
                            footprint=footprint)
        TR = rc.rows
        TOH = ov[1] if ov else toh_of(rc.cols)
        self.debug(tc.describe_rows(name, op.name.split(".")[1], f"{N}x{C}x{H}x{W} window {KH}x{KW}", rc)
                   + f"\n[graph-to-tile] {name}:   channels x output rows per tile = {TR}x{TOH}")
        out2 = em.view(self.out_buf(op.results[0]), (N * C, OH * OW))
        xs = em.alloc((TR, TOH, OW), f32, "spad", 2)
        xs2 = em.view(xs, (TR, TOH * OW))
        acc = em.alloc((TR, TOH * OW), f32, "spad", 2)
        z = [0, 0]
        recip = None
        if not is_max:
            cnt = np.zeros((OH, OW), np.float64)
            inc = bool(op.count_include_pad.value.data)
            lo_h, hi_h = (-pt, H + pb) if inc else (0, H)
            lo_w, hi_w = (-pl, W + pr) if inc else (0, W)
            for i in range(OH):
                a = i * sh - pt
                nh = max(0, min(a + KH, hi_h) - max(a, lo_h))
                for j in range(OW):
                    b = j * sw - pl
                    cnt[i, j] = nh * max(0, min(b + KW, hi_w) - max(b, lo_w))
            recip = self.weight(f"{name}.recip_count", (1.0 / np.maximum(cnt, 1)).reshape(1, OH * OW).astype(np.float32), f32)
            rt = em.alloc((1, TOH * OW), f32, "spad", 2)

        def tile(r0: Index, tr: int, oh0: Index, toh: int) -> None:
            tp = toh * OW
            em.fill(acc, z, tr, tp, NEG if is_max else 0.0)

            def tap(kh: Index, kw: Index) -> None:
                em.dma(xp, [r0, em.add(em.mul(oh0, sh), em.mul(kh, dh)), em.mul(kw, dw)], xs, [0, 0, 0],
                       [tr, toh, OW], [1, sh, sw])
                em.vec("max" if is_max else "add", acc, z, acc, z, tr, tp, xs2, z, bmode="tile")

            em.range(KH, lambda kh: em.range(KW, lambda kw: tap(kh, kw)))
            if recip is not None:
                em.dma(recip, [0, em.mul(oh0, OW)], rt, z, [1, tp])
                em.vec("mul", acc, z, acc, z, tr, tp, rt, z, bmode="row")
            em.dma(acc, z, out2, [r0, em.mul(oh0, OW)], [tr, tp])

        em.tiles(N * C, TR, lambda r0, tr: em.tiles(OH, TOH, lambda oh0, toh: tile(r0, tr, oh0, toh)))

    def lower_global_pool(self, op: Operation) -> None:
        em = self.em
        shp = _shape(op.input)
        NC, HW = shp[0] * shp[1], _prod(shp[2:])
        is_max = isinstance(op, g.GlobalMaxPoolOp)
        name = self.name()
        ov = self.override(name, 1)
        rc = tc.choose_rows(self.hw, NC, HW, bytes_in=4, bytes_out=0, vec_cost=2, live_tiles=2,
                            override=(ov[0] if ov else None),
                            footprint=lambda tr, tcn: tr * tcn * 8 + 2 * tr * 8)  # xs x2, part/res x2
        self.debug(tc.describe_rows(name, op.name.split(".")[1], "x".join(map(str, shp)), rc))
        x2 = em.view(self.buf(op.input), (NC, HW))
        out2 = em.view(self.out_buf(op.results[0]), (NC, 1))
        xs = em.alloc((rc.rows, rc.cols), f32, "spad", 2)
        part = em.alloc((rc.rows, 1), f32, "spad", 2)
        res = em.alloc((rc.rows, 1), f32, "spad", 2)
        z = [0, 0]

        def tile(r0: Index, tr: int) -> None:
            em.fill(res, z, tr, 1, NEG if is_max else 0.0)

            def chunk(c0: Index, cn: int) -> None:
                em.dma(x2, [r0, c0], xs, z, [tr, cn])
                em.vec("rmax" if is_max else "rsum", part, z, xs, z, tr, cn)
                em.vec("max" if is_max else "add", res, z, res, z, tr, 1, part, z, bmode="tile")

            em.tiles(HW, rc.cols, chunk)
            if not is_max:
                em.vec("mul", res, z, res, z, tr, 1, bmode="imm", imm=1.0 / HW)
            em.dma(res, z, out2, [r0, 0], [tr, 1])

        em.tiles(NC, rc.rows, tile)

    # -- row-wise kernels: layer_norm, rms_norm, softmax --------------------------
    def lower_rowwise(self, op: Operation) -> None:
        em = self.em
        S = _shape(op.input)
        axis = op.axis.value.data % len(S)
        if isinstance(op, g.SoftmaxOp | g.LogSoftmaxOp):
            if isinstance(op, g.LogSoftmaxOp):
                raise _err(op, "log_softmax needs a logarithm, which the vector unit does not have")
            if any(d != 1 for d in S[axis + 1:]):
                raise _err(op, "softmax is lowered along the last (contiguous) axis only")
            axis = len(S) - 1 if all(d == 1 for d in S[axis + 1:]) and S[axis:] else axis
        M, D = _prod(S[:axis]), _prod(S[axis:])
        name = self.name()
        ov = self.override(name, 1)
        nparams = 0 if isinstance(op, g.SoftmaxOp) else (
            1 + (1 if isinstance(op, g.LayerNormOp) and op.bias is not None else 0))

        def footprint(tr: int, d: int) -> int:  # x, y [TR, D] x2, a column x2, scale/bias rows
            return tr * d * 16 + tr * 8 + nparams * d * 4

        rc = tc.choose_rows(self.hw, M, D, bytes_in=4, bytes_out=4, vec_cost=8, live_tiles=3,
                            override=(ov[0] if ov else None), whole_row=True, footprint=footprint)
        rc.rows = min(rc.rows, M)
        if footprint(1, D) > self.hw.memory.scratchpad_bytes:
            raise _err(op, f"a row of {D} elements does not fit the scratchpad of target '{self.hw.name}'")
        self.debug(tc.describe_rows(name, op.name.split(".")[1], "x".join(map(str, S)), rc))
        x2 = em.view(self.buf(op.input), (M, D))
        out2 = em.view(self.out_buf(op.results[0]), (M, D))
        TR = rc.rows
        xt = em.alloc((TR, D), f32, "spad", 2)
        yt = em.alloc((TR, D), f32, "spad", 2)
        col = em.alloc((TR, 1), f32, "spad", 2)
        z = [0, 0]
        params = []
        if not isinstance(op, g.SoftmaxOp):
            for p in [op.scale] + ([op.bias] if isinstance(op, g.LayerNormOp) and op.bias is not None else []):
                c = self.const(p)
                if c is not None:
                    arr = np.ascontiguousarray(np.broadcast_to(c, S[axis:]).reshape(1, D).astype(np.float32))
                    params.append(self.weight(f"{name}.param", arr, f32))
                elif _prod(_shape(p)) == D:
                    params.append(em.view(self.buf(p), (1, D)))
                else:
                    raise _err(op, "a runtime scale/bias must have the normalized shape")
        pt = [em.alloc((1, D), f32, "spad") for _ in params]
        for src, dst in zip(params, pt):
            em.dma(src, z, dst, z, [1, D])
        eps = op.epsilon.value.data if not isinstance(op, g.SoftmaxOp) else 0.0

        def tile(r0: Index, tr: int) -> None:
            em.dma(x2, [r0, 0], xt, z, [tr, D])
            if isinstance(op, g.SoftmaxOp):
                em.vec("rmax", col, z, xt, z, tr, D)
                em.vec("sub", yt, z, xt, z, tr, D, col, z, bmode="col")
                em.vec("exp", yt, z, yt, z, tr, D)
                em.vec("rsum", col, z, yt, z, tr, D)
                em.vec("recip", col, z, col, z, tr, 1)
                em.vec("mul", yt, z, yt, z, tr, D, col, z, bmode="col")
            else:
                src = xt
                if isinstance(op, g.LayerNormOp):
                    em.vec("rsum", col, z, xt, z, tr, D)
                    em.vec("mul", col, z, col, z, tr, 1, bmode="imm", imm=1.0 / D)
                    em.vec("sub", xt, z, xt, z, tr, D, col, z, bmode="col")
                em.vec("mul", yt, z, src, z, tr, D, src, z, bmode="tile")
                em.vec("rsum", col, z, yt, z, tr, D)
                em.vec("mul", col, z, col, z, tr, 1, bmode="imm", imm=1.0 / D)
                em.vec("add", col, z, col, z, tr, 1, bmode="imm", imm=eps)
                em.vec("rsqrt", col, z, col, z, tr, 1)
                em.vec("mul", yt, z, xt, z, tr, D, col, z, bmode="col")
                em.vec("mul", yt, z, yt, z, tr, D, pt[0], z, bmode="row")
                if len(pt) > 1:
                    em.vec("add", yt, z, yt, z, tr, D, pt[1], z, bmode="row")
            em.dma(yt, z, out2, [r0, 0], [tr, D])

        em.tiles(M, TR, tile)

    # -- attention: one flash kernel (online softmax, scores stay on chip) ------------
    def lower_attention(self, op: g.AttentionOp) -> None:
        em, hw = self.em, self.hw
        R_, C_ = hw.matrix.rows, hw.matrix.cols
        B, Hq, Sq, D = _shape(op.query)
        _, Hkv, Skv, _ = _shape(op.key)
        Dv = _shape(op.value)[-1]
        grp = Hq // Hkv
        scale = op.scale.value.data if op.scale is not None else 1.0 / math.sqrt(D)
        causal = bool(op.causal.value.data)
        off = Skv - Sq
        passes = self.ctx.passes
        copies = 2 if passes == 3 else 1
        name = self.name()
        mask_rows_full = False
        if op.mask is not None:
            ms_ = (1,) * (4 - len(_shape(op.mask))) + tuple(_shape(op.mask))
            mask_rows_full = self.const(op.mask) is not None or ms_[2] > 1

        def footprint(tq: int, tkv: int, _d: int) -> tuple[int, int]:
            # q [TQ, D], k^T [D, TKV], p [TQ, TKV], v [TKV, Dv]: f32 staging + bf16 hi(/lo) each;
            # m, m_new, l, tmp columns; causal band / mask tiles -- all x2; score and O tiles in acc
            per = 4 + 2 * copies
            spad = 2 * per * (tq * D + D * tkv + tq * tkv + tkv * Dv) + 4 * 2 * tq * 4
            if causal:
                spad += 2 * tq * tkv * 4
            if op.mask is not None:
                spad += 2 * (tq if mask_rows_full else 1) * tkv * 4
            return spad, 2 * tq * tkv * 4 + 2 * tq * Dv * 4

        spec = tc.GemmSpec(lhs_bytes=4, lhs_split=True, rhs_bytes=4, rhs_split=True, passes=passes,
                           batch=B * Hq, epi_cost=12, footprint=footprint)
        ch = tc.choose_gemm(hw, Sq, Skv, D, spec, tk_cands=[D], override=None)
        ov = self.override(name, 2)
        TQ, TKV = (ov[0], ov[1]) if ov else (ch.tiles[0], ch.tiles[1])
        self.debug(tc.describe_choice(name, "attention", f"Sq={Sq} Skv={Skv} D={D} heads={Hq}/{Hkv} batch={B}"
                                      + (" causal" if causal else ""), ch)
                   + f"\n[graph-to-tile] {name}:   flash tiles TQxTKV = {TQ}x{TKV} (score tile never leaves the chip)")
        kt = self.transpose_last2(self.buf(op.key), (B, Hkv, Skv, D))
        kt2 = em.view(kt, (B * Hkv * D, Skv))
        q2 = em.view(self.buf(op.query), (B * Hq * Sq, D))
        v2 = em.view(self.buf(op.value), (B * Hkv * Skv, Dv))
        out2 = em.view(self.out_buf(op.results[0]), (B * Hq * Sq, Dv))
        qs = em.alloc((TQ, D), f32, "spad", 2)
        qh = em.alloc((TQ, D), bf16, "spad", 2)
        ql = em.alloc((TQ, D), bf16, "spad", 2) if copies == 2 else None
        ks = em.alloc((D, TKV), f32, "spad", 2)
        kh = em.alloc((D, TKV), bf16, "spad", 2)
        kl = em.alloc((D, TKV), bf16, "spad", 2) if copies == 2 else None
        sc = em.alloc((TQ, TKV), f32, "acc", 2)
        ps = em.alloc((TQ, TKV), f32, "spad", 2)
        ph = em.alloc((TQ, TKV), bf16, "spad", 2)
        pl = em.alloc((TQ, TKV), bf16, "spad", 2) if copies == 2 else None
        vs = em.alloc((TKV, Dv), f32, "spad", 2)
        vh = em.alloc((TKV, Dv), bf16, "spad", 2)
        vl = em.alloc((TKV, Dv), bf16, "spad", 2) if copies == 2 else None
        o = em.alloc((TQ, Dv), f32, "acc", 2)
        m = em.alloc((TQ, 1), f32, "spad", 2)
        mn = em.alloc((TQ, 1), f32, "spad", 2)
        lsum = em.alloc((TQ, 1), f32, "spad", 2)
        tmp = em.alloc((TQ, 1), f32, "spad", 2)
        band = bt = None
        # causal band: score (q0 + i, j0 + jj) is masked iff j0 + jj - q0 - i - off > 0. Row i of the
        # band, column c = j0 + jj - q0 + QL (QL = the last q tile's origin) holds exactly that, so
        # the band column of a score tile, j0 - q0 + QL, is affine in both tile loops (no clamp:
        # hardware addresses must be affine) and in [0, Skv + QL) for every (q tile, kv tile) pair.
        QL = (Sq - 1) // TQ * TQ
        if causal:
            width = Skv + QL
            ii, cc = np.meshgrid(np.arange(TQ), np.arange(width), indexing="ij")
            band = self.weight(f"{name}.causal_band",
                               np.where(cc - QL - ii - off > 0, NEG, 0.0).astype(np.float32), f32)
            bt = em.alloc((TQ, TKV), f32, "spad", 2)
        # explicit mask: additive [mb*mh*mq, Skv] rows (mb in {1, B}, mh in {1, Hq}, mq in {1, Sq})
        mask2 = mt = None
        mb = mh = mq = 1
        if op.mask is not None:
            ms = (1,) * (4 - len(_shape(op.mask))) + tuple(_shape(op.mask))
            mb, mh = ms[0], ms[1]
            cm = self.const(op.mask)
            if cm is not None:
                arr = np.broadcast_to(np.asarray(cm).reshape(ms), (mb, mh, Sq, Skv))
                if arr.dtype == np.bool_:
                    arr = np.where(arr, np.float32(0), np.float32(NEG))
                arr = np.maximum(arr.astype(np.float32), np.float32(NEG))  # -inf -> NEG (no inf - inf)
                mq = Sq
                mask2 = self.weight(f"{name}.mask", np.ascontiguousarray(arr.reshape(mb * mh * Sq, Skv)), f32)
            else:
                if ms[3] != Skv or ms[2] not in (1, Sq):
                    raise _err(op, f"a runtime mask {ms} must have the key dim ({Skv}) and 1 or {Sq} query rows")
                mq = ms[2]
                mask2 = em.view(self.buf(op.mask), (mb * mh * mq, Skv))
            mt = em.alloc((TQ if mq > 1 else 1, TKV), f32, "spad", 2)
        z = [0, 0]

        def mm3(ah, al, bh_, bl, acc, mrows, kdim, ndim):
            def f(kk: Index, kc: int) -> None:
                def f2(nn: Index, nc: int) -> None:
                    em.matmul(ah, [0, kk], bh_, [kk, nn], acc, [0, nn], mrows, kc, nc)
                    if copies == 2:
                        em.matmul(ah, [0, kk], bl, [kk, nn], acc, [0, nn], mrows, kc, nc)
                        em.matmul(al, [0, kk], bh_, [kk, nn], acc, [0, nn], mrows, kc, nc)
                em.tiles(ndim, C_, f2)
            em.tiles(kdim, R_, f)

        def qtile(b: Index, hk: Index, gi: Index, q0: Index, tq: int) -> None:
            h = em.add(em.mul(hk, grp), gi)
            qrow = em.add(em.mul(em.add(em.mul(b, Hq), h), Sq), q0)
            em.dma(q2, [qrow, 0], qs, z, [tq, D])
            em.vec("mul", qs, z, qs, z, tq, D, bmode="imm", imm=scale)
            self.split(qs, qh, ql, tq, D)
            em.fill(m, z, tq, 1, NEG)
            em.fill(lsum, z, tq, 1, 0.0)
            em.fill(o, z, tq, Dv, 0.0)
            kvb = em.add(em.mul(b, Hkv), hk)

            def kvtile(j0: Index, tkv: int) -> None:
                em.dma(kt2, [em.mul(kvb, D), j0], ks, z, [D, tkv])
                self.split(ks, kh, kl, D, tkv)
                em.fill(sc, z, tq, tkv, 0.0)
                mm3(qh, ql, kh, kl, sc, tq, D, tkv)
                if causal:
                    em.dma(band, [0, em.add(em.sub(j0, q0), QL)], bt, z, [tq, tkv])
                    em.vec("add", sc, z, sc, z, tq, tkv, bt, z, bmode="tile")
                if mask2 is not None:
                    mrow = em.mul(em.add(em.mul(b if mb > 1 else 0, mh), h if mh > 1 else 0), mq)
                    if mq > 1:
                        em.dma(mask2, [em.add(mrow, q0), j0], mt, z, [tq, tkv])
                        em.vec("add", sc, z, sc, z, tq, tkv, mt, z, bmode="tile")
                    else:
                        em.dma(mask2, [mrow, j0], mt, z, [1, tkv])
                        em.vec("add", sc, z, sc, z, tq, tkv, mt, z, bmode="row")
                em.vec("rmax", tmp, z, sc, z, tq, tkv)
                em.vec("max", mn, z, m, z, tq, 1, tmp, z, bmode="tile")
                em.vec("sub", tmp, z, m, z, tq, 1, mn, z, bmode="tile")
                em.vec("exp", tmp, z, tmp, z, tq, 1)  # alpha = e^(m_old - m_new)
                em.vec("copy", m, z, mn, z, tq, 1)
                em.vec("sub", ps, z, sc, z, tq, tkv, mn, z, bmode="col")
                em.vec("exp", ps, z, ps, z, tq, tkv)
                em.vec("mul", lsum, z, lsum, z, tq, 1, tmp, z, bmode="tile")
                em.vec("mul", o, z, o, z, tq, Dv, tmp, z, bmode="col")
                em.vec("rsum", tmp, z, ps, z, tq, tkv)
                em.vec("add", lsum, z, lsum, z, tq, 1, tmp, z, bmode="tile")
                self.split(ps, ph, pl, tq, tkv)
                em.dma(v2, [em.add(em.mul(kvb, Skv), j0), 0], vs, z, [tkv, Dv])
                self.split(vs, vh, vl, tkv, Dv)
                mm3(ph, pl, vh, vl, o, tq, tkv, Dv)

            em.tiles(Skv, TKV, kvtile)
            em.vec("recip", tmp, z, lsum, z, tq, 1)
            em.vec("mul", o, z, o, z, tq, Dv, tmp, z, bmode="col")
            em.dma(o, z, out2, [qrow, 0], [tq, Dv])

        em.range(B, lambda b: em.range(Hkv, lambda hk: em.range(grp, lambda gi: em.tiles(
            Sq, TQ, lambda q0, tq: qtile(b, hk, gi, q0, tq)))))

    # -- structure ---------------------------------------------------------------
    def lower_transpose(self, op: g.TransposeOp) -> None:
        """Permuted DMA copies of big blocks through the scratchpad (lower_data.permute_copy)."""
        _ld.lower_transpose(self, op)

    def lower_batch_norm(self, op: g.BatchNormOp) -> None:
        vals = [self.const(v) for v in (op.scale, op.bias, op.mean, op.var)]
        if any(v is None for v in vals):
            raise _err(op, "batch_norm needs compile-time scale/bias/mean/var")
        s, b, m, v = (np.asarray(a, np.float64) for a in vals)
        k = s / np.sqrt(v + op.epsilon.value.data)
        shift = b - m * k
        shp = (1, len(k)) + (1,) * (len(_shape(op.input)) - 2)
        self._affine(op, op.input, k.astype(np.float32).reshape(shp), shift.astype(np.float32).reshape(shp), op.output)

    def _affine(self, op, x, scale, shift, result) -> None:
        """result = x * scale + shift with compile-time per-channel scale/shift."""
        ks = g.ConstantOp  # placeholder to satisfy typing
        _ = ks
        S = _shape(result)
        B, R, C = S[:1], S[1:2], S[2:]
        nb, M, N = _prod(B), _prod(R), _prod(C)
        out = self.out_buf(result)
        out2 = self.em.view(out, (nb * M, N))
        xv = self.em.view(self.buf(x), (nb * M, N))
        sc = self.weight("bn.scale", scale.reshape(M, 1).copy(), f32)
        sh = self.weight("bn.shift", shift.reshape(M, 1).copy(), f32)
        name = self.name()
        rc = tc.choose_rows(self.hw, M, N, bytes_in=4, bytes_out=4, vec_cost=2, live_tiles=3,
                            override=(o[0] if (o := self.override(name, 1)) else None),
                            footprint=lambda tr, tcn: tr * tcn * 8 + 2 * tr * 8)  # x x2, scale/shift columns x2
        self.debug(tc.describe_rows(name, "batch_norm", "x".join(map(str, S)), rc))
        em = self.em
        xt = em.alloc((rc.rows, rc.cols), f32, "spad", 2)
        st = em.alloc((rc.rows, 1), f32, "spad", 2)
        ht = em.alloc((rc.rows, 1), f32, "spad", 2)
        z = [0, 0]

        def body(b: Index, r0: Index, rows: int, c0: Index, cols: int) -> None:
            row = em.add(em.mul(b, M), r0)
            em.dma(xv, [row, c0], xt, z, [rows, cols])
            em.dma(sc, [r0, 0], st, z, [rows, 1])
            em.dma(sh, [r0, 0], ht, z, [rows, 1])
            em.vec("mul", xt, z, xt, z, rows, cols, st, z, bmode="col")
            em.vec("add", xt, z, xt, z, rows, cols, ht, z, bmode="col")
            em.dma(xt, z, out2, [row, c0], [rows, cols])

        em.range(nb, lambda b: em.tiles(M, rc.rows, lambda r0, rows: em.tiles(
            N, rc.cols, lambda c0, cols: body(b, r0, rows, c0, cols))))


_UNSUPPORTED_EW = {"graph.not", "graph.and", "graph.or", "graph.xor", "graph.equal", "graph.less",
                   "graph.less_equal", "graph.greater", "graph.greater_equal", "graph.mod",
                   "graph.sign", "graph.log", "graph.erf", "graph.sin", "graph.cos", "graph.floor",
                   "graph.ceil", "graph.round", "graph.softplus"}

_OTHER: dict[str, Callable[[FunctionLowering, Operation], None]] = {
    "graph.max_pool2d": FunctionLowering.lower_pool,
    "graph.avg_pool2d": FunctionLowering.lower_pool,
    "graph.global_avg_pool": FunctionLowering.lower_global_pool,
    "graph.global_max_pool": FunctionLowering.lower_global_pool,
    "graph.layer_norm": FunctionLowering.lower_rowwise,
    "graph.rms_norm": FunctionLowering.lower_rowwise,
    "graph.softmax": FunctionLowering.lower_rowwise,
    "graph.log_softmax": FunctionLowering.lower_rowwise,
    "graph.attention": FunctionLowering.lower_attention,
    "graph.transpose": FunctionLowering.lower_transpose,
}


def _shape_t(ty: Attribute) -> tuple[int, ...]:
    assert isinstance(ty, TensorType)
    return tuple(ty.get_shape())


def parse_overrides(text: str) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for item in filter(None, (s.strip() for s in text.replace(";", ",").split(","))):
        if "=" not in item:
            raise LoweringError(f"error: graph-to-tile: override '{item}' must be NAME=TMxTNxTK")
        k, v = item.split("=", 1)
        try:
            sizes = tuple(int(x) for x in v.lower().split("x"))
        except ValueError:
            raise LoweringError(f"error: graph-to-tile: override '{item}': sizes must be integers") from None
        if any(s < 1 for s in sizes):
            raise LoweringError(f"error: graph-to-tile: override '{item}': sizes must be positive")
        out[k.strip()] = sizes
    return out


@dataclass(frozen=True)
class GraphToTilePass(ModulePass):
    """Lower graph functions to tile-level DRAM functions with cost-model tiling.

    Options:
      target: the hardware config whose tiles and memories the kernels are sized for
        ("edge", "server" or a TOML path).
      precision: "fp32" (matmul products as three bf16 passes) or "bf16" (bf16 inputs,
        fp32 accumulation).
      overrides: tile sizes that replace the cost model's choice, per kernel:
        "kernel3=64x64x32,kernel5=8" (names as printed by debug-tiling).
      debug-tiling: print why each kernel's tile sizes were chosen (on stderr).
    """

    name = "graph-to-tile"

    target: str = "edge"
    precision: str = "fp32"
    overrides: str = ""
    debug_tiling: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.precision not in ("fp32", "bf16"):
            raise LoweringError(f"error: graph-to-tile: precision must be fp32 or bf16, got '{self.precision}'")
        try:
            hw = load_config(self.target)
        except Exception as e:
            raise LoweringError(f"error: graph-to-tile: {e}") from None
        if "bf16" not in hw.matrix.dtypes:
            raise LoweringError(f"error: graph-to-tile: target '{hw.name}' has no bf16 matrix unit")
        c = Ctx(hw, self.precision, parse_overrides(self.overrides), self.debug_tiling, op)
        weights_of(op)
        for fn in list(op.ops):
            if not isinstance(fn, func.FuncOp) or fn.is_declaration:
                continue
            new = FunctionLowering(c, fn).run()
            op.body.block.insert_op_before(new, fn)
            fn.detach()
            fn.erase()
        op.attributes[t.TARGET_ATTR] = StringAttr(self.target)


_ = (bf16, i1, field)

from infer.passes import lower_data as _ld  # noqa: E402  (uses the helpers above)

_OTHER.update({
    "graph.slice": _ld.lower_slice,
    "graph.concat": _ld.lower_concat,
    "graph.broadcast": _ld.lower_broadcast,
    "graph.pad": _ld.lower_pad,
    "graph.reduce_sum": _ld.lower_reduce,
    "graph.reduce_mean": _ld.lower_reduce,
    "graph.reduce_max": _ld.lower_reduce,
    "graph.reduce_min": _ld.lower_reduce,
    "graph.reduce_prod": _ld.lower_reduce,
    "graph.gather": _ld.lower_gather,
    "graph.rotary": _ld.lower_rotary,
})
