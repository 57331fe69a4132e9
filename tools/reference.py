"""The reference side of the per-layer check: the graph-level reference interpreter on the
graph IR an artifact holds.

`Executable.check` (runtime/check.py) compares a simulated run with a reference it is given,
because running the reference interpreter needs the compiler (the dialects, xDSL) and the
runtime imports none of it. `GraphReference` is that reference; the compile driver gives it to
every Executable it makes (`infer.compile`, `infer.load`, `infer run --check`):

    exe = Executable(artifact, reference=GraphReference())

It parses `graph_ir` (for the outputs) or `layer_ir` (per layer: the graph IR graph-to-tile
lowered, one top-level op per kernel) with the weights the artifact stores beside them, runs
`run_module`, and describes each op of the layer IR so the check can name its rows. The
dialects are imported when a reference is run, not when this module is.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from infer.runtime.artifact import Artifact, ArtifactError, load_safetensors
from infer.runtime.check import LayerOp, LayerReference, OutputSource


class GraphReference:
    """`infer.runtime.check.CheckReference` over the graph-level reference interpreter."""

    def outputs(self, artifact: Artifact, inputs: list[np.ndarray]) -> list[np.ndarray]:
        from infer.dialects.graph_interpreter import run_module

        if artifact.graph_ir is None:
            raise ArtifactError("the artifact holds no graph-level IR to check against (compiled without it)")
        module = _module(artifact.graph_ir, "graph IR", [(artifact.graph_weights, "graph_weights")])
        return run_module(module, inputs, entry=artifact.entry)

    def layers(self, artifact: Artifact, inputs: list[np.ndarray], wanted: set[int],
               progress: Callable[[str], None]) -> LayerReference:
        from xdsl.dialects import func
        from xdsl.ir import BlockArgument

        from infer.dialects.graph_interpreter import run_module

        assert artifact.layer_ir is not None
        module = _module(artifact.layer_ir, "layer IR",
                         [(artifact.graph_weights, "graph_weights"), (artifact.layer_weights, "layer_weights")])
        fn = next((f for f in module.ops if isinstance(f, func.FuncOp) and f.sym_name.data == artifact.entry), None)
        if fn is None or not fn.body.blocks:
            raise ArtifactError(f"the artifact's layer IR has no function @{artifact.entry}")
        body = list(fn.body.block.ops)
        values: dict[int, np.ndarray] = {}
        t0 = last = time.perf_counter()

        def on_op(i: int, _op, results: list[np.ndarray]) -> None:
            nonlocal last
            if i in wanted and results:
                values[i] = results[0]
            now = time.perf_counter()
            if now - last > 5.0:
                last = now
                progress(f"reference interpreter: op {i + 1}/{len(body)} ({now - t0:.0f} s)")

        progress(f"running the reference interpreter on the compiled graph IR ({len(body)} ops, per layer)")
        outputs = run_module(module, inputs, entry=artifact.entry, on_op=on_op)
        position = {id(op): i for i, op in enumerate(body)}
        sources = []
        for value in (body[-1].operands if body else ()):
            if isinstance(value, BlockArgument):
                sources.append(OutputSource(argument=value.index))
            else:
                sources.append(OutputSource(layer=position.get(id(value.owner))))
        return LayerReference([LayerOp(_describe(op), _user_name(op)) for op in body], values, outputs, sources)


def _module(text: str, what: str, blobs: list[tuple[bytes | None, str]]):
    """Parse graph IR stored in the artifact, with the weights of `blobs` as its weights."""
    from infer.dialects.ir_io import make_context, parse_ir
    from infer.dialects.weights import WEIGHTS_ATTR, WeightStore, attach_weights

    module = parse_ir(make_context(), text, f"<artifact {what}>")
    module.attributes.pop(WEIGHTS_ATTR, None)
    store = WeightStore(None)
    for blob, section in blobs:
        for n, a in load_safetensors(blob or b"", section).items():
            store.set(n, np.array(a))
    attach_weights(module, store)
    return module


def _short(op) -> str:
    return op.name.split(".", 1)[-1]


def _describe(op) -> str:
    """`conv2d+relu` for a graph.kernel, the op's own name otherwise."""
    from infer.dialects import graph as g

    if isinstance(op, g.KernelOp):
        inner = [_short(o) for o in op.body.block.ops
                 if not isinstance(o, g.YieldOp | g.ConstantOp | g.WeightOp)]
        return "+".join(inner) or "kernel"
    return _short(op)


def _user_name(op) -> str | None:
    """A name the frontend recorded on the op (`graph.name`), if any."""
    from xdsl.dialects.builtin import StringAttr

    from infer.dialects import graph as g

    cands = [op]
    if isinstance(op, g.KernelOp):
        y = op.body.block.last_op
        if isinstance(y, g.YieldOp) and y.operands and y.operands[0].owner in op.body.block.ops:
            cands.append(y.operands[0].owner)
        cands.extend(op.body.block.ops)
    for o in cands:
        a = o.attributes.get("graph.name")
        if isinstance(a, StringAttr) and a.data:
            return a.data
    return None


__all__ = ["GraphReference"]
