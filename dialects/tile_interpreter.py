"""Reference interpreter for tile-level IR (the `tile` dialect + scf/arith/func).

Tile-level IR is run on xDSL's `Interpreter`: `TileFunctions` implements the
tile ops, xDSL's `ScfFunctions`, `ArithFunctions` and `FuncFunctions` run
`scf.for`/`scf.if`, index arithmetic and calls (`IndexArithFunctions` adds the
`arith.minsi`, `arith.maxsi` and `arith.ceildivsi` xDSL 0.75 lacks).

Runtime values
- Every memref is a C-contiguous numpy array of the memref's shape and element
  type (bf16 is `ml_dtypes.bfloat16`): function arguments in DRAM, weights,
  DRAM activations and local (spad/acc) tile buffers alike. Memory spaces and
  `offset`s only matter to the hardware: `tile.alloc` makes a fresh zeroed
  array each time it runs, so two buffers never alias unless one is a
  `tile.view` of the other (a reshaped view of the same array: writes through
  either are seen by both).
- Index values are xDSL's runtime integers (the `IntegerAttr`s xDSL's
  arith/scf interpreters produce); tile ops read them as Python ints. A tile
  whose box leaves its buffer (origin < 0 or origin + extent > size) is an
  `InterpreterError`.
- `tile.weight @name` reads the module's weight store (`weights_of(module)`,
  or the `weights=` argument) and must match the memref's dtype and shape; the
  array is read-only (a kernel writing a weight is an error).

Numerics: exactly those of the instruction-set simulator (`infer.target.sim`),
so a tile program and the npu program it lowers to compute the same bits.
- `tile.matmul`: bf16 operands are converted to fp32, multiplied with an fp32
  matmul and accumulated in fp32 (`acc += r` or `acc = r`); i8 operands are
  multiplied exactly, the accumulator (int32) is added in int64 and the sum
  saturates to int32 (as `mx.matmul`).
- `tile.vector`: `infer.target.sim.VECTOR_FUNCTIONS[op]` in the simulator's
  compute type: fp32 if a or b is a float type, if the op is transcendental
  (`infer.target.sim_core.TRANSCENDENTAL`: gelu, gelu_erf, erf, exp, ...) or
  requant, or if an `imm` is not an integer; int64 otherwise. The result is stored with
  `infer.target.sim.store_converted` (float -> int rounds half to even and
  saturates, int -> int saturates, float -> bf16 rounds to nearest even). For
  `bmode = imm` the immediate is rounded to fp32 and counts as an integer
  operand when it is integral (the tile -> npu lowering encodes `bt` as an
  integer type then, unless a is a float type).
- `tile.fill`: the fp32 value stored with `store_converted`.
- `tile.dequant`: `infer.target.sim_core.dequant_compute`, the function the
  simulator runs for `vec.dequant` (exact products, q4_1's add rounded once in
  fp32, then stored as f32 or bf16).
- `tile.dma`: a bit copy, dst[j + b] = src[i + b * step].
- `tile.gather_rows`: a bit copy of the rows `table[idx[k]]`; i64 indices are
  read as their low 32 bits (sign-extended, as the ISA's `ld`); an index outside
  [0, table rows) is an `InterpreterError`.

Calling convention (destination-passing style)
- A tile-level function takes its inputs as DRAM memrefs first, then one DRAM
  memref per output. Output arguments carry the argument attribute
  `tile.output` (a unit attribute, or `true`); every argument may carry
  `graph.name` (the graph-level name of the input or output).
- The function returns nothing (if it does return memrefs, their contents are
  appended to the outputs).
- `run_tile_module(module, inputs)` binds `inputs` (by position, or by
  `graph.name` / "arg<i>" of the input arguments) to fresh copies, passes a
  zeroed array for each output argument, runs the function, and returns the
  output arguments' contents after the call, in argument order.

Public API
- `run_tile_module(module, inputs, entry="main", weights=None) -> list[np.ndarray]`
- `is_tile_function(fn)`: whether a function takes memrefs (tile level).
- `output_arguments(fn)`: the indices of the `tile.output` arguments.
- `TileFunctions`, `IndexArithFunctions`: the xDSL interpreter functions.
- Errors are `infer.dialects.graph_interpreter.InterpreterError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
)
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls
from xdsl.interpreters.arith import ArithFunctions
from xdsl.interpreters.builtin import scalar_attr
from xdsl.interpreters.func import FuncFunctions
from xdsl.interpreters.scf import ScfFunctions
from xdsl.ir import Operation, SSAValue

from infer.dialects import tile as t
from infer.dialects.dtypes import element_type_name, to_numpy_dtype
from infer.dialects.graph_interpreter import INPUT_NAME_ATTR, InterpreterError
from infer.dialects.graph_interpreter.core import Env, describe_op, find_entry, select_inputs
from infer.dialects.graph_interpreter.runner import call_function
from infer.dialects.weight_refs import stored_weight
from infer.dialects.weights import WeightStore, WeightStoreError
from infer.target.sim import VECTOR_FUNCTIONS, store_converted
from infer.target.sim_core import TRANSCENDENTAL, DequantSpec, dequant_compute

__all__ = [
    "OUTPUT_ATTR",
    "IndexArithFunctions",
    "InterpreterError",
    "TileFunctions",
    "is_tile_function",
    "output_arguments",
    "run_tile_module",
]

OUTPUT_ATTR = "tile.output"
"""Function argument attribute marking an output (destination) memref."""
ALIAS_ATTR = t.ALIAS_ATTR

# isa dtype codes of the vector unit's element types (infer.target.isa.DTYPES)
_DT_CODE = {"i8": 0, "i32": 1, "f32": 2, "bf16": 3}


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _fmt(shape: Sequence[int]) -> str:
    return "x".join("?" if d < 0 else str(d) for d in shape) or "scalar"


def _memref_type(value: SSAValue | MemRefType) -> MemRefType:
    ty = value if isinstance(value, MemRefType) else value.type
    if not isinstance(ty, MemRefType):
        raise InterpreterError(f"expected a memref, got {ty}")
    return ty


def _np_dtype(ty: MemRefType) -> np.dtype:
    try:
        return to_numpy_dtype(ty.get_element_type())
    except ValueError as e:
        raise InterpreterError(str(e)) from None


def _static_shape(ty: MemRefType) -> tuple[int, ...]:
    shape = tuple(ty.get_shape())
    if any(d < 0 for d in shape):
        raise InterpreterError(f"memref {_fmt(shape)} has a dynamic dimension")
    return shape


def _index(v: Any) -> int:
    if isinstance(v, IntegerAttr):
        return int(v.value.data)
    if isinstance(v, int | np.integer):
        return int(v)
    raise InterpreterError(f"expected an index value, got {v!r}")


def _box(what: str, arr: np.ndarray, origin: Sequence[Any], extent: Sequence[int],
         steps: Sequence[int] | None = None) -> np.ndarray:
    """The view arr[origin + b * step] for b < extent (bounds-checked); a step of 0 keeps
    that dim at extent 1 (the destination's copy broadcasts it)."""
    idx = [_index(i) for i in origin]
    steps = steps or (1,) * len(extent)
    if len(idx) != arr.ndim or len(extent) != arr.ndim:
        raise InterpreterError(
            f"{what}: a rank-{arr.ndim} buffer addressed with {len(idx)} indices and a "
            f"{len(extent)}-d tile"
        )
    slices = []
    for d, (i, e, s, size) in enumerate(zip(idx, extent, steps, arr.shape, strict=True)):
        last = i + (e - 1) * s
        if i < 0 or last >= size:
            span = f"[{i}, {last + 1})" + (f" step {s}" if s != 1 else "")
            raise InterpreterError(
                f"{what}: tile {span} in dim {d} is outside the buffer ({_fmt(arr.shape)})"
            )
        slices.append(slice(i, last + 1, s) if s else slice(i, i + 1))
    return arr[tuple(slices)]


def _located(fn: Any) -> Any:
    """Wrap an impl so errors name the op (`... [at %x = tile.dma in @main]`)."""

    def run(self: Any, interpreter: Interpreter, op: Operation, args: tuple[Any, ...]) -> Any:
        try:
            return fn(self, interpreter, op, args)
        except InterpreterError as e:
            raise InterpreterError(f"{e} [at {describe_op(op)}]") from None
        except (ValueError, TypeError) as e:  # numpy: read-only weights, bad broadcasts
            raise InterpreterError(f"{op.name}: {e} [at {describe_op(op)}]") from None

    run.__name__ = fn.__name__
    return run


# --------------------------------------------------------------------------
# tile ops
# --------------------------------------------------------------------------


@register_impls
class TileFunctions(InterpreterFunctions):
    """xDSL interpreter functions for the tile ops. `weights` defaults to the
    weight store of the module being run."""

    def __init__(self, weights: WeightStore | None = None, module: ModuleOp | None = None):
        self.env = Env(weights, module)

    @impl(t.AllocOp)
    @_located
    def run_alloc(self, interpreter: Interpreter, op: t.AllocOp, args: tuple[Any, ...]):
        ty = _memref_type(op.buffer)
        return (np.zeros(_static_shape(ty), _np_dtype(ty)),)

    @impl(t.WeightOp)
    @_located
    def run_weight(self, interpreter: Interpreter, op: t.WeightOp, args: tuple[Any, ...]):
        try:
            arr = stored_weight(op, self.env.weights(op))
        except (WeightStoreError, ValueError) as e:
            raise InterpreterError(f"{op.name} @{op.weight_key}: {e}") from None
        view = np.ascontiguousarray(arr).view()
        view.flags.writeable = False
        return (view,)

    @impl(t.ViewOp)
    @_located
    def run_view(self, interpreter: Interpreter, op: t.ViewOp, args: tuple[Any, ...]):
        (src,) = args
        shape = _static_shape(_memref_type(op.result))
        try:
            return (np.reshape(src, shape, copy=False),)
        except ValueError as e:  # not contiguous: cannot happen for buffers we create
            raise InterpreterError(f"cannot view {_fmt(src.shape)} as {_fmt(shape)}: {e}") from None

    @impl(t.DmaOp)
    @_located
    def run_dma(self, interpreter: Interpreter, op: t.DmaOp, args: tuple[Any, ...]):
        nsrc = len(op.src_indices)
        src, *rest = args
        src_idx, (dst, *dst_idx) = rest[:nsrc], rest[nsrc:]
        box = t._ints(op.shape)
        s = _box("dma source", src, src_idx, box, op.steps())
        d = _box("dma destination", dst, dst_idx, box)
        if s.dtype != d.dtype:  # (the verifier's rule: numpy's copy would convert where the engine copies bytes)
            raise InterpreterError(f"a DMA copies bytes: element types differ ({s.dtype} vs {d.dtype})")
        np.copyto(d, s)
        return ()

    @impl(t.MatmulOp)
    @_located
    def run_matmul(self, interpreter: Interpreter, op: t.MatmulOp, args: tuple[Any, ...]):
        nl, nr = len(op.lhs_indices), len(op.rhs_indices)
        lhs, *rest = args
        lhs_idx, rest = rest[:nl], rest[nl:]
        rhs, *rest = rest
        rhs_idx, (acc, *acc_idx) = rest[:nr], rest[nr:]
        m, k, n = op.m.value.data, op.k.value.data, op.n.value.data
        a = _box("lhs", lhs, lhs_idx, (m, k))
        if op.transpose_rhs.value.data:  # (C order, as the simulator's weight buffer holds it)
            w = np.ascontiguousarray(_box("rhs", rhs, rhs_idx, (n, k)).T)
        else:
            w = _box("rhs", rhs, rhs_idx, (k, n))
        out = _box("acc", acc, acc_idx, (m, n))
        accumulate = bool(op.accumulate.value.data)
        matmul_tile(a, w, out, accumulate)
        return ()

    @impl(t.VectorOp)
    @_located
    def run_vector(self, interpreter: Interpreter, op: t.VectorOp, args: tuple[Any, ...]):
        nd, na = len(op.dst_indices), len(op.a_indices)
        dst, *rest = args
        dst_idx, rest = rest[:nd], rest[nd:]
        a_buf, *rest = rest
        a_idx, rest = rest[:na], rest[na:]
        b_buf = rest[0] if op.b else None
        b_idx = rest[1:] if op.b else ()
        name = op.op.data
        if name not in VECTOR_FUNCTIONS:
            raise InterpreterError(f"unknown vector op '{name}'")
        vop = op.OPS[name]
        binary = vop.reads_b
        rows, cols = op.rows.value.data, op.cols.value.data
        at = _DT_CODE[element_type_name(_memref_type(op.a).get_element_type())]
        dt = _DT_CODE[element_type_name(_memref_type(op.dst).get_element_type())]
        bmode = op.bmode.data if op.bmode is not None else None
        imm = np.float32(op.imm.value.data) if op.imm is not None else None
        float_in = at >= 2
        if binary:
            if bmode == "imm":
                if imm is None:
                    raise InterpreterError("bmode = imm without an `imm` attribute")
                float_in = float_in or not float(imm).is_integer()
            else:
                bt = _DT_CODE[element_type_name(_memref_type(op.b[0]).get_element_type())]
                float_in = float_in or bt >= 2
        use_float = float_in or name in TRANSCENDENTAL or name == "requant"
        ctype = np.float32 if use_float else np.int64
        a = _box("a", a_buf, a_idx, (rows, cols)).astype(ctype)
        dshape = (rows, 1) if vop.reduces_rows else (rows, cols)
        d = _box("dst", dst, dst_idx, dshape)
        fn = VECTOR_FUNCTIONS[name]
        b: Any = None
        if binary:
            if bmode == "imm":
                b = imm if use_float else np.int64(int(imm))  # type: ignore[arg-type]
            else:
                bbox = {"tile": (rows, cols), "row": (1, cols), "col": (rows, 1)}.get(bmode or "")
                if bbox is None:
                    raise InterpreterError(f"bad bmode {bmode!r}")
                b = _box("b", b_buf, b_idx, bbox).astype(ctype)  # type: ignore[arg-type]
        with np.errstate(all="ignore"):
            r = fn(a, b) if binary else fn(a)
            store_converted(d, r, dt)
        return ()

    @impl(t.GatherRowsOp)
    @_located
    def run_gather_rows(self, interpreter: Interpreter, op: t.GatherRowsOp, args: tuple[Any, ...]):
        table, c0, idx_buf, i0, dst, *dst_idx = args
        rows, cols = op.rows.value.data, op.cols.value.data
        raw = _box("indices", idx_buf, [i0], (rows,))
        if raw.dtype == np.int64:  # the low 32 bits (little endian), sign-extended: what `ld` reads
            idx = (raw & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)
        else:
            idx = raw.astype(np.int64)
        V = table.shape[0]
        bad = (idx < 0) | (idx >= V)
        if bad.any():
            k = int(np.argmax(bad))
            raise InterpreterError(
                f"tile.gather_rows: index {int(idx[k])} (#{_index(i0) + k}) is outside the table's "
                f"{V} rows (no wrap-around of negative indices)"
            )
        src = _box("table", table, [0, c0], (V, cols))
        d = _box("dst", dst, dst_idx, (rows, cols))
        np.copyto(d, src[idx])
        return ()

    @impl(t.ScatterRowsOp)
    @_located
    def run_scatter_rows(self, interpreter: Interpreter, op: t.ScatterRowsOp, args: tuple[Any, ...]):
        ns = len(op.src_indices)
        src, src_idx, (idx_buf, i0, table, c0) = args[0], args[1:1 + ns], args[1 + ns:]
        rows, cols = op.rows.value.data, op.cols.value.data
        idx = _box("indices", idx_buf, [i0], (rows,)).astype(np.int64)
        V = table.shape[0]
        bad = (idx < 0) | (idx >= V)
        if bad.any():
            k = int(np.argmax(bad))
            raise InterpreterError(
                f"tile.scatter_rows: index {int(idx[k])} (#{_index(i0) + k}) is outside the table's {V} rows"
            )
        s = _box("src", src, src_idx, (rows, cols))
        dst = _box("table", table, [0, c0], (V, cols))
        for k in range(rows):  # in order: a repeated index keeps the later row (as the DMA stores)
            dst[idx[k]] = s[k]
        return ()

    @impl(t.LoadIndexOp)
    @_located
    def run_load_index(self, interpreter: Interpreter, op: t.LoadIndexOp, args: tuple[Any, ...]):
        buf, *at = args
        value = int(_box("buffer", buf, at, (1,) * len(at)).reshape(-1)[0])
        if not 0 <= value <= op.bound.value.data:
            raise InterpreterError(f"tile.load_index: {value} is outside 0 .. {op.bound.value.data} (its bound)")
        return (scalar_attr(int(value), IndexType(), interpreter.index_bitwidth),)

    @impl(t.DequantOp)
    @_located
    def run_dequant(self, interpreter: Interpreter, op: t.DequantOp, args: tuple[Any, ...]):
        nd, nq = len(op.dst_indices), len(op.codes_indices)
        dst, *rest = args
        dst_idx, rest = rest[:nd], rest[nd:]
        codes, *rest = rest
        codes_idx, rest = rest[:nq], rest[nq:]
        scales, *scales_idx = rest
        fmt, axis = op.isa_codes()
        codes_box, scales_box = op.boxes()
        d = _box("dst", dst, dst_idx, (op.rows.value.data, op.cols.value.data))
        dt = _DT_CODE[element_type_name(_memref_type(op.dst).get_element_type())]
        with np.errstate(all="ignore"):  # inf * 0 is NaN, as on the vector unit
            dequant_compute(DequantSpec(fmt, axis), _box("codes", codes, codes_idx, codes_box),
                            _box("scales", scales, scales_idx, scales_box), d, dt)
        return ()

    @impl(t.FillOp)
    @_located
    def run_fill(self, interpreter: Interpreter, op: t.FillOp, args: tuple[Any, ...]):
        dst, *idx = args
        d = _box("dst", dst, idx, (op.rows.value.data, op.cols.value.data))
        dt = _DT_CODE.get(element_type_name(_memref_type(op.dst).get_element_type()))
        value = np.float32(op.value.value.data)
        with np.errstate(all="ignore"):
            if dt is None:
                d[...] = value
            else:
                store_converted(d, value, dt)
        return ()


def matmul_tile(a: np.ndarray, w: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
    """out (+)= a @ w with `mx.matmul`'s numerics (a, w: bf16 or int8 views; out: the
    fp32 or int32 accumulator view, updated in place)."""
    if np.issubdtype(a.dtype, np.integer):
        # exact: |products| < 2^14 and k is far below 2^39 (the simulator's fp32/fp64
        # matmul is exact for its array sizes too)
        r = (a.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
        if accumulate:
            r += out
        np.clip(r, -(2**31), 2**31 - 1, out=r)
        out[...] = r
    else:
        r = a.astype(np.float32) @ w.astype(np.float32)
        if accumulate:
            out += r
        else:
            out[...] = r


def _binary_index_op(fn: Any) -> Any:
    def run(self: Any, interpreter: Interpreter, op: Operation, args: tuple[Any, ...]) -> Any:
        lhs, rhs = (_index(x) for x in args)
        return (scalar_attr(fn(lhs, rhs), op.results[0].type, interpreter.index_bitwidth),)

    return run


def _ceildiv(x: int, y: int) -> int:
    if y == 0:
        raise InterpreterError("arith.ceildivsi: division by zero")
    return -((-x) // y)


@register_impls
class IndexArithFunctions(InterpreterFunctions):
    """arith ops on index/integers that xDSL 0.75's ArithFunctions lacks."""

    run_minsi = impl(arith.MinSIOp)(_binary_index_op(min))
    run_maxsi = impl(arith.MaxSIOp)(_binary_index_op(max))
    run_ceildivsi = impl(arith.CeilDivSIOp)(_binary_index_op(_ceildiv))


# --------------------------------------------------------------------------
# module execution
# --------------------------------------------------------------------------


def is_tile_function(fn: func.FuncOp) -> bool:
    """True if the function takes or returns memrefs (tile level)."""
    types = [*fn.function_type.inputs.data, *fn.function_type.outputs.data]
    return any(isinstance(ty, MemRefType) for ty in types)


def _arg_attrs(fn: func.FuncOp) -> list[dict[str, Any]]:
    n = len(fn.function_type.inputs.data)
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    if fn.arg_attrs is not None:
        for i, attrs in enumerate(fn.arg_attrs.data):
            if isinstance(attrs, DictionaryAttr):
                out[i] = dict(attrs.data)
    return out


def output_arguments(fn: func.FuncOp) -> list[int]:
    """Indices of the arguments marked `tile.output` (unit attribute or true)."""
    outs = []
    for i, attrs in enumerate(_arg_attrs(fn)):
        a = attrs.get(OUTPUT_ATTR)
        if isinstance(a, UnitAttr) or (isinstance(a, IntegerAttr) and a.value.data != 0):
            outs.append(i)
    return outs


def _bind(fn: func.FuncOp, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
    types = list(fn.function_type.inputs.data)
    outs = set(output_arguments(fn))
    attrs = _arg_attrs(fn)
    fname = fn.sym_name.data
    in_idx = [i for i in range(len(types)) if i not in outs]
    if in_idx and outs and max(in_idx) > min(outs):
        raise InterpreterError(f"@{fname}: output arguments must follow the inputs")
    names = {}
    for i in in_idx:
        nm = attrs[i].get(INPUT_NAME_ATTR)
        names[i] = nm.data if isinstance(nm, StringAttr) else f"arg{i}"
    values = select_inputs(fname, [names[i] for i in in_idx], inputs)
    args: list[np.ndarray] = []
    for i, ty in enumerate(types):
        if not isinstance(ty, MemRefType):
            raise InterpreterError(f"@{fname}: argument #{i} is a {ty}, not a memref")
        dt, shape = _np_dtype(ty), _static_shape(ty)
        if i in outs:
            tied = attrs[i].get(ALIAS_ATTR)
            if isinstance(tied, IntegerAttr):  # written in place: the input's own array
                j = int(tied.value.data)
                if j in outs or not 0 <= j < i or tuple(args[j].shape) != shape or args[j].dtype != dt:
                    raise InterpreterError(f"@{fname}: output #{i} is tied ({ALIAS_ATTR}) to argument "
                                           f"#{j}, which is not an input of its type")
                args.append(args[j])
                continue
            args.append(np.zeros(shape, dt))
            continue
        v = np.asarray(values[in_idx.index(i)])
        name = names[i]
        if v.dtype != dt:
            raise InterpreterError(f"@{fname}: input '{name}' (#{i}): expected dtype {dt}, got {v.dtype}")
        if tuple(v.shape) != shape:
            raise InterpreterError(
                f"@{fname}: input '{name}' (#{i}): expected shape {_fmt(shape)}, got {_fmt(v.shape)}"
            )
        args.append(np.array(v, dtype=dt, order="C", copy=True))
    return args


def run_tile_module(
    module: ModuleOp,
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
    entry: str = "main",
    weights: WeightStore | None = None,
) -> list[np.ndarray]:
    """Run tile-level function `entry` of `module` (see the calling convention in
    the module docstring): returns the contents of its `tile.output` arguments
    after the call (then any memrefs it returns)."""
    fn = find_entry(module, entry)
    args = _bind(fn, inputs)
    outs = output_arguments(fn)
    interpreter = Interpreter(module)
    interpreter.register_implementations(TileFunctions(weights, module))
    interpreter.register_implementations(ScfFunctions())
    interpreter.register_implementations(ArithFunctions())
    interpreter.register_implementations(IndexArithFunctions(), override=True)
    interpreter.register_implementations(FuncFunctions())
    results = call_function(interpreter, fn, args)
    out = [args[i].copy() for i in outs]
    for i, r in enumerate(results):
        if not isinstance(r, np.ndarray):
            raise InterpreterError(f"@{entry}: result #{i} is not a memref ({r!r})")
        out.append(np.array(r, copy=True))
    return out
