"""Small graph-IR programs shared by the code-generation tests."""

from __future__ import annotations

import numpy as np


def parse_with_weights(text: str, weights: dict[str, np.ndarray], filename: str = "test.mlir"):
    """Graph IR `text` parsed and verified, its `graph.weight` values attached from `weights`."""
    from infer.dialects.ir_io import make_context, parse_ir, verify_module
    from infer.dialects.weights import WeightStore, attach_weights

    module = parse_ir(make_context(), text, filename)
    verify_module(module)
    store = WeightStore()
    for name, value in weights.items():
        store.set(name, value)
    attach_weights(module, store)
    return module


def norm_then_projections(M: int, K: int, widths: dict[str, int], *, chained: bool,
                          seed: int) -> tuple[str, dict[str, np.ndarray]]:
    """x [M, K] -> layer norm -> a linear projection (bias) per name in `widths` (its output
    width), each reading the norm's output or, `chained`, the projection before it; the
    function returns every projection (the last one when chained). (IR text, weights: the norm's
    scale and shift, then each projection's weight and bias, drawn in that order.)"""
    x = f"tensor<{M}x{K}xf32>"
    lines, outs, src, width = [], [], "%h", K
    for name, n in widths.items():
        y = f"tensor<{M}x{n}xf32>"
        lines += [f"  %w{name} = graph.weight @w{name} : tensor<{n}x{width}xf32>",
                  f"  %b{name} = graph.weight @b{name} : tensor<{n}xf32>",
                  f"  %{name} = graph.linear {src}, %w{name}, %b{name} : (tensor<{M}x{width}xf32>, "
                  f"tensor<{n}x{width}xf32>, tensor<{n}xf32>) -> {y}"]
        outs.append((name, y))
        if chained:
            src, width = f"%{name}", n
    if chained:
        outs = outs[-1:]
    results = ", ".join(f'{y} {{graph.name = "{name}"}}' for name, y in outs)
    text = f"""
func.func @main(%x: {x} {{graph.name = "x"}}) -> ({results}) {{
  %g = graph.weight @g : tensor<{K}xf32>
  %e = graph.weight @e : tensor<{K}xf32>
  %h = graph.layer_norm %x, %g, %e : ({x}, tensor<{K}xf32>, tensor<{K}xf32>) -> {x}
{chr(10).join(lines)}
  func.return {", ".join("%" + name for name, _ in outs)} : {", ".join(y for _, y in outs)}
}}
"""
    rng = np.random.default_rng(seed)
    weights = {"g": (1 + 0.1 * rng.standard_normal(K)).astype(np.float32),
               "e": (0.1 * rng.standard_normal(K)).astype(np.float32)}
    width = K
    for name, n in widths.items():
        weights[f"w{name}"] = (rng.standard_normal((n, width)) * 0.05).astype(np.float32)
        weights[f"b{name}"] = rng.standard_normal(n).astype(np.float32)
        width = n if chained else K
    return text, weights


def o_norm_ffn(M: int = 128, D: int = 384, F: int = 1536) -> tuple[str, dict[str, np.ndarray]]:
    """A BERT block's second half: a [M, D] attention output through the o projection (bias),
    plus the residual r, layer norm, the FFN's up projection (bias), GELU and down projection
    (bias)."""
    x, h = f"tensor<{M}x{D}xf32>", f"tensor<{M}x{F}xf32>"
    text = f"""
func.func @main(%a: {x} {{graph.name = "a"}}, %r: {x} {{graph.name = "r"}}) -> ({x} {{graph.name = "y"}}) {{
  %wo = graph.weight @wo : tensor<{D}x{D}xf32>
  %bo = graph.weight @bo : tensor<{D}xf32>
  %g = graph.weight @g : tensor<{D}xf32>
  %e = graph.weight @e : tensor<{D}xf32>
  %w1 = graph.weight @w1 : tensor<{F}x{D}xf32>
  %b1 = graph.weight @b1 : tensor<{F}xf32>
  %w2 = graph.weight @w2 : tensor<{D}x{F}xf32>
  %b2 = graph.weight @b2 : tensor<{D}xf32>
  %o = graph.linear %a, %wo, %bo : ({x}, tensor<{D}x{D}xf32>, tensor<{D}xf32>) -> {x}
  %s = graph.add %o, %r : ({x}, {x}) -> {x}
  %n = graph.layer_norm %s, %g, %e : ({x}, tensor<{D}xf32>, tensor<{D}xf32>) -> {x}
  %u = graph.linear %n, %w1, %b1 : ({x}, tensor<{F}x{D}xf32>, tensor<{F}xf32>) -> {h}
  %gu = graph.gelu %u {{approximate = "none"}} : ({h}) -> {h}
  %d = graph.linear %gu, %w2, %b2 : ({h}, tensor<{D}x{F}xf32>, tensor<{D}xf32>) -> {x}
  func.return %d : {x}
}}
"""
    rng = np.random.default_rng(11)
    return text, {"wo": (rng.standard_normal((D, D)) * 0.05).astype(np.float32),
                  "bo": rng.standard_normal(D).astype(np.float32),
                  "g": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32),
                  "e": (0.1 * rng.standard_normal(D)).astype(np.float32),
                  "w1": (rng.standard_normal((F, D)) * 0.05).astype(np.float32),
                  "b1": rng.standard_normal(F).astype(np.float32),
                  "w2": (rng.standard_normal((D, F)) * 0.03).astype(np.float32),
                  "b2": rng.standard_normal(D).astype(np.float32)}


def linear_chain(M: int, K: int, N1: int, N2: int) -> tuple[str, dict[str, np.ndarray]]:
    """x [M, K] -> linear (bias) -> relu -> linear (bias): two GEMM kernels in a row, the second
    reading the first's result; (IR text, weights)."""
    text = f"""
func.func @main(%x: tensor<{M}x{K}xf32> {{graph.name = "x"}}) -> (tensor<{M}x{N2}xf32> {{graph.name = "y"}}) {{
  %w1 = graph.weight @w1 : tensor<{N1}x{K}xf32>
  %b1 = graph.weight @b1 : tensor<{N1}xf32>
  %h = graph.linear %x, %w1, %b1 : (tensor<{M}x{K}xf32>, tensor<{N1}x{K}xf32>, tensor<{N1}xf32>) -> tensor<{M}x{N1}xf32>
  %r = graph.relu %h : (tensor<{M}x{N1}xf32>) -> tensor<{M}x{N1}xf32>
  %w2 = graph.weight @w2 : tensor<{N2}x{N1}xf32>
  %b2 = graph.weight @b2 : tensor<{N2}xf32>
  %y = graph.linear %r, %w2, %b2 : (tensor<{M}x{N1}xf32>, tensor<{N2}x{N1}xf32>, tensor<{N2}xf32>) -> tensor<{M}x{N2}xf32>
  func.return %y : tensor<{M}x{N2}xf32>
}}
"""
    rng = np.random.default_rng(3)
    weights = {"w1": (rng.standard_normal((N1, K)) * 0.1).astype(np.float32),
               "b1": rng.standard_normal(N1).astype(np.float32),
               "w2": (rng.standard_normal((N2, N1)) * 0.1).astype(np.float32),
               "b2": rng.standard_normal(N2).astype(np.float32)}
    return text, weights


def pointwise_conv(C: int, HW: int, O: int, *, seed: int = 0, scale: float = 0.1
                   ) -> tuple[str, dict[str, np.ndarray]]:
    """x [1, C, HW, HW] -> 1x1 conv (bias) -> relu: one conv kernel; (IR text, weights drawn
    from `seed`, the weights scaled by `scale`)."""
    x, w, y = f"tensor<1x{C}x{HW}x{HW}xf32>", f"tensor<{O}x{C}x1x1xf32>", f"tensor<1x{O}x{HW}x{HW}xf32>"
    text = f"""func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w = graph.weight @w : {w}
  %b = graph.weight @b : tensor<{O}xf32>
  %c = graph.conv2d %x, %w, %b : ({x}, {w}, tensor<{O}xf32>) -> {y}
  %r = graph.relu %c : ({y}) -> {y}
  func.return %r : {y}
}}"""
    rng = np.random.default_rng(seed)
    weights = {"w": (rng.standard_normal((O, C, 1, 1)) * scale).astype(np.float32),
               "b": rng.standard_normal(O).astype(np.float32)}
    return text, weights


def strided_constant_conv(C: int, H: int, O: int) -> str:
    """x [1, C, H, H] -> 3x3 conv, stride 2, padding 1, every weight 0.01 (a graph constant:
    the expected output is 0.01 times each window's sum), no bias; IR text."""
    OH = (H + 1) // 2
    x, w, y = f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<{O}x{C}x3x3xf32>", f"tensor<1x{O}x{OH}x{OH}xf32>"
    return f"""func.func @main(%x: {x}) -> {y} {{
  %w = graph.constant dense<0.01> : {w}
  %c = graph.conv2d %x, %w {{stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>}} : ({x}, {w}) -> {y}
  func.return %c : {y}
}}"""


def pointwise_conv_chain(C: int, M: int, O: int, HW: int, *, seed: int = 0
                         ) -> tuple[str, dict[str, np.ndarray]]:
    """x [1, C, HW, HW] -> 1x1 conv -> relu -> 1x1 conv: two conv kernels, the second reading
    the first's relu (held as bf16 in a bf16 program: only a conv reads it); (IR text,
    weights w1 [M, C, 1, 1] and w2 [O, M, 1, 1] drawn from `seed`, scaled by 0.05)."""
    x, y1, y2 = (f"tensor<1x{c}x{HW}x{HW}xf32>" for c in (C, M, O))
    text = f"""
func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y2} {{graph.name = "y"}}) {{
  %w1 = graph.weight @w1 : tensor<{M}x{C}x1x1xf32>
  %w2 = graph.weight @w2 : tensor<{O}x{M}x1x1xf32>
  %c1 = graph.conv2d %x, %w1 : ({x}, tensor<{M}x{C}x1x1xf32>) -> {y1}
  %r1 = graph.relu %c1 : ({y1}) -> {y1}
  %c2 = graph.conv2d %r1, %w2 : ({y1}, tensor<{O}x{M}x1x1xf32>) -> {y2}
  func.return %c2 : {y2}
}}
"""
    rng = np.random.default_rng(seed)
    weights = {"w1": (rng.standard_normal((M, C, 1, 1)) * 0.05).astype(np.float32),
               "w2": (rng.standard_normal((O, M, 1, 1)) * 0.05).astype(np.float32)}
    return text, weights


def chain_function(ty: str, lines: list[str], result: str) -> str:
    """@main(%x: ty "x") -> ty "y": the (indented) body `lines`, returning value `result`."""
    body = "\n".join(lines)
    return f"""func.func @main(%x: {ty} {{graph.name = "x"}}) -> ({ty} {{graph.name = "y"}}) {{
{body}
  func.return {result} : {ty}
}}"""


def conv_chain(C: int, HW: int, kernels: list[int | str], *, seed: int = 0) -> tuple[str, dict[str, np.ndarray]]:
    """x [1, C, HW, HW] -> per entry of `kernels` a conv (bias) -> relu, each reading the relu
    before (held as bf16 in a bf16 program: only a conv reads it): k, a kxk conv; "dw<k>", a kxk
    depthwise one (groups = C); padding k // 2. (IR text, weights w<i> and b<i> [C] drawn from
    `seed`)."""
    t = f"tensor<1x{C}x{HW}x{HW}xf32>"
    lines, weights, value = [], {}, "%x"
    rng = np.random.default_rng(seed)
    for i, kind in enumerate(kernels):
        depthwise = isinstance(kind, str)
        k = int(kind[2:]) if isinstance(kind, str) else kind
        cin = 1 if depthwise else C
        w, p = f"tensor<{C}x{cin}x{k}x{k}xf32>", k // 2
        groups = f", groups = {C} : i64" if depthwise else ""
        lines += [f"  %w{i} = graph.weight @w{i} : {w}", f"  %b{i} = graph.weight @b{i} : tensor<{C}xf32>",
                  f"  %c{i} = graph.conv2d {value}, %w{i}, %b{i} {{padding = array<i64: {p}, {p}, {p}, {p}>{groups}}} "
                  f": ({t}, {w}, tensor<{C}xf32>) -> {t}",
                  f"  %r{i} = graph.relu %c{i} : ({t}) -> {t}"]
        weights[f"w{i}"] = (rng.standard_normal((C, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        weights[f"b{i}"] = (rng.standard_normal(C) * 0.1).astype(np.float32)
        value = f"%r{i}"
    return chain_function(t, lines, value), weights


def attention_blocks(blocks: int, size: int) -> tuple[str, dict[str, np.ndarray]]:
    """`blocks` attention-shaped blocks in a row on [size, size] tensors: per block two
    projections of the block's input, scores q @ k^T, softmax, and the weighted sum of the
    block's input, which is the next block's input; (IR text, weights)."""
    ty = f"tensor<{size}x{size}xf32>"
    body, weights, x = [], {}, "%x"
    for b in range(blocks):
        body += [f"%wq{b} = graph.weight @wq{b} : {ty}", f"%wk{b} = graph.weight @wk{b} : {ty}",
                 f"%q{b} = graph.linear {x}, %wq{b} : ({ty}, {ty}) -> {ty}",
                 f"%k{b} = graph.linear {x}, %wk{b} : ({ty}, {ty}) -> {ty}",
                 f"%s{b} = graph.matmul %q{b}, %k{b} {{transpose_b = true}} : ({ty}, {ty}) -> {ty}",
                 f"%p{b} = graph.softmax %s{b} {{axis = -1 : i64}} : ({ty}) -> {ty}",
                 f"%y{b} = graph.matmul %p{b}, {x} : ({ty}, {ty}) -> {ty}"]
        for name in (f"wq{b}", f"wk{b}"):
            weights[name] = (np.random.default_rng(b).standard_normal((size, size)) * 0.05).astype(np.float32)
        x = f"%y{b}"
    return chain_function(ty, ["  " + line for line in body], x), weights


def head_split_attention(B: int, S: int, HQ: int, HKV: int, D: int, *, o_projection: bool = False,
                         return_q_heads: bool = False) -> str:
    """x_q [B, S, HQ*D], x_k / x_v [B, S, HKV*D] -> head splits (reshape, transpose to
    [B, H, S, D]) -> attention -> head merge [B, S, HQ*D]; with `o_projection` a linear of the
    merged heads (weights @wo [HQ*D, HQ*D], @bo) follows; with `return_q_heads` the split q is
    a second result (so its transpose must be copied)."""
    q, kv = f"tensor<{B}x{S}x{HQ * D}xf32>", f"tensor<{B}x{S}x{HKV * D}xf32>"
    q4, kv4 = f"tensor<{B}x{S}x{HQ}x{D}xf32>", f"tensor<{B}x{S}x{HKV}x{D}xf32>"
    qh, kvh = f"tensor<{B}x{HQ}x{S}x{D}xf32>", f"tensor<{B}x{HKV}x{S}x{D}xf32>"
    w, bias = f"tensor<{HQ * D}x{HQ * D}xf32>", f"tensor<{HQ * D}xf32>"
    perm = "{perm = array<i64: 0, 2, 1, 3>}"
    projection = (f"""  %w = graph.weight @wo : {w}
  %b = graph.weight @bo : {bias}
  %o = graph.linear %m, %w, %b : ({q}, {w}, {bias}) -> {q}
""" if o_projection else "")
    merged = "%m" if o_projection else "%o"
    results = f"{q}, {qh}" if return_q_heads else q
    returned = f"%o, %qt : {q}, {qh}" if return_q_heads else f"%o : {q}"
    return f"""func.func @main(%xq: {q}, %xk: {kv}, %xv: {kv}) -> ({results}) {{
  %q4 = graph.reshape %xq : ({q}) -> {q4}
  %k4 = graph.reshape %xk : ({kv}) -> {kv4}
  %v4 = graph.reshape %xv : ({kv}) -> {kv4}
  %qt = graph.transpose %q4 {perm} : ({q4}) -> {qh}
  %kt = graph.transpose %k4 {perm} : ({kv4}) -> {kvh}
  %vt = graph.transpose %v4 {perm} : ({kv4}) -> {kvh}
  %a = graph.attention %qt, %kt, %vt : ({qh}, {kvh}, {kvh}) -> {qh}
  %at = graph.transpose %a {perm} : ({qh}) -> {q4}
  {merged} = graph.reshape %at : ({q4}) -> {q}
{projection}  func.return {returned}
}}"""


def projected_attention(S: int = 128, H: int = 12, D: int = 32, *, seed: int = 14
                        ) -> tuple[str, dict[str, np.ndarray]]:
    """A BERT self-attention: q / k / v projections (with biases) of x [1, S, H*D], head
    splits, bidirectional attention, head merge, the o projection and the residual (MiniLM's
    shape by default: 12 heads of 32)."""
    W = H * D
    x, h4, t4 = f"tensor<1x{S}x{W}xf32>", f"tensor<1x{S}x{H}x{D}xf32>", f"tensor<1x{H}x{S}x{D}xf32>"
    w, b = f"tensor<{W}x{W}xf32>", f"tensor<{W}xf32>"
    perm = "{perm = array<i64: 0, 2, 1, 3>}"
    proj = "\n".join(f"""  %w{n} = graph.weight @{n}.weight : {w}
  %b{n} = graph.weight @{n}.bias : {b}
  %{n} = graph.linear %x, %w{n}, %b{n} : ({x}, {w}, {b}) -> {x}
  %{n}4 = graph.reshape %{n} : ({x}) -> {h4}
  %{n}t = graph.transpose %{n}4 {perm} : ({h4}) -> {t4}""" for n in "qkv")
    text = f"""func.func @main(%x: {x} {{graph.name = "x"}}) -> ({x} {{graph.name = "y"}}) {{
{proj}
  %a = graph.attention %qt, %kt, %vt : ({t4}, {t4}, {t4}) -> {t4}
  %at = graph.transpose %a {perm} : ({t4}) -> {h4}
  %m = graph.reshape %at : ({h4}) -> {x}
  %wo = graph.weight @o.weight : {w}
  %bo = graph.weight @o.bias : {b}
  %o = graph.linear %m, %wo, %bo : ({x}, {w}, {b}) -> {x}
  %y = graph.add %o, %x : ({x}, {x}) -> {x}
  func.return %y : {x}
}}"""
    rng = np.random.default_rng(seed)
    weights = {}
    for n in "qkvo":
        weights[f"{n}.weight"] = (rng.standard_normal((W, W)) * 0.05).astype(np.float32)
        weights[f"{n}.bias"] = (rng.standard_normal(W) * 0.1).astype(np.float32)
    return text, weights
