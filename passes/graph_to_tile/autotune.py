"""Opt-in autotuning of the tiling choice (`graph-to-tile{autotune=N}`, `infer compile
--autotune[=N]`; docs/tiling.md "Autotuning").

Per GEMM-shaped op (linear, matmul, conv2d, attention, or a graph.kernel anchored on one), before
it is lowered: the op alone becomes a single-kernel program (its runtime operands function
arguments, its compile-time operands weights), which is lowered once recording every tiling
choice's ranked candidates (`tiling_tuning`), then once per candidate among the top N of each
choice (the cost model's pick first) through graph-to-tile, tile-plan-memory and tile-to-npu,
and run in the simulator's timing mode (no data). The fastest candidate of each choice is kept
(one choice after another, the earlier ones fixed), so the result is never slower on that
program than the cost model's pick. The op is then lowered with those picks.

The picks are cached on disk, one JSON file per (kernel signature, config, precision, N,
compiler version), in `autotune-cache` or `$XDG_CACHE_HOME/infer/autotune` (default
`~/.cache/infer/autotune`): the signature is the single-kernel program's text (shapes,
attributes, fused epilogue; weights are named, not valued), the config the TOML text's hash,
the compiler version a hash of infer's version and of the compiler, simulator and
dialect sources. A second compile reads the file instead of simulating.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_of, to_numpy_dtype
from infer.dialects.ir_io import LoweringError, make_context
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile.context import LoweringContext
from infer.passes.tiling_tuning import Tuning, tuning
from infer.target.hw import config_path

TUNED_OPS = (g.LinearOp, g.MatmulOp, g.Conv2dOp, g.AttentionOp)


def tunable(op: Operation) -> bool:
    anchor = op.anchor() if isinstance(op, g.KernelOp) else op
    return isinstance(anchor, TUNED_OPS)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "infer" / "autotune"


@functools.cache
def compiler_version() -> str:
    """A hash of infer's version (its __init__.py) and of the sources that decide a kernel's
    program and its simulated cycles (dialects, passes, target)."""
    root = Path(__file__).resolve().parents[2]  # the infer package
    h = hashlib.sha256()
    files = [root / "__init__.py"] + [f for sub in ("dialects", "passes", "target")
                                      for f in sorted((root / sub).rglob("*.py"))]
    for f in files:
        if "__pycache__" not in f.parts:
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return f"src-{h.hexdigest()[:16]}"


def single_op_module(ctx: LoweringContext, op: Operation) -> ModuleOp | None:
    """op alone in @main: runtime tensor operands as arguments, compile-time ones as weights
    (the values ctx folded). None when an operand is not a tensor."""
    block = Block()
    store = WeightStore()
    mapping: dict[SSAValue, SSAValue] = {}
    for value in op.operands:
        if value in mapping:
            continue
        if not isinstance(value.type, TensorType):
            return None
        array = ctx.constant(value)
        if array is not None:
            data = np.asarray(array).astype(to_numpy_dtype(element_type_of(value)))
            weight = g.WeightOp(store.add(f"w{len(mapping)}", data), value.type)
            block.add_op(weight)
            mapping[value] = weight.results[0]
        else:
            mapping[value] = block.insert_arg(value.type, len(block.args))
    clone = op.clone(value_mapper=mapping)
    block.add_op(clone)
    block.add_op(func.ReturnOp(*clone.results))
    fn = func.FuncOp("main", FunctionType.from_lists([a.type for a in block.args],
                                                      [r.type for r in clone.results]), Region(block))
    module = ModuleOp([fn])
    attach_weights(module, store)
    return module


def simulated_cycles(ctx: LoweringContext, op: Operation, picks: dict[int, str]) -> tuple[int, list[list[str]]]:
    """Lower op alone with these picks to a program, run it in timing mode: (cycles, the ranked
    candidates of each tiling choice)."""
    from infer.dialects.npu import ProgramOp
    from infer.passes.graph_to_tile.driver import GraphToTilePass
    from infer.passes.tile_memory_plan import TilePlanMemoryPass
    from infer.passes.tile_to_npu import TileToNpuPass
    from infer.target.sim import Simulator

    session = ctx.session
    module = single_op_module(ctx, op)
    if module is None:
        raise LoweringError("autotune: an operand is not a tensor")
    context = make_context()
    with tuning(Tuning(dict(picks))) as active:
        GraphToTilePass(target=session.target, precision=session.precision).apply(context, module)
    TilePlanMemoryPass(target=session.target).apply(context, module)
    TileToNpuPass(target=session.target).apply(context, module)
    program = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    counters = Simulator(session.hw).run(program, None, mode="timing")
    return counters.cycles, active.ranked


def cache_key(ctx: LoweringContext, module: ModuleOp) -> str:
    """(kernel signature: the single-kernel program's text, config, precision, N, compiler version)"""
    session = ctx.session
    h = hashlib.sha256()
    for part in (str(module), config_path(session.target).read_text(), session.precision,
                 str(session.autotune), compiler_version()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def picks_for(ctx: LoweringContext, op: Operation, name: str) -> dict[int, str]:
    """The tiling picks for op (call number within the op -> tiles), from the cache or tuned now.
    Empty when there is nothing to choose or op cannot be compiled alone (the cost model's
    choice stands)."""
    session = ctx.session
    module = single_op_module(ctx, op)
    if module is None:
        return {}
    directory = Path(session.autotune_cache) if session.autotune_cache else default_cache_dir()
    key = cache_key(ctx, module)
    path = directory / f"{key}.json"
    memo = session.autotune_memo
    if key in memo:
        return memo[key]
    try:
        record = json.loads(path.read_text())
        picks = {int(call): tiles for call, tiles in record["picks"].items()}
        ctx.debug(f"[graph-to-tile] {name}: autotune: cached ({path})")
        memo[key] = picks
        return picks
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        picks, measured = _tune(ctx, op, session.autotune)
    except Exception as e:  # noqa: BLE001 - best effort: an op that does not compile or run alone
        # (e.g. an attention mask made from an integer model input) keeps the cost model's choice
        ctx.debug(f"[graph-to-tile] {name}: autotune: not tuned ({str(e).splitlines()[0][:200]})")
        memo[key] = {}
        return {}
    for call, tiles, cycles in measured:
        ctx.debug(f"[graph-to-tile] {name}: autotune: choice {call} {tiles}: {cycles} simulated cycles"
                  + (" (kept)" if picks.get(call) == tiles else ""))
    record = {"op": op.name, "target": session.hw.name, "precision": session.precision,
              "top": session.autotune, "compiler": compiler_version(),
              "picks": {str(call): tiles for call, tiles in picks.items()},
              "measured": [[call, tiles, cycles] for call, tiles, cycles in measured]}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(record, indent=1))
        partial.replace(path)
    except OSError as e:
        ctx.debug(f"[graph-to-tile] {name}: autotune: cache not written ({e})")
    memo[key] = picks
    return picks


def _tune(ctx: LoweringContext, op: Operation, top: int) -> tuple[dict[int, str], list[tuple[int, str, int]]]:
    """Greedy over the op's tiling choices in lowering order: each tries its top candidates with
    the earlier choices' winners fixed and keeps the fewest simulated cycles (ties: the cost
    model's order)."""
    cycles, ranked = simulated_cycles(ctx, op, {})
    picks: dict[int, str] = {}
    measured: list[tuple[int, str, int]] = []
    for call, candidates in enumerate(ranked):
        if len(candidates) < 2:
            continue
        best_tiles, best_cycles = candidates[0], cycles
        measured.append((call, candidates[0], cycles))
        for tiles in candidates[1:top]:
            try:
                trial, _ = simulated_cycles(ctx, op, {**picks, call: tiles})
            except LoweringError:  # (e.g. out of registers or semaphores for this tiling)
                continue
            measured.append((call, tiles, trial))
            if trial < best_cycles:
                best_tiles, best_cycles = tiles, trial
        picks[call] = best_tiles
        cycles = best_cycles
    return picks, measured
