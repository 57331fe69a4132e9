"""Graph ops that bring values in: inline constants, weights from the weight store and
GGUF block-quantized weights (`graph.dequantize_blocks`, docs/gguf.md)."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, StringAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    AnyAttr,
    ParamAttrConstraint,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import ConstantLike, Pure
from xdsl.utils.exceptions import VerifyException

from infer.dialects.block_quant import BLOCK_FORMATS, block_format
from infer.dialects.dtypes import element_type_name, element_type_of, format_shape, shape_of
from infer.dialects.weight_refs import WeightReference
from infer.dialects.graph.base import DYNAMIC, FUNCTIONAL, GraphOp, TensorResultOp


# --------------------------------------------------------------------------
# Constants and weights
# --------------------------------------------------------------------------


@irdl_op_definition
class ConstantOp(GraphOp):
    """A small constant inlined in the IR (large ones belong in `graph.weight`)."""

    name = "graph.constant"
    _T: ClassVar = VarConstraint("T", AnyAttr())
    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (_T, AnyAttr())))
    output = result_def(_T)
    traits = traits_def(Pure(), ConstantLike())
    assembly_format = "$value attr-dict"

    def __init__(self, value: DenseIntOrFPElementsAttr):
        super().__init__(result_types=[value.type], properties={"value": value})

    def infer_result_types(self) -> list[TensorType]:
        t = self.value.type
        assert isinstance(t, TensorType)
        return [t]


@irdl_op_definition
class WeightOp(WeightReference, TensorResultOp):
    """A named tensor from the module's weight store (kept out of the text)."""

    name = "graph.weight"
    assembly_format = "$name attr-dict `:` type($output)"

    def infer_result_types(self) -> list[TensorType]:
        t = self.output.type
        assert isinstance(t, TensorType)
        if any(d == DYNAMIC for d in t.get_shape()):
            raise VerifyException("a weight must have a static shape")
        return [t]


@irdl_op_definition
class DequantizeBlocksOp(GraphOp):
    """The float values of a block-quantized weight kept packed (llama.cpp's
    Q8_0 / Q4_0 / Q4_1; see `infer.dialects.block_quant` and docs/gguf.md).

    The operand is the packed weight as stored, normally a `graph.weight` of
    `ui8`: `[..., K / block_size * block_bytes]`; the result is the logical
    weight `[..., K]` in f32 (or f16 / bf16: computed in f32, then rounded once).
    Each row (last dimension) is a sequence of blocks of 32 values with an fp16
    scale `d` (and, for q4_1, an fp16 minimum `m`): q8_0 is `d * q` with signed
    bytes q; q4_0 is `d * (q - 8)` and q4_1 `d * q + m` with 4-bit q (the low
    nibbles of a block's 16 bytes are its first 16 values, the high nibbles the
    last 16). Results are bit-identical to llama.cpp / `gguf.quants.dequantize`.

    A lowering sees `graph.linear %x, (graph.dequantize_blocks (graph.weight))`
    as "this matmul's weight is these packed blocks in this format" and may
    keep the blocks packed in memory and expand them next to the matrix unit.

        %p = graph.weight @blk.0.attn_q.weight : tensor<576x360xui8>
        %w = graph.dequantize_blocks %p {format = "q4_1"} : (tensor<576x360xui8>) -> tensor<576x576xf32>
    """

    name = "graph.dequantize_blocks"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    block_format = prop_def(StringAttr, prop_name="format")
    traits = traits_def(Pure())
    assembly_format = "$input " + FUNCTIONAL

    def __init__(self, input: SSAValue | Operation, format: str, element_type: Attribute):
        input = SSAValue.get(input)
        fmt = block_format(format)
        shape = shape_of(input)
        logical = (*shape[:-1], fmt.logical_last_dim(shape[-1])) if shape else shape
        super().__init__(
            operands=[input],
            result_types=[TensorType(element_type, logical)],
            properties={"format": StringAttr(format)},
        )

    @property
    def format_name(self) -> str:
        return self.block_format.data

    def infer_result_types(self) -> list[TensorType]:
        fmt = BLOCK_FORMATS.get(self.format_name)
        if fmt is None:
            raise VerifyException(
                f"unknown block format \"{self.format_name}\" (supported: {', '.join(BLOCK_FORMATS)})"
            )
        if element_type_name(element_type_of(self.input)) != "ui8":
            raise VerifyException(
                f"the packed weight must be ui8, got {element_type_name(element_type_of(self.input))}"
            )
        elem = element_type_of(self.output)
        if element_type_name(elem) not in ("f32", "f16", "bf16"):
            raise VerifyException(f"the result must be f32, f16 or bf16, got {element_type_name(elem)}")
        packed = shape_of(self.input)
        if not packed:
            raise VerifyException("the packed weight must have rank >= 1")
        if packed[-1] == DYNAMIC or packed[-1] % fmt.block_bytes:
            raise VerifyException(
                f"a packed {fmt.name} row is a whole number of {fmt.block_bytes}-byte blocks, "
                f"got {format_shape(packed)}"
            )
        return [TensorType(elem, (*packed[:-1], fmt.logical_last_dim(packed[-1])))]
