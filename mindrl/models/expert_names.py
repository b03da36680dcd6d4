"""Where a Megatron expert parameter sits at expert parallelism EP: local and global numbers.

Megatron's SequentialMLP names its experts by their index on this rank
(`...mlp.experts.local_experts.{i}...`); expert-parallel rank r holds the global experts
r * n_local ... (r + 1) * n_local - 1 (n_local = experts / EP). The checkpoint and sync tables
(ckpt/mapping) name experts globally, so every reader of a rank's expert shards maps through
here. Pure functions of names and sizes.
"""

from __future__ import annotations

import re
from typing import Optional

_EXPERT = re.compile(r"(\.mlp\.experts\.local_experts\.)(\d+)(\.)")


def expert_number(name: str) -> Optional[int]:
    """The expert index in a parameter name; None for a parameter that is not an expert's."""
    m = _EXPERT.search(name)
    return int(m.group(2)) if m else None


def renumbered(name: str, number: int) -> str:
    """The name with its expert index replaced by `number`."""
    return _EXPERT.sub(lambda m: f"{m.group(1)}{number}{m.group(3)}", name, count=1)


def global_name(local: str, ep_rank: int, num_local: int) -> str:
    """A rank's expert parameter under the global number the tables use (others unchanged)."""
    i = expert_number(local)
    return local if i is None else renumbered(local, ep_rank * num_local + i)


def holder(global_number: int, num_experts: int, ep_size: int) -> tuple[int, int]:
    """(expert-parallel rank, local index) holding a global expert."""
    if num_experts % ep_size:
        raise ValueError(f"expert parallelism {ep_size} does not divide {num_experts} experts")
    n_local = num_experts // ep_size
    return global_number // n_local, global_number % n_local
