"""Running graph ops: one op on arrays (`evaluate_op`), `graph.kernel` regions, the xDSL
interpreter functions for every graph op (`GraphFunctions`) and whole functions of a module
(`run_module`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr, TensorType
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.ir import Operation

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_name, format_shape, to_numpy_dtype
# the kernel families: importing each registers its kernels in KERNELS, which GraphFunctions below
# reads (and checks complete)
from infer.dialects.graph_interpreter import elementwise, nn, quant, structure, transformer  # noqa: F401
from infer.dialects.graph_interpreter.core import (
    INPUT_NAME_ATTR,
    KERNELS,
    ConstantCache,
    Env,
    describe_op,
    find_entry,
    finish,
    InterpreterError,
    kernel_for,
    select_inputs,
    shape_matches,
)
from infer.dialects.weights import WeightStore
from infer.target.blas import one_blas_thread


# -- fusion groups ---------------------------------------------------------------------------------


@kernel_for(g.KernelOp)
def _kernel_region(op: g.KernelOp, xs: list[np.ndarray], env: Env) -> list[np.ndarray]:
    """Run the body on the operands, op by op (as the xDSL interpreter does in run_module)."""
    values: dict[Any, np.ndarray] = dict(zip(op.body.block.args, xs, strict=True))
    for inner in op.body.block.ops:
        args = [values[v] for v in inner.operands]
        if isinstance(inner, g.YieldOp):
            return args
        for result, value in zip(inner.results, _evaluate(inner, args, env), strict=True):
            values[result] = value
    raise InterpreterError(f"{op.name}: the body does not end with graph.yield")


@kernel_for(g.YieldOp)
def _yield(op: g.YieldOp, xs: list[np.ndarray], env: Env) -> list[np.ndarray]:
    raise InterpreterError(f"{op.name} is evaluated as the terminator of its graph.kernel")


# --------------------------------------------------------------------------
# Single-op evaluation
# --------------------------------------------------------------------------


def _check_operands(op: Operation, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(inputs) != len(op.operands):
        raise InterpreterError(
            f"{op.name}: expected {len(op.operands)} operand value(s), got {len(inputs)}"
        )
    arrays = []
    for i, (value, x) in enumerate(zip(op.operands, inputs)):
        arr = np.asarray(x)
        t = value.type
        if isinstance(t, TensorType):
            dt = to_numpy_dtype(t.get_element_type())
            if arr.dtype != dt:
                raise InterpreterError(
                    f"{op.name}: operand #{i} expects dtype {dt} "
                    f"({element_type_name(t.get_element_type())}), got {arr.dtype}"
                )
            if not shape_matches(arr.shape, t.get_shape()):
                raise InterpreterError(
                    f"{op.name}: operand #{i} expects shape {format_shape(t.get_shape())}, got {format_shape(arr.shape)}"
                )
        arrays.append(arr)
    return arrays


def _evaluate(op: Operation, inputs: list[np.ndarray], env: Env) -> list[np.ndarray]:
    kernel = KERNELS.get(type(op))
    if kernel is None:
        raise InterpreterError(f"no graph interpreter kernel for op {op.name}")
    try:
        with np.errstate(all="ignore"):
            value = kernel(op, inputs, env)
    except InterpreterError:
        raise
    except Exception as e:  # a kernel bug or an unsupported corner: still an interpreter error
        raise InterpreterError(f"{op.name}: {type(e).__name__}: {e}") from e
    return finish(op, value if isinstance(value, list) else [value])


def evaluate_op(
    op: Operation, inputs: Sequence[np.ndarray], weights: WeightStore | None = None
) -> list[np.ndarray]:
    """Evaluate one graph op on operand arrays; returns one array per result, with
    exactly the result's dtype and shape. `weights` serves `graph.weight` (default:
    the weight store of the module enclosing `op`)."""
    arrays = _check_operands(op, inputs)
    return _evaluate(op, arrays, Env(weights, None))


# --------------------------------------------------------------------------
# xDSL interpreter functions
# --------------------------------------------------------------------------


class _GraphFunctionsBase(InterpreterFunctions):
    """Evaluates graph ops on numpy arrays; holds the weight store."""

    def __init__(self, weights: WeightStore | None = None, module: ModuleOp | None = None,
                 constant_cache: ConstantCache | None = None):
        self.env = Env(weights, module, constant_cache)


def _make_impl(op_type: type[Operation]) -> Any:
    def run(self: _GraphFunctionsBase, interpreter: Interpreter, op: Operation, args: tuple[Any, ...]):
        cache = self.env.constant_cache
        key = cache.key(op) if cache is not None else None
        if key is not None and (hit := cache.get(key)) is not None:  # type: ignore[union-attr]
            return hit
        try:
            values = tuple(_evaluate(op, [np.asarray(a) for a in args], self.env))
        except InterpreterError as e:
            raise InterpreterError(f"{e} [at {describe_op(op)}]") from None
        if key is not None:
            cache.put(key, values)  # type: ignore[union-attr]
        return values

    run.__name__ = f"run_{op_type.name.split('.', 1)[1]}"
    return impl(op_type)(run)


@impl(g.KernelOp)
def _run_kernel(self: _GraphFunctionsBase, interpreter: Interpreter, op: g.KernelOp, args: tuple[Any, ...]):
    values = interpreter.run_ssacfg_region(op.body, args, op.name)
    try:
        return tuple(finish(op, [np.asarray(v) for v in values]))
    except InterpreterError as e:
        raise InterpreterError(f"{e} [at {describe_op(op)}]") from None


@impl_terminator(g.YieldOp)
def _run_yield(self: _GraphFunctionsBase, interpreter: Interpreter, op: g.YieldOp, args: tuple[Any, ...]):
    return ReturnedValues(args), ()


_REGION_IMPLS = {g.KernelOp: _run_kernel, g.YieldOp: _run_yield}

GraphFunctions = register_impls(
    type(
        "GraphFunctions",
        (_GraphFunctionsBase,),
        {
            "__doc__": "xDSL interpreter functions for every graph op (one @impl per op; "
            "graph.kernel runs its body with run_ssacfg_region, graph.yield returns its operands).",
            **{
                f"run_{t.name.split('.', 1)[1]}": _REGION_IMPLS.get(t) or _make_impl(t)
                for t in KERNELS
            },
        },
    )
)

_missing = [t.name for t in g.Graph.operations if t not in KERNELS]
assert not _missing, f"graph ops without an interpreter kernel: {_missing}"


# --------------------------------------------------------------------------
# Module execution
# --------------------------------------------------------------------------


def _arg_names(fn: func.FuncOp) -> list[str]:
    names = [f"arg{i}" for i in range(len(fn.function_type.inputs.data))]
    if fn.arg_attrs is not None:
        for i, attrs in enumerate(fn.arg_attrs.data):
            if isinstance(attrs, DictionaryAttr):
                name = attrs.data.get(INPUT_NAME_ATTR)
                if isinstance(name, StringAttr):
                    names[i] = name.data
    return names


def _bind_inputs(
    fn: func.FuncOp, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    types = list(fn.function_type.inputs.data)
    names = _arg_names(fn)
    fname = fn.sym_name.data
    values = select_inputs(fname, names, inputs)
    arrays = []
    for i, (name, t, v) in enumerate(zip(names, types, values)):
        arr = np.asarray(v)
        if isinstance(t, TensorType):
            dt = to_numpy_dtype(t.get_element_type())
            ename = element_type_name(t.get_element_type())
            if arr.dtype != dt:
                raise InterpreterError(
                    f"@{fname}: input '{name}' (#{i}): expected dtype {dt} ({ename}), got {arr.dtype}"
                )
            if not shape_matches(arr.shape, t.get_shape()):
                raise InterpreterError(
                    f"@{fname}: input '{name}' (#{i}): expected shape {format_shape(t.get_shape())}, "
                    f"got {format_shape(arr.shape)}"
                )
        arrays.append(arr)
    return arrays


def innermost_interpreter_error(e: BaseException | None) -> InterpreterError | None:
    """The InterpreterError a failure inside xDSL's interpreter wraps, if any."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, InterpreterError):
            return e
        e = e.__cause__ or e.__context__
    return None


def call_function(interpreter: Interpreter, fn: func.FuncOp, args: Sequence[Any]) -> tuple[Any, ...]:
    """Run `fn` on `args` with xDSL's interpreter; a failure is one InterpreterError (the
    innermost one a kernel raised, or the exception named with the function). Products run
    on one BLAS thread, as the simulator's: their bits depend on the thread count
    (target/blas.py), and the tile interpreter is the simulator's bit-for-bit reference."""
    try:
        with one_blas_thread():
            return interpreter.call_op(fn, tuple(args))
    except Exception as e:
        inner = innermost_interpreter_error(e)
        if inner is not None:
            # a fresh exception: xDSL attaches the whole printed module as a note
            raise InterpreterError(str(inner)) from None
        raise InterpreterError(f"@{fn.sym_name.data}: {type(e).__name__}: {e}") from e


class _TopLevelOps(Interpreter.Listener):
    """Reports every op of one function body (not the ops nested in its kernels) once run."""

    def __init__(self, fn: func.FuncOp, on_op: Callable[[int, Operation, list[np.ndarray]], None]):
        self.index = {op: i for i, op in enumerate(fn.body.block.ops)}
        self.on_op = on_op

    def did_interpret_op(self, op: Operation, results: tuple[Any, ...]) -> None:
        i = self.index.get(op)
        if i is not None:
            self.on_op(i, op, [np.asarray(r) for r in results])


def run_module(
    module: ModuleOp,
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
    entry: str = "main",
    weights: WeightStore | None = None,
    *,
    on_op: Callable[[int, Operation, list[np.ndarray]], None] | None = None,
    constant_cache: ConstantCache | None = None,
) -> list[np.ndarray]:
    """Run function `entry` of `module` on `inputs` (by position, or by name: the
    argument attribute `graph.name`, else "arg0", "arg1", ...). Returns the
    function's results as numpy arrays. `weights` defaults to `weights_of(module)`.

    `on_op(index, op, results)` (optional) is called after each op of the function body
    runs (index = the op's position in the body; a `graph.kernel` counts as one op, its
    region's ops are not reported): intermediate values by op, e.g. for a per-layer
    comparison. The callback decides what to keep.

    `constant_cache` (optional): a `ConstantCache` the caller keeps across runs of
    the same, unchanged module. Values that depend only on weights and constants (weights
    read from the store, dequantized weights, folded constants) are computed on
    the first run and reused by the next ones; a text generator that runs
    @decode once per token passes one. Results are the same with or without it."""
    # (imported here: importing any xdsl.interpreters module imports all of them, the RISC-V
    # dialects included, ~0.3 s of every process that only constant-folds or compiles)
    from xdsl.interpreters.func import FuncFunctions

    fn = find_entry(module, entry)
    arrays = _bind_inputs(fn, inputs)
    interpreter = Interpreter(module, listeners=(_TopLevelOps(fn, on_op),) if on_op is not None else ())
    interpreter.register_implementations(GraphFunctions(weights, module, constant_cache))
    interpreter.register_implementations(FuncFunctions())
    results = call_function(interpreter, fn, arrays)
    outs = []
    result_types = list(fn.function_type.outputs.data)
    for i, (r, t) in enumerate(zip(results, result_types)):
        arr = np.asarray(r)
        if isinstance(t, TensorType):
            dt = to_numpy_dtype(t.get_element_type())
            if arr.dtype != dt or not shape_matches(arr.shape, t.get_shape()):
                raise InterpreterError(
                    f"@{entry}: result #{i} is {arr.dtype} {format_shape(arr.shape)} but the function "
                    f"returns {dt} {format_shape(t.get_shape())}"
                )
        outs.append(arr)
    return outs
