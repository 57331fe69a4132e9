"""graph-to-tile of the paged KV ops (passes/graph_to_tile/paged_kv.py): a decode step (Sq = 1,
sequences of different lengths, grouped-query heads) and a prefill chunk (Sq > 1 at a nonzero
start, and a sequence shorter than the chunk) with the K/V writes in place; graph interpreter
(before) vs tile interpreter (after), both targets and both precisions."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.tile_interpreter import run_tile_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import GraphToTilePass
from infer.passes.testing import apply_pass, check_pass_preserves_semantics

TOL = {"fp32": 1e-4, "bf16": 5e-2}


def paged_step(B: int, Hq: int, Hkv: int, Sq: int, D: int, BS: int, NB: int, MB: int) -> str:
    """@main(q, new K rows, new V rows, slots, block tables, context lengths, K pool, V pool)
    -> (attention output, K pool', V pool'): one decode step / prefill chunk of one layer."""
    W, S = Hkv * D, NB * BS
    q, pool, rows = (f"tensor<{B}x{Hq}x{Sq}x{D}xf32>", f"tensor<{S}x{W}xf32>",
                     f"tensor<{B * Sq}x{W}xf32>")
    slots, tables, lens = f"tensor<{B * Sq}xi32>", f"tensor<{B}x{MB}xi32>", f"tensor<{B}xi32>"
    return f"""func.func @main(%q: {q}, %kn: {rows}, %vn: {rows}, %slots: {slots}, %bt: {tables}, %n: {lens}, %k: {pool}, %v: {pool}) -> ({q}, {pool}, {pool}) {{
  %k1 = graph.kv_cache_write %k, %kn, %slots : ({pool}, {rows}, {slots}) -> {pool}
  %v1 = graph.kv_cache_write %v, %vn, %slots : ({pool}, {rows}, {slots}) -> {pool}
  %o = graph.paged_attention %q, %k1, %v1, %bt, %n {{block_size = {BS} : i64}} : ({q}, {pool}, {pool}, {tables}, {lens}) -> {q}
  func.return %o, %k1, %v1 : {q}, {pool}, {pool}
}}
"""


def step_inputs(B, Hq, Hkv, Sq, D, BS, NB, MB, lens, seed=0):
    """Random queries, rows and pools; distinct random blocks per sequence; the slots of each
    sequence's last Sq tokens (a chunk shorter than Sq writes only its real tokens: the padded
    rows go to a scratch slot in a block no sequence uses)."""
    rng = np.random.default_rng(seed)
    W = Hkv * D
    perm = rng.permutation(NB)
    tables = perm[: B * MB].reshape(B, MB).astype(np.int32)
    spare = int(perm[-1]) * BS
    slots = []
    for b, n in enumerate(lens):
        for p in range(n - Sq, n):
            slots.append(int(tables[b, p // BS]) * BS + p % BS if p >= 0 else spare)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return [f(B, Hq, Sq, D), f(B * Sq, W), f(B * Sq, W), np.array(slots, np.int32), tables,
            np.array(lens, np.int32), f(NB * BS, W), f(NB * BS, W)]


def step_module(geometry):
    m = parse_ir(make_context(), paged_step(*geometry), "paged.mlir")
    verify_module(m)
    attach_weights(m, WeightStore())
    return m


CASES = [
    # (B, Hq, Hkv, Sq, D, BS, NB, MB), context lengths
    pytest.param((3, 4, 2, 1, 8, 4, 12, 3), [1, 6, 12], id="decode-B3-gqa"),
    pytest.param((4, 6, 2, 1, 8, 8, 12, 3), [17, 8, 24, 0], id="decode-B4-empty-seq"),
    pytest.param((2, 4, 2, 5, 8, 4, 12, 4), [5, 14], id="chunk-start0-and-9"),
    pytest.param((1, 2, 1, 8, 8, 4, 8, 4), [6], id="chunk-longer-than-context"),
]


@pytest.mark.parametrize("geometry,lens", CASES)
@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_paged_step_tile_matches_graph(geometry, lens, target, precision):
    m = step_module(geometry)
    xs = step_inputs(*geometry, lens)
    tol = TOL[precision]
    check_pass_preserves_semantics(m, GraphToTilePass(target=target, precision=precision),
                                   rtol=tol, atol=tol, inputs=[xs])


def test_cache_results_are_written_in_place():
    """The returned writes of the cache arguments are tied to them (tile.alias_of), the rows are
    scattered straight into the argument's buffer (no copy), and the block loops' bounds are read
    at run time (tile.load_index feeding each scf.for)."""
    geometry = (2, 2, 1, 1, 8, 4, 8, 2)
    m = step_module(geometry)
    apply_pass(GraphToTilePass(target="edge"), m)
    verify_module(m)
    fn = next(iter(m.body.block.ops))
    attrs = [dict(a.data) for a in fn.arg_attrs.data]
    assert [a.get(t.ALIAS_ATTR).value.data if t.ALIAS_ATTR in a else None for a in attrs] == \
        [None] * 9 + [6, 7]
    text = str(m)
    assert text.count("tile.scatter_rows") == 2
    load = [op for op in fn.walk() if isinstance(op, t.LoadIndexOp)]
    # the two-buffer loop over pairs of blocks and the odd last block (docs/paged-kv.md)
    assert len(load) == 2 and all(any(use.operation.name == "scf.for" for use in op.result.uses) for op in load)
    # run with the input pools: the outputs are those pools updated, and the input arrays
    # themselves are untouched by the interpreter's call (it works on copies)
    xs = step_inputs(*geometry, [3, 7])
    out, k1, v1 = run_tile_module(m, xs)
    for pool, new_rows, updated in ((xs[6], xs[1], k1), (xs[7], xs[2], v1)):
        expected = pool.copy()
        expected[xs[3]] = new_rows
        np.testing.assert_array_equal(updated, expected)


def test_metadata_must_be_function_arguments():
    """Context lengths computed in the graph are refused with a located error."""
    text = """func.func @main(%q: tensor<1x1x1x4xf32>, %k: tensor<8x4xf32>, %bt: tensor<1x2xi32>, %n: tensor<1xf32>) -> tensor<1x1x1x4xf32> {
  %ni = graph.cast %n : (tensor<1xf32>) -> tensor<1xi32>
  %o = graph.paged_attention %q, %k, %k, %bt, %ni {block_size = 4 : i64} : (tensor<1x1x1x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<1x2xi32>, tensor<1xi32>) -> tensor<1x1x1x4xf32>
  func.return %o : tensor<1x1x1x4xf32>
}
"""
    m = parse_ir(make_context(), text, "computed.mlir")
    attach_weights(m, WeightStore())
    with pytest.raises(Exception, match="context lengths must be an i32 function argument"):
        apply_pass(GraphToTilePass(target="edge"), m)


def test_bf16_attention_takes_the_values_in_two_passes():
    """bf16: P @ V runs over V's hi and lo parts and l sums bf16(P), the P the matrix unit gets
    (paged_kv.py), so with V's common offset (as a language model's values have) neither the
    values' rounding nor P's is left in the outputs: against an fp64 reference the decode
    output is several times closer than the same math with bf16(V) (emulated in numpy). On
    server, where the split hides behind the gathers (`values_in_two_parts`; edge keeps bf16(V))."""
    geometry, lens = (2, 4, 2, 1, 16, 16, 12, 6), [40, 77]
    B, Hq, Hkv, _, D, BS, _, _ = geometry
    xs = step_inputs(*geometry, lens, seed=5)
    for i in (2, 7):  # new V rows and the V pool: an offset plus a spread, as real values
        xs[i] = (3.0 + 0.5 * xs[i]).astype(np.float32)
    m = step_module(geometry)
    apply_pass(GraphToTilePass(target="server", precision="bf16"), m)
    got = run_tile_module(m, xs)[0].astype(np.float64)
    q, _, vn, slots, tables, n, kp, vp = xs
    kp, vp = kp.astype(np.float64), vp.astype(np.float64)
    kp[slots], vp[slots] = xs[1], vn

    def attention(values: np.ndarray) -> np.ndarray:
        out = np.zeros(got.shape)
        for b in range(B):
            rows = [tables[b, t // BS] * BS + t % BS for t in range(n[b])]
            for h in range(Hq):
                c = slice(h // (Hq // Hkv) * D, (h // (Hq // Hkv) + 1) * D)
                s = kp[rows, c] @ q[b, h, 0] / np.sqrt(D)
                p = np.exp(s - s.max())
                out[b, h, 0] = p @ values[rows, c] / p.sum()
        return out

    exact = attention(vp)
    rounded_v = attention(vp.astype(ml_dtypes.bfloat16).astype(np.float64))
    assert np.abs(got - exact).max() * 4 <= np.abs(rounded_v - exact).max()
