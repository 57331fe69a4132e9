"""tile-plan-memory: the interval planner (property tests on random interval sets, quality
on realistic chains) and the pass on tile IR (liveness through loops, views, iter_args
and returns; local memories; idempotence)."""

from __future__ import annotations

import random

import pytest
from xdsl.dialects import func
from xdsl.utils.arg_spec import parse_pipeline

from infer.dialects.ir_io import IRError, make_context, parse_ir, verify_module
from infer.dialects.tile import AllocOp, WeightOp, space_of
from infer.passes import infer_passes
from infer.passes.tile_memory_plan import (
    Interval,
    TilePlanMemoryPass,
    _Numbering,
    live_range,
    peak_live_bytes,
    plan_intervals,
)


def _assert_valid(intervals: list[Interval], offsets: list[int], arena: int) -> None:
    assert len(offsets) == len(intervals)
    for iv, off in zip(intervals, offsets, strict=True):
        assert off >= 0 and off % iv.align == 0
        assert off + iv.size <= arena
    assert arena == max((o + iv.size for iv, o in zip(intervals, offsets, strict=True)), default=0)
    for i, (a, oa) in enumerate(zip(intervals, offsets, strict=True)):
        for b, ob in zip(intervals[i + 1:], offsets[i + 1:], strict=True):
            if a.overlaps(b) and a.size and b.size:
                assert oa + a.size <= ob or ob + b.size <= oa, (a, oa, b, ob)
    assert arena >= peak_live_bytes(intervals)


def _random_intervals(rng: random.Random) -> list[Interval]:
    n = rng.randint(1, 60)
    horizon = rng.randint(1, 80)
    out = []
    for _ in range(n):
        s = rng.randrange(horizon)
        e = s + int(rng.expovariate(1 / rng.choice((1, 3, 10, 40))))
        align = rng.choice((1, 2, 4, 64))
        size = rng.choice((0, 1, 3, 4, 64, 100, 1000, 4096, rng.randint(1, 100_000)))
        out.append(Interval(s, e, size, align))
    return out


@pytest.mark.parametrize("seed", range(300))
def test_random_intervals_never_overlap(seed: int) -> None:
    intervals = _random_intervals(random.Random(seed))
    offsets, arena = plan_intervals(intervals)
    _assert_valid(intervals, offsets, arena)


def test_empty_and_single() -> None:
    assert plan_intervals([]) == ([], 0)
    assert plan_intervals([Interval(3, 5, 100)]) == ([0], 100)
    assert peak_live_bytes([]) == 0


def test_disjoint_lifetimes_share_bytes() -> None:
    ivs = [Interval(0, 1, 1000), Interval(2, 3, 1000), Interval(4, 5, 500)]
    offsets, arena = plan_intervals(ivs)
    assert offsets == [0, 0, 0] and arena == 1000


def test_touching_lifetimes_conflict() -> None:
    # inclusive ends: an op reading a and writing b needs both
    ivs = [Interval(0, 2, 64), Interval(2, 4, 64)]
    offsets, arena = plan_intervals(ivs)
    assert arena == 128 and sorted(offsets) == [0, 64]


def test_peak_live_bytes() -> None:
    ivs = [Interval(0, 4, 10), Interval(1, 2, 5), Interval(3, 3, 7), Interval(5, 9, 100)]
    assert peak_live_bytes(ivs) == 100
    assert peak_live_bytes(ivs[:3]) == 17


def _chain(rng: random.Random, n: int, residual_every: int) -> list[Interval]:
    """A CNN/transformer-like chain: tensor i is read by op i+1; every few ops a
    skip tensor stays live until a later residual add."""
    sizes = [64 * rng.choice((256, 512, 1024, 2048, 4096)) for _ in range(n)]
    end = [i + 1 for i in range(n)]
    for i in range(0, n - residual_every, residual_every):
        end[i] = i + residual_every
    return [Interval(i, end[i], sizes[i], 64) for i in range(n)]


@pytest.mark.parametrize("seed", range(40))
def test_realistic_chains_close_to_peak(seed: int) -> None:
    rng = random.Random(seed)
    ivs = _chain(rng, rng.randint(10, 120), rng.choice((2, 3, 4, 5)))
    offsets, arena = plan_intervals(ivs)
    _assert_valid(ivs, offsets, arena)
    assert arena <= 1.2 * peak_live_bytes(ivs)


@pytest.mark.parametrize("graph", ["resnet50", "bert"])
def test_bench_graphs_within_target(graph: str) -> None:
    import bench_memory_plan as bench  # bench/ is on the test path (pyproject.toml)

    g = getattr(bench, graph)()
    ivs = g.intervals()
    offsets, arena = plan_intervals(ivs)
    _assert_valid(ivs, offsets, arena)
    assert arena <= 1.2 * peak_live_bytes(ivs)
    # the same graph as tile IR through the pass
    module = bench.plan_ir(bench.to_tile_ir(g))
    verify_module(module)
    assert module.attributes["tile.arena_bytes"].value.data <= 1.2 * peak_live_bytes(ivs)


# --------------------------------------------------------------------------- the pass on IR

HEADER = 'builtin.module attributes {tile.target = "edge"} {\n'


def _run(text: str, **options) -> object:
    ctx = make_context()
    module = parse_ir(ctx, text, "test.mlir")
    verify_module(module)
    TilePlanMemoryPass(**options).apply(ctx, module)
    verify_module(module)
    return module


def _allocs(module) -> dict[str, AllocOp]:
    return {op.results[0].name_hint: op for op in module.walk() if isinstance(op, AllocOp)}


def _check_no_overlap(module) -> None:
    """Every pair of allocs of one space whose live ranges overlap has disjoint bytes."""
    for fn in module.walk():
        if not isinstance(fn, func.FuncOp):
            continue
        num = _Numbering.of(fn)
        allocs = [op for op in fn.body.walk() if isinstance(op, AllocOp)]
        info = []
        for a in allocs:
            local = space_of(a.buffer) != "dram"
            lo, hi = live_range(a, fn, num, whole_nest=local)
            info.append((space_of(a.buffer), lo, hi, a.offset.value.data, a.size_bytes))
        for i, (sa, la, ha, oa, za) in enumerate(info):
            assert oa % (64 if sa == "dram" else 1) == 0
            for sb, lb, hb, ob, zb in info[i + 1:]:
                if sa == sb and la <= hb and lb <= ha:
                    assert oa + za <= ob or ob + zb <= oa


LOOPS = HEADER + """
  func.func @main(%x: memref<64x64xf32, "dram">, %y: memref<64x64xf32, "dram">) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %early = tile.alloc : memref<64x64xf32, "dram">
    %a = tile.alloc : memref<64x64xf32, "dram">
    %b = tile.alloc : memref<64x64xf32, "dram">
    %c = tile.alloc : memref<64x64xf32, "dram">
    scf.for %i = %c0 to %c4 step %c1 {
      %s = tile.alloc : memref<1x64xf32, "spad">
      scf.for %j = %c0 to %c4 step %c1 {
        tile.dma %x[%c0, %c0], %s[%c0, %c0] {shape = array<i64: 1, 64>} : memref<64x64xf32, "dram">, memref<1x64xf32, "spad">
        tile.dma %s[%c0, %c0], %a[%c0, %c0] {shape = array<i64: 1, 64>} : memref<1x64xf32, "spad">, memref<64x64xf32, "dram">
      }
      tile.dma %a[%c0, %c0], %s[%c0, %c0] {shape = array<i64: 1, 64>} : memref<64x64xf32, "dram">, memref<1x64xf32, "spad">
      tile.dma %s[%c0, %c0], %b[%c0, %c0] {shape = array<i64: 1, 64>} : memref<1x64xf32, "spad">, memref<64x64xf32, "dram">
    }
    scf.for %i = %c0 to %c4 step %c1 {
      %t = tile.alloc : memref<1x64xf32, "spad">
      tile.dma %b[%c0, %c0], %t[%c0, %c0] {shape = array<i64: 1, 64>} : memref<64x64xf32, "dram">, memref<1x64xf32, "spad">
      tile.dma %t[%c0, %c0], %c[%c0, %c0] {shape = array<i64: 1, 64>} : memref<1x64xf32, "spad">, memref<64x64xf32, "dram">
    }
    scf.for %i = %c0 to %c4 step %c1 {
      %u = tile.alloc : memref<1x64xf32, "spad">
      tile.dma %c[%c0, %c0], %u[%c0, %c0] {shape = array<i64: 1, 64>} : memref<64x64xf32, "dram">, memref<1x64xf32, "spad">
      tile.dma %u[%c0, %c0], %early[%c0, %c0] {shape = array<i64: 1, 64>} : memref<1x64xf32, "spad">, memref<64x64xf32, "dram">
      tile.dma %u[%c0, %c0], %y[%c0, %c0] {shape = array<i64: 1, 64>} : memref<1x64xf32, "spad">, memref<64x64xf32, "dram">
    }
    func.return
  }
}
"""


def test_liveness_through_loops() -> None:
    module = _run(LOOPS)
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    num = _Numbering.of(fn)
    al = _allocs(module)
    loops = [op for op in fn.body.block.ops if op.name == "scf.for"]
    rng = {k: live_range(v, fn, num, whole_nest=False) for k, v in al.items()}
    # a and b are written/read inside the first loop nest: live over the whole nest
    assert rng["a"] == (num.index[loops[0]], num.last[loops[0]])
    assert rng["b"] == (num.index[loops[0]], num.last[loops[1]])
    assert rng["c"] == (num.index[loops[1]], num.last[loops[2]])
    # allocated first, touched only in the last loop: live only there
    assert rng["early"] == (num.index[loops[2]], num.last[loops[2]])
    # a is dead after the first nest: c reuses its bytes; early reuses b's
    assert al["a"].offset.value.data == al["c"].offset.value.data
    assert module.attributes["tile.arena_bytes"].value.data == 2 * 64 * 64 * 4
    # local buffers of different nests share bytes
    assert {al[k].offset.value.data for k in "stu"} == {0}
    _check_no_overlap(module)


def test_view_iter_args_and_return_extend_liveness() -> None:
    text = HEADER + """
  func.func @main(%x: memref<64xf32, "dram">) -> memref<8x8xf32, "dram"> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %a = tile.alloc : memref<64xf32, "dram">
    %b = tile.alloc : memref<64xf32, "dram">
    %s = tile.alloc : memref<64xf32, "spad">
    %s2 = tile.alloc : memref<8x8xf32, "spad">
    %v = tile.view %a : memref<64xf32, "dram"> -> memref<8x8xf32, "dram">
    tile.dma %s2[%c0, %c0], %v[%c0, %c0] {shape = array<i64: 8, 8>} : memref<8x8xf32, "spad">, memref<8x8xf32, "dram">
    %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%it = %b) -> (memref<64xf32, "dram">) {
      tile.dma %x[%c0], %s[%c0] {shape = array<i64: 64>} : memref<64xf32, "dram">, memref<64xf32, "spad">
      tile.dma %s[%c0], %it[%c0] {shape = array<i64: 64>} : memref<64xf32, "spad">, memref<64xf32, "dram">
      scf.yield %it : memref<64xf32, "dram">
    }
    tile.dma %r[%c0], %s[%c0] {shape = array<i64: 64>} : memref<64xf32, "dram">, memref<64xf32, "spad">
    tile.dma %s[%c0], %x[%c0] {shape = array<i64: 64>} : memref<64xf32, "spad">, memref<64xf32, "dram">
    func.return %v : memref<8x8xf32, "dram">
  }
}
"""
    module = _run(text)
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    num = _Numbering.of(fn)
    al = _allocs(module)
    loop = next(op for op in fn.body.block.ops if op.name == "scf.for")
    a_lo, a_hi = live_range(al["a"], fn, num, whole_nest=False)
    view = next(op for op in fn.body.block.ops if op.name == "tile.view")
    assert a_lo == num.index[view] + 1  # from the store through the view (a view is free)
    assert a_hi == num.last[fn]  # returned through the view
    b_lo, b_hi = live_range(al["b"], fn, num, whole_nest=False)
    assert b_lo == num.index[loop] and b_hi > num.last[loop]  # the loop result is read after it
    assert al["a"].offset.value.data != al["b"].offset.value.data
    _check_no_overlap(module)


def test_weights_region_and_idempotence() -> None:
    text = HEADER + """
  func.func @main() {
    %w = tile.weight @w : memref<3x3xbf16, "dram">
    %v = tile.weight @v : memref<100xi8, "dram">
    %w2 = tile.weight @w : memref<3x3xbf16, "dram">
    %a = tile.alloc : memref<100xi8, "dram">
    func.return
  }
}
"""
    module = _run(text)
    ws = [op for op in module.walk() if isinstance(op, WeightOp)]
    assert [w.attributes["tile.offset"].value.data for w in ws] == [0, 64, 0]
    assert module.attributes["tile.weights_bytes"].value.data == 192
    assert module.attributes["tile.arena_bytes"].value.data == 128  # 100 bytes, 64-byte aligned
    again = _run(str(module))
    assert str(again) == str(module)


def test_alignment_option() -> None:
    module = _run(LOOPS, alignment=4096)
    for op in _allocs(module).values():
        assert op.offset.value.data % 4096 == 0
    with pytest.raises(IRError, match="power of two"):
        _run(LOOPS, alignment=48)


def test_double_buffers_and_capacity() -> None:
    def prog(rows: int) -> str:
        return HEADER + f"""
  func.func @main() {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c1 step %c1 {{
      %a = tile.alloc {{buffers = 2 : i64}} : memref<{rows}x64xf32, "acc">
      %b = tile.alloc : memref<{rows}x64xf32, "acc">
      tile.fill %a[%c0, %c0] {{rows = 1 : i64, cols = 64 : i64, value = 0.0 : f32}} : memref<{rows}x64xf32, "acc">
      tile.fill %b[%c0, %c0] {{rows = 1 : i64, cols = 64 : i64, value = 0.0 : f32}} : memref<{rows}x64xf32, "acc">
    }}
    func.return
  }}
}}
"""

    module = _run(prog(64))  # 2 x 16 KiB + 16 KiB <= 64 KiB
    al = _allocs(module)
    assert al["a"].offset.value.data == 0 and al["b"].offset.value.data == 2 * 64 * 64 * 4
    assert module.attributes["tile.acc_bytes"].value.data == 3 * 64 * 64 * 4
    with pytest.raises(IRError, match=r"test.mlir:\d+:\d+: error: 'tile.alloc' op does not fit: acc .* 65536 bytes"):
        _run(prog(96))  # 2 x 24 KiB + 24 KiB > 64 KiB
    module = _run(prog(96).replace('"edge"', '"server"'))
    assert module.attributes["tile.acc_bytes"].value.data == 3 * 96 * 64 * 4


def test_registered() -> None:
    assert infer_passes()["tile-plan-memory"]() is TilePlanMemoryPass
    spec = next(parse_pipeline("tile-plan-memory{target=edge alignment=128 print-plan=true}"))
    p = TilePlanMemoryPass.from_pass_spec(spec)
    assert (p.target, p.alignment, p.print_plan) == ("edge", 128, True)


def test_live_from_previous_keeps_bytes_apart_and_falls_back() -> None:
    """`tile.live_from_previous`: a kernel's buffer is live from the start of the kernel before
    (kernels: a top-level alloc after ops that emit code starts one), so it gets bytes apart from
    that kernel's buffers (a cross-kernel prefetch); where that does not fit the scratchpad it is
    planned as an ordinary buffer (sharing the bytes) instead of failing."""
    def prog(rows: int, attr: str = " {tile.live_from_previous}") -> str:
        return HEADER + f"""
  func.func @main(%x: memref<{rows}x64xf32, "dram">, %y: memref<{rows}x64xf32, "dram">) {{
    %c0 = arith.constant 0 : index
    %a = tile.alloc : memref<{rows}x64xf32, "spad">
    tile.dma %x[%c0, %c0], %a[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "dram">, memref<{rows}x64xf32, "spad">
    tile.dma %a[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "spad">, memref<{rows}x64xf32, "dram">
    %p = tile.alloc{attr} : memref<{rows}x64xf32, "spad">
    tile.dma %x[%c0, %c0], %p[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "dram">, memref<{rows}x64xf32, "spad">
    tile.dma %p[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "spad">, memref<{rows}x64xf32, "dram">
    func.return
  }}
}}
"""

    al = _allocs(_run(prog(256)))  # 2 x 64 KiB <= 256 KiB: apart
    assert {al["p"].offset.value.data, al["a"].offset.value.data} == {0, 256 * 64 * 4}
    module = _run(prog(768))  # 2 x 192 KiB > 256 KiB: the same bytes, one after the other
    al = _allocs(module)
    assert al["p"].offset.value.data == al["a"].offset.value.data == 0
    assert module.attributes["tile.spad_bytes"].value.data == 768 * 64 * 4
    plain = _allocs(_run(prog(256, "")))
    assert plain["p"].offset.value.data == plain["a"].offset.value.data


def test_live_into_next_keeps_a_stored_tile_apart_from_the_next_kernel() -> None:
    """`tile.live_into_next`: a tile a kernel stores last stays live to the end of the kernel
    after (whose first writes of its bytes would wait for the in-flight store), so that kernel's
    buffer gets other bytes; the kernel after that may reuse them; where that does not fit the
    scratchpad the tile is planned as an ordinary buffer."""
    def prog(rows: int, attr: str = " {tile.live_into_next}") -> str:
        def kernel(name: str, tag: str = "") -> str:
            return f"""
    %{name} = tile.alloc{tag} : memref<{rows}x64xf32, "spad">
    tile.dma %x[%c0, %c0], %{name}[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "dram">, memref<{rows}x64xf32, "spad">
    tile.dma %{name}[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "spad">, memref<{rows}x64xf32, "dram">"""
        return HEADER + f"""
  func.func @main(%x: memref<{rows}x64xf32, "dram">, %y: memref<{rows}x64xf32, "dram">) {{
    %c0 = arith.constant 0 : index{kernel("a", attr)}{kernel("b")}{kernel("c")}
    func.return
  }}
}}
"""

    al = _allocs(_run(prog(256)))  # 2 x 64 KiB <= 256 KiB: a apart from b, c may take a's bytes
    assert al["a"].offset.value.data != al["b"].offset.value.data
    assert al["c"].offset.value.data == al["a"].offset.value.data
    al = _allocs(_run(prog(768)))  # 2 x 192 KiB > 256 KiB: the same bytes
    assert al["a"].offset.value.data == al["b"].offset.value.data == al["c"].offset.value.data == 0
    plain = _allocs(_run(prog(256, "")))
    assert plain["a"].offset.value.data == plain["b"].offset.value.data


def test_latency_bound_target_keeps_neighbouring_kernels_apart() -> None:
    """On a latency-bound target (server) a local buffer is planned live from the start of its
    kernel to the end of the KEEP_APART_KERNELS-th kernel after it, so buffers of kernels at most
    that far apart get different bytes (no false dependency between overlapping kernels) while
    kernels further apart may share them; on edge, and where the kept-apart plan does not fit,
    buffers of consecutive kernels share bytes as before."""
    from infer.passes.tile_memory_plan import KEEP_APART_KERNELS

    names = "abcdef"

    def prog(rows: int, target: str) -> str:
        def kernel(name: str) -> str:
            return f"""
    %{name} = tile.alloc : memref<{rows}x64xf32, "spad">
    tile.dma %x[%c0, %c0], %{name}[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "dram">, memref<{rows}x64xf32, "spad">
    tile.dma %{name}[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "spad">, memref<{rows}x64xf32, "dram">"""
        return HEADER.replace('"edge"', f'"{target}"') + f"""
  func.func @main(%x: memref<{rows}x64xf32, "dram">, %y: memref<{rows}x64xf32, "dram">) {{
    %c0 = arith.constant 0 : index{"".join(kernel(n) for n in names)}
    func.return
  }}
}}
"""

    module = _run(prog(256, "server"))
    offsets = {n: a.offset.value.data for n, a in _allocs(module).items()}
    for i, n in enumerate(names):
        for j, m in enumerate(names[i + 1:], i + 1):
            if j - i <= KEEP_APART_KERNELS:
                assert offsets[n] != offsets[m], (n, m, offsets)
    assert offsets["a"] == offsets[names[KEEP_APART_KERNELS + 1]]  # the best fit: the lowest free bytes
    assert module.attributes["tile.spad_bytes"].value.data == (KEEP_APART_KERNELS + 1) * 256 * 64 * 4
    edge = {n: a.offset.value.data for n, a in _allocs(_run(prog(256, "edge"))).items()}
    assert set(edge.values()) == {0}
    # 16 MiB of scratchpad: two 12 MiB buffers do not fit side by side, so they share bytes
    big = {n: a.offset.value.data for n, a in _allocs(_run(prog(48 * 1024, "server"))).items()}
    assert set(big.values()) == {0}


def test_tiny_buffers_are_kept_apart_from_more_kernels() -> None:
    """A local buffer of at most TINY_BUFFER_BYTES is kept apart from TINY_APART_EXTRA more kernels
    on each side (on a latency-bound target): tiny kernels pass while a store of an earlier one is
    in flight, and a later buffer on its bytes would wait for that store to retire. Ten kernels
    that each load and store a 1 KiB tile: tiles up to KEEP_APART_KERNELS + TINY_APART_EXTRA
    kernels apart get different bytes, the first kernel after that reuses the first tile's."""
    from infer.passes.tile_memory_plan import KEEP_APART_KERNELS, TINY_APART_EXTRA, TINY_BUFFER_BYTES

    names = [f"k{i}" for i in range(10)]
    rows = 4
    assert rows * 64 * 4 <= TINY_BUFFER_BYTES

    def kernel(name: str) -> str:
        return f"""
    %{name} = tile.alloc : memref<{rows}x64xf32, "spad">
    tile.dma %x[%c0, %c0], %{name}[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "dram">, memref<{rows}x64xf32, "spad">
    tile.dma %{name}[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {rows}, 64>}} : memref<{rows}x64xf32, "spad">, memref<{rows}x64xf32, "dram">"""

    module = _run(HEADER.replace('"edge"', '"server"') + f"""
  func.func @main(%x: memref<{rows}x64xf32, "dram">, %y: memref<{rows}x64xf32, "dram">) {{
    %c0 = arith.constant 0 : index{"".join(kernel(n) for n in names)}
    func.return
  }}
}}
""")
    offsets = {n: a.offset.value.data for n, a in _allocs(module).items()}
    apart = KEEP_APART_KERNELS + TINY_APART_EXTRA
    for i in range(len(names)):
        for j in range(i + 1, min(len(names), i + apart + 1)):
            assert offsets[names[i]] != offsets[names[j]], (i, j, offsets)
    assert offsets[names[0]] == offsets[names[apart + 1]]
