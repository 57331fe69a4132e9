"""`graph-dce`: remove graph ops whose results are never used.

Every graph op, `graph.weight` included, is `Pure`, so this is exactly
upstream xDSL's `dce` (`region_dce`: liveness over the whole module, nested
regions included; func.func and other symbols are kept). The pass exists under
a graph name so graph pipelines read uniformly and so it is the place to grow
graph-specific liveness (e.g. dropping in-memory weights nobody references).

Weights: a weight whose last `graph.weight` op is removed disappears from the
output anyway, because writing a module saves only the weights it still
references (`infer.dialects.weights.save_weights`); the in-memory store keeps
the array until the module is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.transforms.dead_code_elimination import region_dce


@dataclass(frozen=True)
class GraphDCEPass(ModulePass):
    """Dead code elimination of pure graph ops (and unused graph.weight ops)."""

    name = "graph-dce"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        region_dce(op.body)
