"""Transformer graph ops: attention, rotary embedding, gather, and the paged KV cache
(`graph.kv_cache_write`, `graph.paged_attention`; docs/paged-kv.md)."""

from __future__ import annotations


from xdsl.dialects.builtin import I64, BoolAttr, FloatAttr, IntegerAttr, TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, prop_def
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import (
    element_type_name,
    element_type_of,
    format_shape,
    is_bool,
    is_integer,
    shape_of,
)
from infer.dialects.graph.base import (
    bool_attr,
    broadcast_shapes,
    FUNCTIONAL,
    i64_attr,
    normalize_axis,
    require_float,
    require_rank,
    require_same_elem,
    Shape,
    TensorResultOp,
)


# --------------------------------------------------------------------------
# Transformer ops
# --------------------------------------------------------------------------


@irdl_op_definition
class AttentionOp(TensorResultOp):
    """Scaled dot-product attention with grouped-query heads.

    q: [B, Hq, Sq, D], k: [B, Hkv, Skv, D], v: [B, Hkv, Skv, Dv], Hq % Hkv == 0
    (query head h reads kv head h // (Hq / Hkv)). `scale` defaults to 1/sqrt(D).
    `causal`: query i sees keys j <= i + (Skv - Sq), i.e. the queries are the last
    Sq positions (a decode step with a KV cache). An optional `mask` broadcasting to
    [B, Hq, Sq, Skv] is boolean (true = attend) or additive (added to the scores).
    A query row whose keys are all masked out yields zeros (as PyTorch's SDPA math path).
    """

    name = "graph.attention"
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    causal = prop_def(BoolAttr, default_value=bool_attr(False))
    scale = opt_prop_def(FloatAttr)
    assembly_format = "$query `,` $key `,` $value (`,` $mask^)? " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = require_same_elem(self, [self.query, self.key, self.value])
        require_float(self, self.query, "the query")
        b, hq, sq, d = require_rank(self, self.query, "the query [B, Hq, Sq, D]", [4])
        bk, hkv, skv, dk = require_rank(self, self.key, "the key [B, Hkv, Skv, D]", [4])
        bv, hv, sv, dv = require_rank(self, self.value, "the value [B, Hkv, Skv, Dv]", [4])
        if (bk, hkv, skv) != (bv, hv, sv):
            raise VerifyException(
                f"key {format_shape(shape_of(self.key))} and value "
                f"{format_shape(shape_of(self.value))} must agree on batch, heads and length"
            )
        if b != bk:
            raise VerifyException(f"query batch {b} differs from key batch {bk}")
        if d != dk:
            raise VerifyException(f"query head dim {d} differs from key head dim {dk}")
        if hkv < 1 or hq % hkv:
            raise VerifyException(
                f"query heads ({hq}) must be a multiple of key/value heads ({hkv})"
            )
        if self.causal.value.data and sq > skv:
            raise VerifyException(
                f"causal attention needs at least as many keys ({skv}) as queries ({sq})"
            )
        if self.mask is not None:
            m_elem = element_type_of(self.mask)
            if not is_bool(m_elem) and m_elem != elem:
                raise VerifyException(
                    f"the mask must be i1 (true = attend) or additive with the "
                    f"query's element type, got {element_type_name(m_elem)}"
                )
            target = (b, hq, sq, skv)
            if broadcast_shapes(self.name, shape_of(self.mask), target) != target:
                raise VerifyException(
                    f"mask {format_shape(shape_of(self.mask))} does not broadcast to the "
                    f"scores' shape {format_shape(target)}"
                )
        return [TensorType(elem, (b, hq, sq, dv))]


@irdl_op_definition
class RotaryOp(TensorResultOp):
    """Rotary position embedding on the first R = cos.shape[-1] features of x.

    x: [..., S, D]; cos, sin broadcast to [..., S, R], R even, R <= D (partial
    rotary leaves the rest untouched). `interleaved = false` rotates halves
    (x[:R/2], x[R/2:]) as in Llama/GPT-NeoX; `true` rotates pairs (x[2i], x[2i+1])
    as in GPT-J. cos/sin hold the angle per feature (HF layout: halves repeated).
    """

    name = "graph.rotary"
    input = operand_def(TensorType)
    cos = operand_def(TensorType)
    sin = operand_def(TensorType)
    interleaved = prop_def(BoolAttr, default_value=bool_attr(False))
    assembly_format = "$input `,` $cos `,` $sin " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = require_same_elem(self, [self.input, self.cos, self.sin])
        require_float(self, self.input, "the input")
        x = shape_of(self.input)
        if len(x) < 2:
            raise VerifyException(f"the input must be [..., S, D], got {format_shape(x)}")
        cos, sin = shape_of(self.cos), shape_of(self.sin)
        if cos != sin:
            raise VerifyException(f"cos {format_shape(cos)} and sin {format_shape(sin)} differ")
        if not cos:
            raise VerifyException("cos/sin must have rank >= 1")
        r = cos[-1]
        if r % 2 or r > x[-1]:
            raise VerifyException(
                f"the rotary dim (cos.shape[-1] = {r}) must be even and at most the "
                f"feature dim {x[-1]}"
            )
        target = (*x[:-1], r)
        if broadcast_shapes(self.name, cos, target) != target:
            raise VerifyException(
                f"cos/sin {format_shape(cos)} do not broadcast to {format_shape(target)}"
            )
        return [TensorType(elem, x)]


@irdl_op_definition
class GatherOp(TensorResultOp):
    """Take slices of `input` along `axis` at `indices` (embedding lookup = axis 0).
    Result shape: input[:axis] + indices + input[axis+1:]. Negative indices count
    from the end; out-of-range indices are an error at run time."""

    name = "graph.gather"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    assembly_format = "$input `,` $indices " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        x = shape_of(self.input)
        if not is_integer(element_type_of(self.indices)):
            raise VerifyException(
                f"indices must be integers, got {element_type_name(element_type_of(self.indices))}"
            )
        axis = normalize_axis(self.name, self.axis.value.data, len(x))
        if not x:
            raise VerifyException("cannot gather from a scalar")
        return [TensorType(element_type_of(self.input), (*x[:axis], *shape_of(self.indices), *x[axis + 1 :]))]


def _require_i32(value: SSAValue, what: str, rank: int) -> Shape:
    if element_type_name(element_type_of(value)) != "i32":
        raise VerifyException(
            f"{what} must be i32, got {element_type_name(element_type_of(value))}"
        )
    shape = shape_of(value)
    if len(shape) != rank:
        raise VerifyException(f"{what} must have rank {rank}, got shape {format_shape(shape)}")
    return shape


@irdl_op_definition
class KvCacheWriteOp(TensorResultOp):
    """Write rows into a paged KV pool at token slots (docs/paged-kv.md).

    cache: T[S, W] (one row per token slot: all KV heads of one token), rows: T[N, W],
    slots: i32[N]. The result is the cache with row slots[i] replaced by rows[i]; a slot
    outside [0, S) is an error at run time. The host computes the slots (vLLM's
    slot_mapping): block_table[t // BS] * BS + t % BS. When the cache is a function
    argument and the result is returned, the NPU lowering writes in place (the result's
    buffer is the argument's: a donated buffer).

        %k1 = graph.kv_cache_write %k0, %rows, %slots : (tensor<64x32xf32>, tensor<2x32xf32>, tensor<2xi32>) -> tensor<64x32xf32>
    """

    name = "graph.kv_cache_write"
    cache = operand_def(TensorType)
    rows = operand_def(TensorType)
    slots = operand_def(TensorType)
    assembly_format = "$cache `,` $rows `,` $slots " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = require_same_elem(self, [self.cache, self.rows])
        s, w = require_rank(self, self.cache, "the cache [S, W]", [2])
        n, wr = require_rank(self, self.rows, "the rows [N, W]", [2])
        (ns,) = _require_i32(self.slots, "the slots", 1)
        if wr != w:
            raise VerifyException(f"rows {format_shape((n, wr))} must have the cache's row width {w}")
        if ns != n:
            raise VerifyException(f"{n} rows but {ns} slots")
        return [TensorType(elem, (s, w))]


@irdl_op_definition
class PagedAttentionOp(TensorResultOp):
    """Attention of the last Sq tokens of each sequence over its paged KV cache
    (docs/paged-kv.md).

    q: T[B, Hq, Sq, D], k_cache: T[S, Hkv*D], v_cache: T[S, Hkv*Dv] (S = NB * BS: a pool of
    NB blocks of BS token rows), block_tables: i32[B, MB], context_lens: i32[B];
    `block_size` = BS (a power of two), `scale` defaults to 1/sqrt(D).
    Sequence b has n = context_lens[b] tokens (0 <= n <= MB * BS); token t lives in row
    block_tables[b, t // BS] * BS + t % BS of the pools; query row i is the token at
    position n - Sq + i (the queries are the last Sq tokens, already written to the cache)
    and attends to the tokens t <= n - Sq + i (causal); query head h reads KV head
    h // (Hq / Hkv). A query row without any key (n - Sq + i < 0) yields zeros. Decode is
    Sq = 1, a chunk of prefill Sq = C. Only the blocks below ceil(n / BS) are read.

        %o = graph.paged_attention %q, %kc, %vc, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
    """

    name = "graph.paged_attention"
    query = operand_def(TensorType)
    key_cache = operand_def(TensorType)
    value_cache = operand_def(TensorType)
    block_tables = operand_def(TensorType)
    context_lens = operand_def(TensorType)
    block_size = prop_def(IntegerAttr[I64])
    scale = opt_prop_def(FloatAttr)
    assembly_format = (
        "$query `,` $key_cache `,` $value_cache `,` $block_tables `,` $context_lens " + FUNCTIONAL
    )

    @property
    def block_size_value(self) -> int:
        return int(self.block_size.value.data)

    def geometry(self) -> tuple[int, int, int, int, int, int, int]:
        """(B, Hq, Sq, D, Hkv, Dv, MB) after verification."""
        b, hq, sq, d = shape_of(self.query)
        wk = shape_of(self.key_cache)[1]
        hkv = wk // d
        dv = shape_of(self.value_cache)[1] // hkv
        return b, hq, sq, d, hkv, dv, shape_of(self.block_tables)[1]

    def infer_result_types(self) -> list[TensorType]:
        elem = require_same_elem(self, [self.query, self.key_cache, self.value_cache])
        require_float(self, self.query, "the query")
        b, hq, sq, d = require_rank(self, self.query, "the query [B, Hq, Sq, D]", [4])
        s, wk = require_rank(self, self.key_cache, "the key cache [S, Hkv*D]", [2])
        sv, wv = require_rank(self, self.value_cache, "the value cache [S, Hkv*Dv]", [2])
        bt_b, _mb = _require_i32(self.block_tables, "the block tables [B, MB]", 2)
        (cl_b,) = _require_i32(self.context_lens, "the context lengths [B]", 1)
        bs = self.block_size_value
        if bs < 1 or bs & (bs - 1):
            raise VerifyException(f"block_size must be a power of two, got {bs}")
        if s != sv:
            raise VerifyException(f"the key cache has {s} rows but the value cache {sv}")
        if s % bs:
            raise VerifyException(f"the caches' {s} rows are not a whole number of {bs}-row blocks")
        if d < 1 or wk % d:
            raise VerifyException(
                f"the key cache width {wk} is not a multiple of the query head dim {d}"
            )
        hkv = wk // d
        if hq % hkv:
            raise VerifyException(
                f"query heads ({hq}) must be a multiple of key/value heads ({hkv} = {wk} / {d})"
            )
        if wv % hkv:
            raise VerifyException(
                f"the value cache width {wv} is not a multiple of the key/value heads ({hkv})"
            )
        if bt_b != b or cl_b != b:
            raise VerifyException(
                f"block tables ({bt_b} rows) and context lengths ({cl_b}) must have the "
                f"query's batch {b}"
            )
        return [TensorType(elem, (b, hq, sq, wv // hkv))]


PAGED_KV_OPS = (KvCacheWriteOp, PagedAttentionOp)
