"""The `graph` dialect: value-semantic model-level ops on builtin tensors.

Every frontend (ONNX, torch.export, Hugging Face checkpoints) produces this
level, and its reference interpreter (`infer.dialects.graph_interpreter`) is the
golden model every lower level is checked against.

Conventions
- Operands and results are ranked builtin tensors. Shapes are static; a `?`
  dimension in a result is allowed and is refined by `graph-shape-inference`.
- Every op computes its result types from its operands and properties
  (`infer_result_types`); the verifier checks the declared result types agree,
  so a shape error is reported at the op that causes it.
- Elementwise binary ops broadcast like numpy. Layouts follow PyTorch/ONNX:
  NCHW activations, OIHW conv weights, [out, in] linear weights.
- Large constants live outside the text: `graph.weight @name` refers to the
  module's weight store (see `infer.dialects.weights`). `graph.constant` holds
  small inline values.
- Quantized values are plain i8 / ui8 / i32 tensors; `graph.quantize_linear`,
  `graph.dequantize_linear` and `graph.requantize` convert them with their scale
  and zero point as operands, and the integer kernels (`graph.conv2d_integer`,
  `graph.linear_integer`, `graph.matmul_integer`) compute in int8 with int32
  accumulation (docs/quantization.md).
- Block-quantized weights (GGUF Q8_0 / Q4_0 / Q4_1) stay packed as `ui8`
  weights; `graph.dequantize_blocks {format = "q4_1"}` states their values
  (docs/gguf.md).
- `graph.kernel` groups an anchor op (matmul, conv, norm, ...) with its
  elementwise epilogue, or a chain of elementwise ops, into one isolated region
  (formed by `graph-fuse`); the tile lowering turns each into one kernel.

Layout: `base` (GraphOp, the shape helpers), one module per op family (`values`,
`elementwise`, `nn`, `transformer`, `structure`, `quant`), `kernel` (fusion groups); this
package re-exports every op and helper and defines the dialect. The reference interpreter
(`infer.dialects.graph_interpreter`) has a module per family too.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ArrayAttr
from xdsl.ir import Dialect
from xdsl.traits import HasCanonicalizationPatternsTrait

from infer.dialects.graph.base import (
    bool_attr,
    broadcast_shapes,
    DYNAMIC,
    f64_attr,
    FUNCTIONAL,
    GraphOp,
    i64_array,
    i64_attr,
    i64_values,
    normalize_axis,
    require_float,
    require_rank,
    require_same_elem,
    Shape,
    TensorResultOp,
)
from infer.dialects.graph.values import ConstantOp, DequantizeBlocksOp, WeightOp
from infer.dialects.graph.elementwise import (
    AbsOp,
    AddOp,
    AndOp,
    BinaryOp,
    BitwiseAndOp,
    BitwiseNotOp,
    BitwiseOrOp,
    BitwiseXorOp,
    CastOp,
    CeilOp,
    ClipOp,
    CosOp,
    DivOp,
    EluOp,
    EqualOp,
    ErfOp,
    ExpOp,
    FloorOp,
    GeluOp,
    GreaterEqualOp,
    GreaterOp,
    HardSigmoidOp,
    LeakyReluOp,
    LessEqualOp,
    LessOp,
    LogOp,
    MaximumOp,
    MinimumOp,
    ModOp,
    MulOp,
    NegOp,
    NotOp,
    OrOp,
    PowOp,
    ReciprocalOp,
    ReluOp,
    RoundOp,
    RsqrtOp,
    ShiftLeftOp,
    ShiftRightOp,
    SigmoidOp,
    SignOp,
    SiluOp,
    SinOp,
    SoftplusOp,
    SqrtOp,
    SubOp,
    TanhOp,
    UnaryOp,
    WhereOp,
    XorOp,
)
from infer.dialects.graph.nn import (
    AvgPool2dOp,
    AxisOp,
    BatchNormOp,
    Conv2dOp,
    GlobalAvgPoolOp,
    GlobalMaxPoolOp,
    GlobalPoolOp,
    LayerNormOp,
    linear_shape,
    LinearOp,
    LogSoftmaxOp,
    matmul_shape,
    MatmulOp,
    MaxPool2dOp,
    NormOp,
    Pool2dOp,
    RmsNormOp,
    SoftmaxOp,
    WindowedOp,
    window_out,
)
from infer.dialects.graph.transformer import (
    AttentionOp,
    GatherOp,
    KvCacheWriteOp,
    PAGED_KV_OPS,
    PagedAttentionOp,
    RotaryOp,
)
from infer.dialects.graph.structure import (
    ArgmaxOp,
    ArgminOp,
    ArgReduceOp,
    BroadcastOp,
    ConcatOp,
    PadOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceMinOp,
    ReduceOp,
    ReduceProdOp,
    ReduceSumOp,
    ReshapeOp,
    SliceOp,
    TopKOp,
    TransposeOp,
)
from infer.dialects.graph.quant import (
    Conv2dIntegerOp,
    DequantizeLinearOp,
    INTEGER_KERNEL_OPS,
    IntegerKernelOp,
    LinearIntegerOp,
    MatmulIntegerOp,
    QUANTIZATION_OPS,
    QuantizeLinearOp,
    RequantizeOp,
)
from infer.dialects.graph.kernel import (
    ANCHOR_OPS,
    ELEMENTWISE_OPS,
    KERNEL_ANCHORS,
    kernel_kind_of,
    KernelOp,
    YieldOp,
)


class GraphCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    """Lets upstream `canonicalize` use the graph patterns (infer.dialects.graph_canonicalization)."""

    def get_patterns(self, op):
        from infer.dialects.graph_canonicalization import patterns_for

        return patterns_for(op)

    @classmethod
    def get_canonicalization_patterns(cls):
        return ()


Graph = Dialect(
    "graph",
    [
        ConstantOp, WeightOp, DequantizeBlocksOp,
        NegOp, AbsOp, SignOp, ExpOp, LogOp, SqrtOp, RsqrtOp, ReciprocalOp, TanhOp, SigmoidOp,
        ErfOp, SinOp, CosOp, FloorOp, CeilOp, RoundOp, ReluOp, SiluOp, SoftplusOp, NotOp,
        BitwiseNotOp, GeluOp, ClipOp, LeakyReluOp, EluOp, HardSigmoidOp,
        AddOp, SubOp, MulOp, DivOp, PowOp, MaximumOp, MinimumOp, ModOp,
        EqualOp, LessOp, LessEqualOp, GreaterOp, GreaterEqualOp, AndOp, OrOp, XorOp,
        BitwiseAndOp, BitwiseOrOp, BitwiseXorOp, ShiftLeftOp, ShiftRightOp,
        WhereOp, CastOp,
        MatmulOp, LinearOp,
        Conv2dOp, MaxPool2dOp, AvgPool2dOp, GlobalAvgPoolOp, GlobalMaxPoolOp,
        BatchNormOp, LayerNormOp, RmsNormOp, SoftmaxOp, LogSoftmaxOp,
        AttentionOp, RotaryOp, GatherOp, *PAGED_KV_OPS,
        ReshapeOp, TransposeOp, ConcatOp, SliceOp, BroadcastOp, PadOp,
        ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceMinOp, ReduceProdOp, ArgmaxOp, ArgminOp,
        TopKOp,
        KernelOp, YieldOp,
        *QUANTIZATION_OPS, *INTEGER_KERNEL_OPS,
    ],
    [],
)
"""The graph dialect."""

for _op in Graph.operations:
    _op.traits.add_trait(GraphCanonicalizationPatterns())

__all__ = ["Graph", "GraphOp", "ArrayAttr"]
