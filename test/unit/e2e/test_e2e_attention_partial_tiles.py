"""Attention whose query tiles loop inside a head loop, with a partial last query tile: the
output tile `o` is double-buffered on the head loop (its uses include the partial tile's
copy after the query loop), so inside the query loop the same half is reused every
iteration. That loop-carried dependency (store of tile j before the fill of tile j+1) must be
synchronised; it was skipped as if the free semaphore covered it, and the race checker
faulted."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects.ir_io import make_context, parse_ir, verify_module

T = "tensor<1x2x200x32xf32>"
TEXT = f"""func.func @main(%q: {T} {{graph.name = "q"}}, %k: {T} {{graph.name = "k"}}, %v: {T} {{graph.name = "v"}}) -> ({T} {{graph.name = "y"}}) {{
  %a = graph.attention %q, %k, %v : ({T}, {T}, {T}) -> {T}
  func.return %a : {T}
}}"""


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_attention_partial_query_tile_inside_head_loop(precision):
    module = parse_ir(make_context(), TEXT, "attention.mlir")
    verify_module(module)
    model = infer.Model(module)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 2, 200, 32)).astype(np.float32) for _ in range(3)]
    (y,) = infer.compile(model, target="edge", precision=precision).run(xs, check_races=True)
    (ref,) = model.run(xs)
    if precision == "fp32":
        assert float(np.abs(y - ref).max()) <= 1e-3 * float(ref.max() - ref.min())
    else:
        cos = float(y.ravel() @ ref.ravel()) / float(np.linalg.norm(y) * np.linalg.norm(ref))
        assert cos >= 0.999
