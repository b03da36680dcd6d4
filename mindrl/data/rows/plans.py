"""Which samples go to which DP rank, micro batch and mini batch.

Two plans over one batch (every rank holds the whole Batch and computes the same plan, with no
communication):
- by rows (`micro_batch_size`): DP rank r takes the r-th contiguous slice, cut in order into
  micro batches of that many samples (the layout before packing; kept for padded rows);
- by tokens (`max_tokens`): samples spread over the DP ranks in equal numbers with balanced
  token totals, then each rank's samples into the same number k of micro batches of at most
  `max_tokens` real tokens: longest first into the lightest micro batch at the fewest k the
  tokens allow, else at the k best-fit decreasing needs on the fullest rank. Heaps and
  bisection keep it O(n log k): a step of thousands of samples plans in milliseconds. verl's
  `rearrange_micro_batches` has this shape.
A sample's length is its real tokens (packed.sample_lengths). The loss stays exact under any
plan (the engine weighs each micro batch by its share of the mini batch's tokens or
sequences), so a plan only changes speed. `plan` chooses between the two; `mini_batches` is
the update's split before either.
"""

from __future__ import annotations

import bisect
import heapq
from typing import List, Optional, Sequence

import torch

from mindrl.data.batch import Batch
from mindrl.data.rows.packed import sample_lengths

Plan = List[List[List[int]]]   # [DP rank][micro batch] -> sample indices, ascending


def _lightest_first(lengths: Sequence[int], members: Sequence[int], bins: int,
                    capacity: Optional[int] = None) -> List[List[int]]:
    """`members` into `bins` groups, longest first into the lightest group that still has
    room (`capacity` samples); every group ascending. O(n log bins)."""
    groups: List[List[int]] = [[] for _ in range(bins)]
    heap = [(0, b) for b in range(bins)]          # (tokens, group): the lightest on top
    for i in sorted(members, key=lambda i: (-lengths[i], i)):
        load, b = heapq.heappop(heap)
        groups[b].append(i)
        if capacity is None or len(groups[b]) < capacity:
            heapq.heappush(heap, (load + lengths[i], b))
    return [sorted(g) for g in groups]


def _best_fit(lengths: Sequence[int], members: Sequence[int], budget: int) -> List[List[int]]:
    """Best-fit decreasing: each sample, longest first, into the fullest group it fits; few
    groups, every one within `budget`. O(n log groups)."""
    groups: List[List[int]] = []
    room: List[tuple] = []                        # sorted (tokens left, group)
    for i in sorted(members, key=lambda i: (-lengths[i], i)):
        j = bisect.bisect_left(room, (lengths[i], -1))
        if j < len(room):
            left, b = room.pop(j)
        else:
            left, b = budget, len(groups)
            groups.append([])
        groups[b].append(i)
        bisect.insort(room, (left - lengths[i], b))
    return groups


def _split_to(groups: List[List[int]], count: int) -> List[List[int]]:
    """`count` groups from fewer: the largest group gives up a sample to a new one until
    there are enough (each stays within its budget: it only loses samples)."""
    groups = [list(g) for g in groups]
    while len(groups) < count:
        largest = max(groups, key=len)
        groups.append([largest.pop()])
    return [sorted(g) for g in groups]


def plan_by_rows(n: int, dp_size: int, micro_batch_size: int) -> Plan:
    """Contiguous DP slices cut in order into micro batches of `micro_batch_size` samples."""
    if n % dp_size:
        raise ValueError(f"batch of {n} samples does not split over DP={dp_size}")
    per = n // dp_size
    if per % micro_batch_size:
        raise ValueError(f"{per} samples per DP rank do not split into micro batches of "
                         f"{micro_batch_size}")
    return [[list(range(start, start + micro_batch_size))
             for start in range(r * per, (r + 1) * per, micro_batch_size)]
            for r in range(dp_size)]


def plan_by_tokens(lengths: Sequence[int], dp_size: int, max_tokens: int,
                   budget_key: str = "max_tokens_per_micro_batch") -> Plan:
    """Equal sample counts per DP rank with balanced tokens; on every rank the same number of
    micro batches, each within `max_tokens` real tokens."""
    lengths = [int(x) for x in lengths]
    n = len(lengths)
    if n % dp_size:
        raise ValueError(f"batch of {n} samples does not split over DP={dp_size}")
    longest = max(lengths, default=0)
    if longest > max_tokens:
        raise ValueError(f"{budget_key}={max_tokens} is smaller than the longest sample "
                         f"({longest} tokens: prompt + response); raise it to at least "
                         f"{longest}")
    per = n // dp_size
    ranks = _lightest_first(lengths, range(n), dp_size, capacity=per)
    if not n:
        return [[] for _ in ranks]

    def fits(plan):
        return all(sum(lengths[i] for i in micro) <= max_tokens for r in plan for micro in r)

    # Balanced (lightest first) where the fewest micro batches the tokens allow suffice; else
    # as many as best-fit needs on the fullest rank, balanced again or best-fit's own split.
    k = max(-(-sum(lengths[i] for i in r) // max_tokens) for r in ranks)
    plan = [_lightest_first(lengths, r, k) for r in ranks]
    if fits(plan):
        return plan
    k = max(len(_best_fit(lengths, r, max_tokens)) for r in ranks)
    plan = []
    for r in ranks:
        balanced = _lightest_first(lengths, r, k)
        plan.append(balanced if fits([balanced])
                    else _split_to(_best_fit(lengths, r, max_tokens), k))
    return plan


def plan(batch: Batch, dp_size: int, micro_batch_size: int,
         max_tokens: Optional[int] = None) -> Plan:
    """The plan of `batch`, the same on every rank: by tokens within a budget of `max_tokens`,
    else by rows of `micro_batch_size` samples."""
    if max_tokens is None:
        return plan_by_rows(len(batch), dp_size, micro_batch_size)
    lengths = sample_lengths(batch["prompt_mask"], batch["response_mask"])
    return plan_by_tokens(lengths.tolist(), dp_size, max_tokens)


def mini_batches(n: int, mini_batch_size: int, shuffle: bool = False,
                 seed: int = 0) -> List[List[int]]:
    """The update's mini batches (sample indices, in the order they train): the same split
    for the update and for an old-log-prob pass that plans like it."""
    if n % mini_batch_size:
        raise ValueError(f"batch of {n} samples does not split into mini batches of "
                         f"{mini_batch_size}")
    order = torch.arange(n)
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return [order[s:s + mini_batch_size].tolist() for s in range(0, n, mini_batch_size)]
