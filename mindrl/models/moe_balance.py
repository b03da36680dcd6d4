"""The load-balancing loss per sequence, exact under any partition of the batch.

Megatron's `aux_loss` is one switch-balancing loss per micro batch: its expert fractions are
counted over whatever tokens a micro batch holds, so splitting the same batch into other micro
batches, token budgets or data-parallel ranks changes the loss and its gradients. Megatron's
`seq_aux_loss` counts per row, and a packed row holds many samples. This one counts per sample
(`moe_router_load_balancing_type: seq_aux_loss` in MindRL, docs/config-reference.md):

    aux_s = E / (k * T_s^2) * sum_e c_{s,e} * sum_{t in s} p_{t,e}
    loss  = coeff * sum over MoE layers of mean over the mini batch's samples of aux_s

c_{s,e}: tokens of sample s routed to expert e (no gradient), p_{t,e}: the router's full
softmax (or sigmoid) scores, T_s: the sample's real tokens, k: top-k. 1 for a perfectly
balanced sample, E when all its tokens go to the same k experts. A sample lives in one micro
batch of one DP rank, so the sum over samples is the same for every partition; padding is
left out. Under sequence parallelism a sample's tokens spread over the TP ranks: the counts are
summed over TP and each rank adds its own tokens' scores, so the parts add up.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional

import torch

from mindrl import device
from mindrl.models import route_replay
from mindrl.models.moe_routing import routers


def sequence_balance_loss(scores: torch.Tensor, routing_map: torch.Tensor,
                          sample_of_token: torch.Tensor, lengths: torch.Tensor, topk: int,
                          count_group=None) -> torch.Tensor:
    """sum_s aux_s over the samples whose tokens are here (this rank's part of it).

    scores [N, E]: every expert's score per token (with their graph); routing_map [N, E]: the
    experts each token went to; sample_of_token [N]: its sample, -1 for padding; lengths [n]:
    each sample's real tokens (on all ranks together); count_group: ranks holding the other
    tokens of the same samples (TP under sequence parallelism), whose counts are summed in."""
    n, experts = len(lengths), scores.shape[1]
    real = sample_of_token >= 0
    sample = sample_of_token[real]
    counts = torch.zeros(n, experts, dtype=torch.float32, device=scores.device)
    counts.index_add_(0, sample, routing_map[real].to(torch.float32))
    if count_group is not None and torch.distributed.get_world_size(count_group) > 1:
        torch.distributed.all_reduce(counts, group=count_group)
    score_sums = torch.zeros(n, experts, dtype=scores.dtype, device=scores.device)
    score_sums = score_sums.index_add(0, sample, scores[real])
    tokens = lengths.to(device=scores.device, dtype=torch.float32)
    per_sample = (counts * score_sums).sum(dim=1) * experts / (topk * tokens.clamp(min=1) ** 2)
    return per_sample.sum()


def sample_of_token(lengths: torch.Tensor, packed: bool, seq_length: int, sp_rank: int = 0,
                    sp_size: int = 1) -> torch.Tensor:
    """This rank's tokens in Megatron's order [s_local * b] -> their sample (-1: padding)."""
    rows = 1 if packed else len(lengths)
    full = torch.full((seq_length * rows,), -1, dtype=torch.long)
    sample, _, flat = route_replay.token_slots(lengths, packed)
    full[flat] = sample
    chunk = seq_length * rows // sp_size
    return full[sp_rank * chunk:(sp_rank + 1) * chunk]


class SequenceBalance:
    """Adds the per-sample balancing loss to a model's training forwards (a forward hook per
    router of this stage) and keeps its value for the metrics.

    `load` gives, per micro batch in the order the schedule runs them, the token -> sample map
    and the sample lengths, and the factor that turns the partial sums into this rank's share
    of the mini batch's loss under the schedule's and DDP's scaling. The term is attached to
    the router's output with megatron's MoEAuxLossAutoScaler (backward gives it the main
    loss's scale), so it trains on every pipeline stage."""

    def __init__(self, module, coeff: float, topk: int, score_function: str, count_group=None):
        self.routers = routers(module)
        self.coeff, self.topk, self.score_function = coeff, topk, score_function
        self.count_group = count_group
        self.queues: List[Deque[tuple]] = [deque() for _ in self.routers]
        self.scale = 0.0
        # Per router, the detached loss since the last take (a tensor: no host sync per pass).
        self.per_sample_mean = [0.0 for _ in self.routers]
        for i, router in enumerate(self.routers):
            router.register_forward_hook(self._hook(i))

    def load(self, per_micro: List[tuple], num_samples: int, loss_scale: float) -> None:
        """per_micro: (sample_of_token, lengths) per micro batch; num_samples: the mini batch's
        samples over all DP ranks; loss_scale: what the schedule and DDP divide a loss by
        (micro batches x DP ranks), so each term enters the gradient once."""
        self.num_samples = num_samples
        self.scale = self.coeff * loss_scale / num_samples
        for queue in self.queues:
            queue.clear()
            queue.extend(per_micro)

    def _hook(self, i: int):
        def attach(router, inputs, outputs):
            if not (router.training and torch.is_grad_enabled()):
                return None
            if not self.queues[i]:
                raise RuntimeError("a training forward of a MoE layer without its micro batch's "
                                   "samples: call SequenceBalance.load before the schedule")
            from megatron.core.transformer.moe.moe_utils import (
                MoEAuxLossAutoScaler, compute_routing_scores_for_aux_loss)

            tokens, lengths = self.queues[i].popleft()
            probs, routing_map = outputs
            logits = router.gating(inputs[0]).reshape(-1, routing_map.shape[1])
            _, scores = compute_routing_scores_for_aux_loss(logits, self.topk,
                                                            self.score_function)
            part = sequence_balance_loss(scores, routing_map,
                                         tokens.to(routing_map.device), lengths, self.topk,
                                         self.count_group)
            self.per_sample_mean[i] = self.per_sample_mean[i] + part.detach() / self.num_samples
            return MoEAuxLossAutoScaler.apply(probs, part * self.scale), routing_map
        return attach

    def take(self, sum_groups=(), layer_groups=()) -> Optional[float]:
        """The loss before its coefficient since the last take: the mean over MoE layers of
        each layer's mean over samples (None without a training pass). Collective like
        moe_routing.RouterLoad.take: sum_groups hold other tokens of the same layers (DP, TP
        under SP), layer_groups other layers (PP)."""
        dev = device.current_device()
        per_layer = torch.zeros(len(self.per_sample_mean), dtype=torch.float64, device=dev)
        for i, value in enumerate(self.per_sample_mean):
            per_layer[i] = torch.as_tensor(value, dtype=torch.float64, device=dev)
        for group in sum_groups:
            torch.distributed.all_reduce(per_layer, group=group)
        used = per_layer != 0
        totals = torch.stack([per_layer[used].sum(), used.sum().to(torch.float64)])
        self.per_sample_mean = [0.0 for _ in self.routers]
        for group in layer_groups:
            torch.distributed.all_reduce(totals, group=group)
        return float(totals[0] / totals[1]) if totals[1] > 0 else None
