"""Routing replay: a MoE model's routes recorded per sample and replayed in a forward/backward.

A route is the top-k expert ids one MoE layer picks for one token. The Batch holds routes per
sample as [B, T, L, K] int (docs/guides/routing-replay.md): token t of the sample's real
tokens in model-row order (its valid prompt tokens, then its response), L = the model's MoE
layers in order, K = top-k. Megatron routes the tokens of a micro batch sequence-major (its
hidden states are [s, b, h], flattened to [s * b] before the router; a packed micro batch is one
row of many samples; under sequence parallelism each TP rank routes its own slice of s), so
`to_megatron` / `from_megatron` convert between the two orders, and `RouteReplay` hooks the
routers: megatron-core's RouterReplay (transformer/moe/router_replay.py) replays the ids given,
and a forward hook records what each router picked (replayed or its own).

A token whose ids are all UNKNOWN (-1) keeps the router's own choice: a rollout engine never
routes a sample's last token (it is sampled, not fed back; no log-prob reads its output, as
attention is causal), and padding has no route. The router's own choice there, rather than any
fixed one, keeps every expert's batch of tokens what it was when the routes were recorded, so
replaying recorded routes reproduces the log-probs bit for bit (a GEMM's rounding can depend on
how many rows it gets).
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, List, Optional, Sequence

import torch


UNKNOWN = -1     # a token's ids when it has no route to replay (the router picks its own)


def token_slots(lengths: torch.Tensor, packed: bool):
    """Every real token of the micro batch's samples: (sample, token, flat index in Megatron's
    [s * b] order of the whole micro batch, before any sequence-parallel split)."""
    lengths = lengths.long().cpu()
    n = len(lengths)
    sample = torch.repeat_interleave(torch.arange(n), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    token = torch.arange(int(lengths.sum())) - starts[sample]
    if packed:                      # one row [1, S]: the samples back to back
        flat = starts[sample] + token
    else:                           # rows [b, S] from position 0: index s * b + row
        flat = token * n + sample
    return sample, token, flat


def to_megatron(routes: torch.Tensor, lengths: torch.Tensor, packed: bool, seq_length: int,
                sp_rank: int = 0, sp_size: int = 1) -> torch.Tensor:
    """Per-sample routes [n, T, L, K] of a micro batch -> this rank's routes in Megatron's
    order [s_local * b, L, K] (s_local = seq_length / sp_size); padding is UNKNOWN."""
    n, _, layers, top_k = routes.shape
    rows = 1 if packed else n
    full = routes.new_full((seq_length * rows, layers, top_k), UNKNOWN, dtype=torch.long)
    sample, token, flat = token_slots(lengths, packed)
    full[flat.to(routes.device)] = routes[sample, token].to(full.dtype)
    chunk = seq_length * rows // sp_size
    return full[sp_rank * chunk:(sp_rank + 1) * chunk]


def from_megatron(recorded: torch.Tensor, lengths: torch.Tensor, packed: bool,
                  width: int) -> torch.Tensor:
    """The whole micro batch's routes in Megatron's order [s * b, L, K] -> per sample
    [n, width, L, K] (zeros past each sample's real tokens)."""
    n = len(lengths)
    sample, token, flat = token_slots(lengths, packed)
    out = recorded.new_zeros((n, width, *recorded.shape[1:]))
    out[sample.to(out.device), token.to(out.device)] = recorded[flat.to(recorded.device)]
    return out


def check_routes(routes: torch.Tensor, lengths: torch.Tensor, moe_layers: int, top_k: int,
                 num_experts: int, field: str) -> None:
    """Refuse routes that do not fit the model: shape [B, T, L, K] with T covering every
    sample's tokens, L its MoE layers, K its top-k; ids in [0, num_experts) and distinct per
    token, or all UNKNOWN (the router's own choice)."""
    lengths = lengths.long().cpu()
    if routes.dim() != 4 or routes.shape[2:] != (moe_layers, top_k):
        raise ValueError(f"batch field {field!r} has shape {tuple(routes.shape)}; the model "
                         f"needs [samples, tokens, {moe_layers} MoE layers, top-k {top_k}]")
    if routes.shape[0] != len(lengths) or routes.shape[1] < int(lengths.max()):
        raise ValueError(f"batch field {field!r} has shape {tuple(routes.shape)}: it must hold "
                         f"{len(lengths)} samples of up to {int(lengths.max())} tokens")
    sample, token, _ = token_slots(lengths, False)
    ids = routes.cpu()[sample, token]                           # [N, L, K]
    given = ~(ids == UNKNOWN).all(dim=-1)                       # [N, L]
    bad = ((ids < 0) | (ids >= num_experts)).any(-1) & given
    if bad.any():
        i = int(sample[bad.any(1)][0])
        raise ValueError(f"batch field {field!r}: sample {i} has expert ids outside "
                         f"[0, {num_experts}): fix the engine's routes or the model")
    ordered = ids.sort(dim=-1).values
    dup = ((ordered[..., 1:] == ordered[..., :-1]).any(-1) & given).any(1)
    if dup.any():
        i = int(sample[dup][0])
        raise ValueError(f"batch field {field!r}: sample {i} routes a token to the same expert "
                         f"twice (top-k ids must be distinct)")


def route_agreement(a: torch.Tensor, b: torch.Tensor, lengths: torch.Tensor) -> float:
    """The fraction of (token, MoE layer) whose top-k expert sets agree between two routes
    [B, T, L, K], over the samples' real tokens that both give (not UNKNOWN)."""
    sample, token, _ = token_slots(lengths, False)
    x = a.cpu()[sample, token].sort(dim=-1).values
    y = b.cpu()[sample, token].sort(dim=-1).values
    both = (x != UNKNOWN).any(-1) & (y != UNKNOWN).any(-1)
    same = (x == y).all(dim=-1)[both]
    return float(same.double().mean()) if same.numel() else 1.0


def _replay():
    """megatron-core's RouterReplay (the router calls it for its top-k), replaying the tokens
    whose ids are given (`target_topk_idx`; a row of UNKNOWN keeps the router's own top-k, as
    does no target) and recording the ids used, in the order used (so replaying them is exact
    for any top-k); kept out of megatron's process-wide list (ours is per model)."""
    from megatron.core.transformer.moe.router_replay import RouterReplay

    class PartialReplay(RouterReplay):
        def get_replay_topk(self, scores, topk, num_groups=None, group_topk=None,
                            default_compute_topk=None):
            probs, ids = default_compute_topk(scores, topk, num_groups=num_groups,
                                              group_topk=group_topk)
            if self.target_topk_idx is not None:
                target = self.target_topk_idx.to(scores.device)
                ids = torch.where((target == UNKNOWN).all(-1, keepdim=True), ids, target)
                probs = scores.gather(1, ids)
            self.recorded_topk_idx = ids
            return probs, ids

    replay = PartialReplay()
    RouterReplay.global_router_replay_instances.remove(replay)
    return replay


class RouteReplay:
    """The model's routers (this pipeline stage's), each given a megatron-core RouterReplay,
    with one queue of routes per router (a micro batch per entry, in the order the schedule
    runs forwards) and a record of what each router picked per forward."""

    def __init__(self, module, moe_layer_numbers: Sequence[int]):
        """moe_layer_numbers: the global (0-based) decoder layers that hold experts, in order."""
        from megatron.core.transformer.moe.router import Router

        self.routers = [m for m in module.modules() if isinstance(m, Router)]
        index = {layer: i for i, layer in enumerate(moe_layer_numbers)}
        self.moe_layers = len(index)
        # Router.layer_number is Megatron's global 1-based layer number.
        self.layer_of = [index[r.layer_number - 1] if r.layer_number is not None else i
                         for i, r in enumerate(self.routers)]
        self.queues: List[Deque[torch.Tensor]] = [deque() for _ in self.routers]
        self.recorded: Dict[int, torch.Tensor] = {}
        self.replaying = False
        for i, router in enumerate(self.routers):
            router.router_replay = _replay()
            router.register_forward_pre_hook(self._before(i))
            router.register_forward_hook(self._after(i))

    def _before(self, i: int):
        def give(router, _inputs):
            router.router_replay.target_topk_idx = (self.queues[i].popleft() if self.replaying
                                                    else None)
        return give

    def _after(self, i: int):
        def record(router, _inputs, _outputs):
            self.recorded[i] = router.router_replay.recorded_topk_idx
        return record

    def load(self, per_micro: List[torch.Tensor]) -> None:
        """Replay these routes, one [s_local * b, L, K] per micro batch, in the next forwards."""
        for queue, layer in zip(self.queues, self.layer_of):
            queue.clear()
            queue.extend(r[:, layer].contiguous() for r in per_micro)
        self.replaying = True

    def stop(self) -> None:
        self.replaying = False
        for queue in self.queues:
            queue.clear()
        for router in self.routers:
            router.router_replay.clear_indices()

    def take(self, sp_group=None) -> Optional[torch.Tensor]:
        """The last forward's routes of this stage's routers [s * b, L, K] (the whole sequence:
        gathered over `sp_group`, the TP ranks under sequence parallelism); None without
        routers."""
        if not self.routers:
            return None
        parts = [self.recorded[i] for i in range(len(self.routers))]
        local = torch.stack(parts, dim=1)
        if sp_group is not None and torch.distributed.get_world_size(sp_group) > 1:
            pieces = [torch.empty_like(local)
                      for _ in range(torch.distributed.get_world_size(sp_group))]
            torch.distributed.all_gather(pieces, local.contiguous(), group=sp_group)
            local = torch.cat(pieces)
        return local
