"""The paged KV cache of one serving replica: fixed-size blocks of token positions (vLLM's PagedAttention).

A request holds ceil(tokens / block_tokens) blocks; the pool has ``capacity_blocks`` of them. Allocation
either succeeds whole or changes nothing (the scheduler then preempts), so the pool never overcommits.
"""
from __future__ import annotations

from dataclasses import dataclass

BLOCK_TOKENS = 16  #: vLLM's default block size (positions per block)


def blocks_for(tokens: int, block_tokens: int = BLOCK_TOKENS) -> int:
    """Blocks that ``tokens`` positions occupy."""
    return -(-tokens // block_tokens)


@dataclass
class BlockPool:
    """``capacity_blocks`` KV blocks; ``used`` of them held by requests."""

    capacity_blocks: int
    block_tokens: int = BLOCK_TOKENS
    used: int = 0

    @property
    def free(self) -> int:
        return self.capacity_blocks - self.used

    def grow(self, held: int, tokens: int) -> int | None:
        """The blocks a request holding ``held`` needs for ``tokens`` positions, taken from the pool; None (nothing
        taken) when they are not free."""
        need = blocks_for(tokens, self.block_tokens) - held
        if need > self.free:
            return None
        self.used += max(need, 0)
        return held + max(need, 0)

    def release(self, held: int) -> None:
        """Give back ``held`` blocks."""
        self.used -= held

    @property
    def occupancy(self) -> float:
        """Fraction of the blocks in use."""
        return self.used / self.capacity_blocks if self.capacity_blocks else 0.0
