"""Paged KV block manager: invariants under random allocate/append/free sequences, watermark, accounting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infer.serving.block_manager import BlockManager, BlockManagerError


def test_allocate_append_free_accounting():
    bm = BlockManager(num_blocks=10, block_size=4, watermark=0.0)
    assert bm.can_allocate(9)
    table = bm.allocate("a", 9)                       # 3 blocks, 3 slots of the last unused
    assert len(table) == 3 and bm.num_used_blocks == 3 and bm.waste_slots == 3
    assert bm.waste_fraction == pytest.approx(3 / 12)
    for _ in range(3):
        bm.append_slots("a")                          # fills the last block: no new one
    assert len(bm.block_table("a")) == 3 and bm.waste_slots == 0
    bm.append_slots("a")                              # token 13 needs block 4
    assert len(bm.block_table("a")) == 4 and bm.waste_slots == 3
    bm.allocate("b", 1, reserve_tokens=7)             # static-style reservation: 2 blocks, 7 slots waste
    assert bm.num_used_blocks == 6 and bm.waste_slots == 3 + 7
    assert bm.utilization == pytest.approx(0.6)
    bm.free("a")
    bm.free("b")
    assert bm.num_free_blocks == 10 and bm.waste_slots == 0
    bm.check_invariants()


def test_watermark_applies_to_admission_not_growth():
    bm = BlockManager(num_blocks=10, block_size=4, watermark=0.2)   # 2 blocks kept free at admission
    assert bm.watermark_blocks == 2 and bm.admissible_blocks == 8
    assert bm.can_allocate(32) and not bm.can_allocate(33)
    bm.allocate("a", 32)
    assert not bm.can_allocate(1)                     # only the watermark is left
    assert bm.can_append("a", 8)                      # growth may use it
    bm.append_slots("a", 8)
    assert bm.num_free_blocks == 0 and not bm.can_append("a")
    with pytest.raises(BlockManagerError):
        bm.append_slots("a")
    with pytest.raises(BlockManagerError):
        bm.allocate("a", 1)                           # already holds blocks


ops = st.lists(st.tuples(st.sampled_from(["alloc", "append", "free"]), st.integers(0, 5), st.integers(1, 40)),
               max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=ops, block_size=st.sampled_from([1, 4, 16]), watermark=st.sampled_from([0.0, 0.1]))
def test_invariants_under_random_operations(ops, block_size, watermark):
    bm = BlockManager(num_blocks=24, block_size=block_size, watermark=watermark)
    lengths: dict[int, int] = {}
    for op, seq, n in ops:
        if op == "alloc" and seq not in lengths:
            if bm.can_allocate(n):
                bm.allocate(seq, n)
                lengths[seq] = n
                assert bm.num_free_blocks >= bm.watermark_blocks
        elif op == "append" and seq in lengths:
            k = n % 5 + 1
            if bm.can_append(seq, k):
                bm.append_slots(seq, k)
                lengths[seq] += k
        elif op == "free" and seq in lengths:
            bm.free(seq)
            del lengths[seq]
        bm.check_invariants()
        # each sequence holds exactly the blocks its tokens need: waste only in its last block
        for s, length in lengths.items():
            assert len(bm.block_table(s)) == bm.blocks_for(length)
        assert bm.waste_slots == sum(bm.blocks_for(v) * block_size - v for v in lengths.values())
        assert bm.waste_slots < max(1, len(lengths)) * block_size
        assert bm.num_used_blocks + bm.num_free_blocks == 24
    for s in list(lengths):
        bm.free(s)
    assert bm.num_free_blocks == 24
