"""The signature of a module's entry function as users see it: the names the frontend
recorded (`graph.name` on arguments and results), shapes and dtypes.

    names, specs = function_signature(module, "main")   # specs: [(shape, numpy dtype)]
    outs = output_names(module, len(results), "main")

Used by the compile driver (the artifact's signature) and the command line (`infer run-ir`).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType

from infer.dialects.dtypes import to_numpy_dtype
from infer.dialects.ir_io import IRError


def entry_function(module: ModuleOp, entry: str = "main") -> func.FuncOp:
    for op in module.walk():
        if isinstance(op, func.FuncOp) and op.sym_name.data == entry:
            return op
    names = ", ".join("@" + op.sym_name.data for op in module.walk() if isinstance(op, func.FuncOp))
    raise IRError(f"the module has no function @{entry} (its functions: {names or 'none'})")


def function_signature(module: ModuleOp, entry: str = "main") -> tuple[list[str], list[tuple[tuple[int, ...], np.dtype]]]:
    """Input names (`graph.name`, else `arg<i>`) and (shape, dtype) of function `entry`."""
    fn = entry_function(module, entry)
    names, specs = [], []
    arg_attrs = fn.arg_attrs.data if fn.arg_attrs is not None else [None] * len(fn.args)
    for i, (arg, attrs) in enumerate(zip(fn.args, arg_attrs, strict=True)):
        name = attrs.data.get("graph.name") if attrs is not None else None
        names.append(name.data if isinstance(name, StringAttr) else f"arg{i}")
        t = arg.type
        if not isinstance(t, TensorType):
            raise IRError(f"function @{entry}: argument {i} is not a tensor ({t})")
        specs.append((t.get_shape(), to_numpy_dtype(t.get_element_type())))
    return names, specs


def output_names(module: ModuleOp, count: int, entry: str = "main") -> list[str]:
    """Result names of function `entry` (`graph.name`, else `output<i>`)."""
    for op in module.walk():
        if isinstance(op, func.FuncOp) and op.sym_name.data == entry and op.res_attrs is not None:
            names = []
            for i, attrs in enumerate(op.res_attrs.data):
                name = attrs.data.get("graph.name")
                names.append(name.data if isinstance(name, StringAttr) else f"output{i}")
            return names
    return [f"output{i}" for i in range(count)]


__all__ = ["entry_function", "function_signature", "output_names"]
