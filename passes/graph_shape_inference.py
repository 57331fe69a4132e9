"""`graph-shape-inference`: refine `?` result dimensions from the operands.

Each graph op computes its result types from its operands and properties
(`infer_result_types`, the same function its verifier uses). Walking every
function in order, a result dimension declared `?` takes the inferred size
when that is known; a declared static size is never changed. Refined values
flow to later ops, to `func.return` and so to the function's result types
(`function_type`), and from there to the results of `func.call`s of that
function (repeated until nothing changes).

Function arguments are inputs: a `?` argument dimension stays `?`, and so do
the dimensions that depend on it.

Options:
  require-static: fail (naming the op) if any graph op result or function
    result still has a `?` dimension afterwards (default false).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, FunctionType, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import VerifyException

from infer.dialects import graph as g
from infer.dialects.ir_io import IRError, describe_location

DYNAMIC = DYNAMIC_INDEX  # how `?` reads from TensorType.get_shape()


def refine(declared: Attribute, inferred: Attribute) -> Attribute:
    """`declared` with each `?` replaced by the inferred size, where known."""
    if not isinstance(declared, TensorType) or not isinstance(inferred, TensorType):
        return declared
    d_shape, i_shape = declared.get_shape(), inferred.get_shape()
    if DYNAMIC not in d_shape or len(d_shape) != len(i_shape):
        return declared
    shape = [i if d == DYNAMIC else d for d, i in zip(d_shape, i_shape)]
    if list(shape) == list(d_shape):
        return declared
    return TensorType(declared.get_element_type(), shape)


def _fail(op: Operation, message: str) -> IRError:
    """The error infer-opt reports as `file:line:col: error: 'op' op message`."""
    return IRError(f"{describe_location(op)}: error: '{op.name}' op {message}")


def _infer_function(fn: func.FuncOp) -> bool:
    """Refine the ops of one function and its result types; True if anything changed."""
    changed = False
    for op in fn.body.walk():
        if not isinstance(op, g.GraphOp):
            continue
        try:
            inferred = op.infer_result_types()
        except VerifyException as e:
            raise _fail(op, f"(after shape inference) {e}") from None
        for result, t in zip(list(op.results), inferred, strict=True):
            new = refine(result.type, t)
            if new != result.type:
                Rewriter.replace_value_with_new_type(result, new)
                changed = True
    ret = fn.get_return_op()
    if ret is not None:
        outputs = list(fn.function_type.outputs.data)
        refined = [refine(o, v.type) for o, v in zip(outputs, ret.operands, strict=True)]
        if refined != outputs:
            fn.function_type = FunctionType.from_lists(list(fn.function_type.inputs.data), refined)
            changed = True
    return changed


def _update_calls(module: ModuleOp, functions: dict[str, func.FuncOp]) -> bool:
    changed = False
    for op in module.walk():
        if not isinstance(op, func.CallOp):
            continue
        callee = functions.get(op.callee.root_reference.data)
        if callee is None:
            continue
        for result, t in zip(list(op.res), callee.function_type.outputs.data, strict=True):
            new = refine(result.type, t)
            if new != result.type:
                Rewriter.replace_value_with_new_type(result, new)
                changed = True
    return changed


def _check_static(module: ModuleOp) -> None:
    for op in module.walk():
        if isinstance(op, g.GraphOp):
            for i, r in enumerate(op.results):
                if isinstance(r.type, TensorType) and DYNAMIC in r.type.get_shape():
                    raise _fail(op, f"result #{i} still has a dynamic shape {r.type} after shape inference")
    for op in module.walk():
        if isinstance(op, func.FuncOp):
            for i, t in enumerate(op.function_type.outputs.data):
                if isinstance(t, TensorType) and DYNAMIC in t.get_shape():
                    raise _fail(op, f"@{op.sym_name.data} result #{i} still has a dynamic shape {t}")


@dataclass(frozen=True)
class GraphShapeInferencePass(ModulePass):
    """Replace `?` result dimensions by the sizes the operands imply."""

    name = "graph-shape-inference"

    require_static: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        functions = {
            f.sym_name.data: f for f in op.walk() if isinstance(f, func.FuncOp) and not f.is_declaration
        }
        # Each round refines at least one type, and types only get more static.
        while True:
            changed = False
            for fn in functions.values():
                changed |= _infer_function(fn)
            changed |= _update_calls(op, functions)
            if not changed:
                break
        if self.require_static:
            _check_static(op)
