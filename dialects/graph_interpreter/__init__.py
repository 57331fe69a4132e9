"""Reference interpreter for the `graph` dialect: the golden model.

Every graph op is evaluated with vectorized numpy on `np.ndarray` values; the
semantics are exactly those stated in the op docstrings of
`infer.dialects.graph`. The interpreter never imports torch or onnx.

Layout: `core` (errors, dtype helpers, the kernel table), one module per kernel family
(`elementwise`, `nn`, `transformer`, `structure`, `quant`; the error function is
`infer.target.special.erf`, shared with the vector unit's `erf` / `gelu_erf`) and
`runner` (dispatch on the table, the xDSL interpreter functions, `run_module`). A new op gets
its kernel in the family's module with `@kernel_for(OpClass)`; `runner` refuses to import
while a graph op has none.

Public API
- `evaluate_op(op, inputs, weights=None)`: evaluate one graph op on operand
  arrays (constant folding, tests).
- `run_module(module, inputs, entry="main", weights=None)`: run a function of
  a module on the xDSL interpreter (`GraphFunctions` + xDSL's `FuncFunctions`
  for func.func / func.return / func.call).
- `graph.kernel` runs its body on its operands (in `run_module` with the xDSL
  interpreter's `run_ssacfg_region`, in `evaluate_op` op by op); `graph.yield`
  returns its operands. A kernel computes exactly what its ops compute unfused.
- `ConstantCache`: values that depend only on weights and constants, kept
  across runs (`run_module(..., constant_cache=)`), e.g. by a text generator.
- `InterpreterError`: bad inputs, out-of-range gather indices, integer division
  by zero, missing weights, ...

Numerics
- Results always have exactly the element type (numpy dtype from
  `infer.dialects.dtypes.to_numpy_dtype`) and the static shape of the op's
  result type.
- float16 and bfloat16 ops are computed in float32 and the result is rounded
  (round-to-nearest-even) back to the result type once per op. float32 ops are
  computed in float32 (matmul, conv, norms, ...), float64 in float64. `erf`
  (and exact `gelu`) is evaluated in float64 by `scipy.special.erf` (|error| ~1e-16;
  `infer.target.special`, which the vector unit's
  `erf` / `gelu_erf` instructions share) and rounded to the compute type.
- Integer arithmetic wraps around (two's complement); `div` truncates toward
  zero, `mod` is floor modulo (sign of the divisor); an integer division or
  modulo by zero is an `InterpreterError`. An integer `pow` with a negative
  exponent is the truncated real result (1 for base 1, +-1 for base -1, else 0).
  Integer `reduce_mean` truncates toward zero.
- i1 arithmetic is modulo 2 (add/sub = xor, mul = and); neg/abs/relu of i1 are
  the identity.
- Float -> int `cast` truncates toward zero (NaN / out-of-range values are
  unspecified); anything -> i1 is `x != 0`; int -> int wraps. f64 -> bf16 rounds
  via f32 (as PyTorch and ml_dtypes do); every other float cast rounds once.
- The storage-only types (8- and 4-bit floats, 4- and 2-bit integers, as ml_dtypes arrays)
  are cast as `graph.cast` states: to an 8-bit float with `saturate`, clipped to its finite
  range first; f8E8M0FNU by the exponent rounded per `round_mode`.
- Bitwise ops work on the two's complement bits; shifts by >= the bit width (or a
  negative amount) give 0 (-1 for a negative signed value shifted right).
- `clip` of an integer tensor uses ceil(min) and floor(max); integer
  `avg_pool2d` is an `InterpreterError`.
- `attention`: a query row whose keys are all masked out (by the mask and/or
  causality) produces zeros (as PyTorch's math SDPA backend does), not NaN.
- Floating-point exceptions (overflow, division by zero, invalid) produce IEEE
  results (inf / NaN) silently.
- Quantization ops and integer kernels compute what `infer.dialects.linear_quant`
  states (ONNX QuantizeLinear/DequantizeLinear, the NPU's requant, exact integer
  accumulation saturated to int32; docs/quantization.md).
"""

from infer.dialects.graph_interpreter.core import INPUT_NAME_ATTR, ConstantCache, InterpreterError
from infer.dialects.graph_interpreter.runner import (
    GraphFunctions,
    evaluate_op,
    innermost_interpreter_error,
    run_module,
)
from infer.target.special import erf

__all__ = [
    "ConstantCache",
    "InterpreterError",
    "GraphFunctions",
    "evaluate_op",
    "innermost_interpreter_error",
    "run_module",
    "erf",
    "INPUT_NAME_ATTR",
]
