"""Shared helpers for the graph interpreter tests (no tests here).

Tolerances, one table for every interpreter test. References are computed by
torch or numpy in float32 (float64 for f64) on the upcast inputs and compared
with the interpreter's result (which is in the op's own dtype):

    dtype        rtol     atol      why
    f64          1e-10    1e-12     same math in double precision
    f32          1e-5     1e-5      f32, other summation order (conv/matmul sums ~150 terms)
    f16          2e-3     2e-3      ~2 ulp of f16 (2^-10 relative spacing)
    bf16         1.6e-2   1.6e-2    ~2 ulp of bf16 (2^-7 relative spacing)
    ints, i1     exact
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, FunctionType, ModuleOp, TensorType, f32
from xdsl.dialects.func import Func
from xdsl.ir import Attribute, Block, Region
from xdsl.parser import Parser

from infer.dialects.dtypes import tensor_type
from infer.dialects.graph import Graph
from infer.dialects.graph_interpreter import evaluate_op, run_module

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

TOLERANCE: dict[np.dtype, tuple[float, float]] = {
    F64: (1e-10, 1e-12),
    F32: (1e-5, 1e-5),
    F16: (2e-3, 2e-3),
    BF16: (1.6e-2, 1.6e-2),
}

FLOAT_DTYPES = [F32, F16, BF16]


def parse(text: str) -> ModuleOp:
    ctx = Context()
    for d in (Builtin, Func, Arith, Graph):
        ctx.load_dialect(d)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module


def single_op_module(
    op_cls: type,
    arrays: Sequence[np.ndarray],
    properties: dict[str, Attribute] | None = None,
    result_types: Sequence[Attribute] | None = None,
) -> tuple[ModuleOp, object]:
    """A module `@main(arrays...) { return op_cls(args...) }`; result types are
    inferred by the op itself unless given."""
    arg_types = [tensor_type(a.shape, a.dtype) for a in arrays]
    block = Block(arg_types=arg_types)
    props = dict(properties or {})
    if result_types is None:
        probe = op_cls.create(
            operands=list(block.args), result_types=[TensorType(f32, [1])], properties=props
        )
        result_types = probe.infer_result_types()
        probe.drop_all_references()
    op = op_cls.create(operands=list(block.args), result_types=list(result_types), properties=props)
    block.add_ops([op, func.ReturnOp(*op.results)])
    fn = func.FuncOp("main", FunctionType.from_lists(arg_types, list(result_types)), Region(block))
    module = ModuleOp([fn])
    module.verify()
    return module, op


def run_op(
    op_cls: type,
    arrays: Sequence[np.ndarray],
    properties: dict[str, Attribute] | None = None,
    result_types: Sequence[Attribute] | None = None,
) -> np.ndarray:
    """Run one op through run_module and through evaluate_op; both must agree
    bit for bit. Returns the (single) result."""
    module, op = single_op_module(op_cls, arrays, properties, result_types)
    (via_module,) = run_module(module, list(arrays))
    (direct,) = evaluate_op(op, list(arrays))
    assert via_module.dtype == direct.dtype
    np.testing.assert_array_equal(via_module, direct)
    return via_module


def check(got: np.ndarray, ref, dtype: np.dtype, shape: Sequence[int] | None = None) -> None:
    """`got` has exactly `dtype` (and `shape`), and matches `ref` within the
    dtype's tolerance (exactly for integers and i1)."""
    dtype = np.dtype(dtype)
    ref = np.asarray(ref.detach().numpy() if hasattr(ref, "detach") else ref)
    assert got.dtype == dtype, f"dtype {got.dtype} != {dtype}"
    expected_shape = tuple(shape) if shape is not None else ref.shape
    assert got.shape == expected_shape, f"shape {got.shape} != {expected_shape}"
    if dtype in TOLERANCE:
        rtol, atol = TOLERANCE[dtype]
        np.testing.assert_allclose(
            got.astype(np.float64), np.broadcast_to(ref.astype(np.float64), got.shape),
            rtol=rtol, atol=atol, equal_nan=True,
        )
    else:
        np.testing.assert_array_equal(got, np.broadcast_to(ref.astype(dtype), got.shape))


def randn(rng: np.random.Generator, shape: Sequence[int], dtype=F32, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.dtype(dtype))


def to_torch(a: np.ndarray):
    """A torch tensor of the array, f16/bf16 upcast to f32 (the reference precision)."""
    import torch

    if a.dtype in (F16, BF16):
        a = a.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(a))
