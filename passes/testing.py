"""Before/after checks for passes: a pass must not change what a module computes.

    from infer.passes.testing import check_pass_preserves_semantics

    result = check_pass_preserves_semantics(module, GraphCanonicalizePass())
    result = check_pass_preserves_semantics(module, "graph-canonicalize,graph-dce")
    result = check_pass_preserves_semantics(module, lower_pass, rtol=1e-2, atol=1e-2)

The module is run on random inputs (one set per seed) with the reference
interpreter of its level, the pass is applied to a clone (which keeps the
module's weight store), the clone is verified and run on the same inputs, and
the outputs are compared with `np.testing.assert_allclose` (NaN equals NaN;
the default tolerances 0/0 mean bit-exact).

The level is read from the entry function's signature: tensors -> the graph
interpreter (`infer.dialects.graph_interpreter.run_module`), memrefs -> the
tile interpreter (`infer.dialects.tile_interpreter.run_tile_module`, inputs
are the arguments not marked `tile.output`). A pass may change the level
(graph in, tile out): inputs are the same arrays by position, outputs are
compared by position and must have the same shape and dtype.

Random inputs, from the argument types of the module *before* the pass:
floats are standard normal (rounded to the element type), 8-bit integers
cover their whole range, wider integers are in [-1000, 1000] ([0, 1000] for
unsigned), i1 is a fair coin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType
from xdsl.passes import ModulePass, PassPipeline
from xdsl.traits import SymbolTable

from infer.dialects.dtypes import to_numpy_dtype
from infer.dialects.graph_interpreter import InterpreterError, run_module
from infer.dialects.ir_io import make_context, verify_module
from infer.dialects.tile_interpreter import is_tile_function, output_arguments, run_tile_module
from infer.dialects.weights import WeightStore

__all__ = ["SemanticsCheck", "check_pass_preserves_semantics", "random_inputs", "run_entry", "apply_pass"]

PassLike = ModulePass | Sequence[ModulePass] | PassPipeline | str | Callable[[Context, ModuleOp], None]


@dataclass
class SemanticsCheck:
    """What `check_pass_preserves_semantics` ran: the transformed module, and per
    seed the inputs and the outputs before and after the pass."""

    module: ModuleOp
    inputs: list[list[np.ndarray]]
    before: list[list[np.ndarray]]
    after: list[list[np.ndarray]]


def _entry(module: ModuleOp, entry: str) -> func.FuncOp:
    fn = SymbolTable.lookup_symbol(module, entry)
    if not isinstance(fn, func.FuncOp):
        raise InterpreterError(f"no function @{entry} in the module")
    return fn


def run_entry(module: ModuleOp, inputs: Sequence[np.ndarray], entry: str = "main",
              weights: WeightStore | None = None) -> list[np.ndarray]:
    """Run `entry` with the interpreter of its level (memrefs: tile, else graph)."""
    if is_tile_function(_entry(module, entry)):
        return run_tile_module(module, inputs, entry, weights)
    return run_module(module, inputs, entry, weights)


def _input_types(fn: func.FuncOp) -> list[TensorType | MemRefType]:
    types = list(fn.function_type.inputs.data)
    outs = set(output_arguments(fn)) if is_tile_function(fn) else set()
    return [ty for i, ty in enumerate(types) if i not in outs]


def random_inputs(module: ModuleOp, seed: int, entry: str = "main") -> list[np.ndarray]:
    """One random array per input argument of `entry` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for ty in _input_types(_entry(module, entry)):
        if not isinstance(ty, TensorType | MemRefType):
            raise InterpreterError(f"@{entry}: cannot make a random {ty}")
        shape = tuple(ty.get_shape())
        if any(d < 0 for d in shape):
            raise InterpreterError(f"@{entry}: cannot make a random input of dynamic shape {ty}")
        dtype = to_numpy_dtype(ty.get_element_type())
        if dtype == np.bool_:
            arrays.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            lo, hi = (info.min, info.max) if dtype.itemsize == 1 else (max(info.min, -1000), 1000)
            arrays.append(rng.integers(lo, hi, shape, endpoint=True, dtype=dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32).astype(dtype))
    return arrays


def apply_pass(pass_or_pipeline: PassLike, module: ModuleOp, ctx: Context | None = None) -> None:
    """Apply a pass, a list of passes, a PassPipeline, a `-p` spec string
    ("a,b{opt=1}", infer's passes) or a callable(ctx, module) to `module` in place."""
    ctx = ctx if ctx is not None else make_context()
    if isinstance(pass_or_pipeline, str):
        from infer.passes import infer_passes

        pass_or_pipeline = PassPipeline.parse_spec(infer_passes(), pass_or_pipeline)
    if isinstance(pass_or_pipeline, ModulePass | PassPipeline):
        pass_or_pipeline.apply(ctx, module)
    elif isinstance(pass_or_pipeline, Sequence):
        for p in pass_or_pipeline:
            p.apply(ctx, module)
    else:
        pass_or_pipeline(ctx, module)


def _as_float(a: np.ndarray) -> np.ndarray:
    return a if a.dtype.kind in "biuf" and a.dtype.itemsize >= 4 else a.astype(np.float64)


def check_pass_preserves_semantics(
    module: ModuleOp,
    pass_or_pipeline: PassLike,
    *,
    seeds: Sequence[int] = (0, 1),
    rtol: float = 0.0,
    atol: float = 0.0,
    entry: str = "main",
    inputs: Sequence[Sequence[np.ndarray]] | None = None,
    ctx: Context | None = None,
) -> SemanticsCheck:
    """Run `module` before and after `pass_or_pipeline` (applied to a clone, which
    keeps the weights) on random inputs, one set per seed (or on `inputs`),
    and assert the outputs agree (`np.testing.assert_allclose(after, before, rtol,
    atol)`, same shape and dtype). The original module is not modified."""
    transformed = module.clone()  # keeps the weights; the pass's changes to them stay the clone's
    apply_pass(pass_or_pipeline, transformed, ctx)
    verify_module(transformed)
    input_sets = [list(x) for x in inputs] if inputs is not None else [
        random_inputs(module, seed, entry) for seed in seeds]
    result = SemanticsCheck(transformed, input_sets, [], [])
    for i, xs in enumerate(input_sets):
        before = run_entry(module, xs, entry)
        after = run_entry(transformed, xs, entry)
        what = f"input set #{i}" + (f" (seed {seeds[i]})" if inputs is None else "")
        if len(before) != len(after):
            raise AssertionError(f"{what}: {len(before)} outputs before the pass, {len(after)} after")
        for j, (b, a) in enumerate(zip(before, after, strict=True)):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise AssertionError(
                    f"{what}: output #{j} is {b.dtype} {b.shape} before the pass, {a.dtype} {a.shape} after"
                )
            np.testing.assert_allclose(
                _as_float(a), _as_float(b), rtol=rtol, atol=atol,
                err_msg=f"{what}: output #{j} changed by the pass",
            )
        result.before.append(before)
        result.after.append(after)
    return result
