"""infer-layer-names: a pass written outside infer's tree (docs/writing-a-pass.md)."""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from infer.dialects import graph
from infer.dialects.diagnostics import warn

NAME_ATTR = "graph.name"


@dataclass(frozen=True)
class NameLayersPass(ModulePass):
    """Name the unnamed graph ops of each function: <prefix>0, <prefix>1, ... in order.

    Layer names show in `infer run --check` tables; models built by hand or
    imported from a format without node names get readable ones this way.
    Constants, weights and ops inside graph.kernel bodies are left alone.
    """

    name = "graph-name-layers"

    prefix: str = "layer"
    """The start of every name."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in op.walk():
            if not isinstance(fn, func.FuncOp) or fn.is_declaration:
                continue
            count = 0
            for inner in fn.body.block.ops:
                if not isinstance(inner, graph.GraphOp) or isinstance(inner, graph.ConstantOp | graph.WeightOp):
                    continue
                if NAME_ATTR in inner.attributes:
                    warn(inner, f"already named; '{self.prefix}{count}' is not used")
                else:
                    inner.attributes[NAME_ATTR] = StringAttr(f"{self.prefix}{count}")
                count += 1
