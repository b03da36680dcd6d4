"""Prompt batches for the GRPO loop: seeded shuffling per epoch, resumable position.

The loader's whole state is (seed, consumed): a resumed run asks for the same state and gets
exactly the batches an uninterrupted run would have seen next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import torch


@dataclass
class LoaderState:
    seed: int
    consumed: int = 0   # prompts handed out so far over all epochs


class PromptLoader:
    """Batches of `batch_size` items of `items`, reshuffled every epoch with (seed, epoch)."""

    def __init__(self, items: Sequence, batch_size: int, seed: int = 0, shuffle: bool = True):
        if batch_size <= 0 or batch_size > len(items):
            raise ValueError(f"batch_size={batch_size} must be in 1..{len(items)} "
                             f"(the dataset holds {len(items)} prompts)")
        self.items, self.batch_size, self.shuffle = list(items), batch_size, shuffle
        self.state = LoaderState(seed=seed)

    def _order(self, epoch: int) -> List[int]:
        if not self.shuffle:
            return list(range(len(self.items)))
        g = torch.Generator().manual_seed(self.state.seed * 100003 + epoch)
        return torch.randperm(len(self.items), generator=g).tolist()

    @property
    def batches_per_epoch(self) -> int:
        return len(self.items) // self.batch_size   # the ragged tail is dropped each epoch

    def next_batch(self) -> list:
        per_epoch = self.batches_per_epoch * self.batch_size
        epoch, offset = divmod(self.state.consumed, per_epoch)
        order = self._order(epoch)
        batch = [self.items[i] for i in order[offset:offset + self.batch_size]]
        self.state.consumed += self.batch_size
        return batch

    def state_dict(self) -> dict:
        return {"seed": self.state.seed, "consumed": self.state.consumed}

    def load_state_dict(self, state: dict) -> None:
        self.state = LoaderState(seed=int(state["seed"]), consumed=int(state["consumed"]))
