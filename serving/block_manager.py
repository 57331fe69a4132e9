"""Paged KV-cache block manager: fixed-size blocks, one block table per sequence.

    bm = BlockManager(num_blocks=1024, block_size=16, watermark=0.01)
    if bm.can_allocate(120): bm.allocate(seq_id, 120)    # 8 blocks, 8 slots of the last one unused
    if bm.can_append(seq_id): bm.append_slots(seq_id)    # one more token; a new block every 16
    bm.block_table(seq_id)                               # physical block ids, in token order
    bm.free(seq_id)

The KV cache is a pool of `num_blocks` physical blocks of `block_size` token slots each
(PagedAttention, vLLM). Token i of a sequence lives in slot i % block_size of block
block_table[i // block_size], so a sequence's blocks need not be contiguous and memory is
only wasted in each sequence's last, partly filled block.

A sequence's *length* is the number of token slots it holds (tokens whose keys/values are
computed or being computed). `allocate(..., reserve_tokens=n)` also reserves blocks for n
future tokens up front: what static batching does (prompt + maximum output), which is the
waste paged allocation avoids; reserved slots count as waste until tokens fill them.

The watermark (a fraction of the pool) is kept free at admission: a new sequence is only
admitted when the pool keeps `watermark_blocks` free after allocating it, so the running
sequences have room to grow before someone must be preempted. Growth (`append_slots`) may
use the watermark blocks.

Accounting is kept incrementally so every query is O(1): `num_free_blocks`,
`num_used_blocks`, `utilization` (used / total blocks), `waste_slots` (allocated slots
holding no token), `waste_fraction` (waste slots / allocated slots).
"""

from __future__ import annotations

from collections.abc import Hashable


class BlockManagerError(RuntimeError):
    """A block-manager call that the caller should have checked first (a bug, not bad input)."""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int = 16, watermark: float = 0.01):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {watermark}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.watermark = watermark
        self.watermark_blocks = int(watermark * num_blocks)
        # A stack of free block ids: the most recently freed block is reused first.
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._tables: dict[Hashable, list[int]] = {}
        self._lengths: dict[Hashable, int] = {}
        self._total_length = 0

    # -- queries ------------------------------------------------------------------

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def utilization(self) -> float:
        return self.num_used_blocks / self.num_blocks

    @property
    def waste_slots(self) -> int:
        return self.num_used_blocks * self.block_size - self._total_length

    @property
    def waste_fraction(self) -> float:
        used = self.num_used_blocks
        return self.waste_slots / (used * self.block_size) if used else 0.0

    @property
    def admissible_blocks(self) -> int:
        """The most blocks one sequence can ever be admitted with (the pool less the watermark)."""
        return self.num_blocks - self.watermark_blocks

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._tables

    def block_table(self, seq_id: Hashable) -> list[int]:
        """The sequence's physical blocks in token order (the live list: do not modify)."""
        return self._tables[seq_id]

    def length(self, seq_id: Hashable) -> int:
        return self._lengths[seq_id]

    def sequences(self) -> list[Hashable]:
        return list(self._tables)

    # -- allocation -----------------------------------------------------------------

    def can_allocate(self, num_tokens: int, reserve_tokens: int = 0) -> bool:
        """Room for a new sequence of num_tokens (+ reserve) with the watermark kept free."""
        return len(self._free) - self.blocks_for(num_tokens + reserve_tokens) >= self.watermark_blocks

    def allocate(self, seq_id: Hashable, num_tokens: int, reserve_tokens: int = 0) -> list[int]:
        if seq_id in self._tables:
            raise BlockManagerError(f"sequence {seq_id!r} already holds blocks")
        need = self.blocks_for(num_tokens + reserve_tokens)
        if need > len(self._free):
            raise BlockManagerError(f"sequence {seq_id!r} needs {need} blocks, {len(self._free)} are free")
        table = [self._free.pop() for _ in range(need)]
        self._tables[seq_id] = table
        self._lengths[seq_id] = num_tokens
        self._total_length += num_tokens
        return table

    def can_append(self, seq_id: Hashable, num_tokens: int = 1) -> bool:
        new_length = self._lengths[seq_id] + num_tokens
        missing = self.blocks_for(new_length) - len(self._tables[seq_id])
        return missing <= len(self._free)

    def append_slots(self, seq_id: Hashable, num_tokens: int = 1) -> None:
        """Grow the sequence by num_tokens slots, taking new blocks as its last one fills."""
        table = self._tables[seq_id]
        new_length = self._lengths[seq_id] + num_tokens
        missing = self.blocks_for(new_length) - len(table)
        if missing > len(self._free):
            raise BlockManagerError(f"sequence {seq_id!r} needs {missing} more blocks, {len(self._free)} are free")
        for _ in range(missing):
            table.append(self._free.pop())
        self._lengths[seq_id] = new_length
        self._total_length += num_tokens

    def try_append_slot(self, seq_id: Hashable) -> list[int] | None:
        """append_slots(seq_id, 1) and return the block table if a block is there when needed;
        None (and no change) otherwise. The scheduler's per-decode fast path."""
        table = self._tables[seq_id]
        length = self._lengths[seq_id]
        if length == len(table) * self.block_size:
            if not self._free:
                return None
            table.append(self._free.pop())
        self._lengths[seq_id] = length + 1
        self._total_length += 1
        return table

    def free(self, seq_id: Hashable) -> None:
        table = self._tables.pop(seq_id)
        self._total_length -= self._lengths.pop(seq_id)
        self._free.extend(reversed(table))

    def check_invariants(self) -> None:
        """Every block is either free or in exactly one table; lengths fit the tables (for tests)."""
        owned = [b for t in self._tables.values() for b in t]
        every = owned + self._free
        if sorted(every) != list(range(self.num_blocks)):
            raise BlockManagerError("a block is lost or held twice")
        for seq_id, table in self._tables.items():
            if self.blocks_for(self._lengths[seq_id]) > len(table):
                raise BlockManagerError(f"sequence {seq_id!r} holds more tokens than its blocks")
        if self._total_length != sum(self._lengths.values()):
            raise BlockManagerError("total length out of step")
