"""A MoE model's routers during RL: frozen on request, and what they did, per step.

The metrics (docs/config-reference.md names the keys that turn them on):
- `moe/tokens_per_expert_max_over_mean`: per MoE layer, the busiest expert's tokens over the
  mean expert's (1 = perfectly balanced, num_experts = every token on one expert), averaged
  over layers; counted over the update's forward passes, summed over the ranks that route
  different tokens (data and sequence parallel), so it is the whole batch's load. Padding
  positions are routed too (a packed row's tail to a multiple of TP under sequence
  parallelism, PP's common micro-batch length) and counted.
- `actor/moe_aux_loss`: the load-balancing loss before its coefficient, averaged over MoE
  layers, when the recipe turns it on (moe_aux_loss_coeff > 0): MindRL's per-sample loss
  (models/moe_balance.py, the same under any partition) or, with aux_loss, Megatron's, one per
  micro batch (`take_aux_loss`: its value and gradient depend on the partition).
"""

from __future__ import annotations

from typing import Dict, List, Optional

import torch

from mindrl import device


def routers(module) -> List[torch.nn.Module]:
    """The model's routers, in layer order (empty for a dense model)."""
    from megatron.core.transformer.moe.router import Router

    return [m for m in module.modules() if isinstance(m, Router)]


def freeze_routers(module) -> int:
    """The routers' weights get no gradients, so DDP and the optimizer leave them out (the
    experts still train). Returns how many tensors were frozen."""
    frozen = 0
    for router in routers(module):
        for p in router.parameters():
            p.requires_grad_(False)
            frozen += 1
    return frozen


class RouterLoad:
    """Tokens each expert received, per MoE layer of this stage, over the training passes since
    the last `take` (a forward hook on each router: its routing map [tokens, experts])."""

    def __init__(self, module):
        self.routers = routers(module)
        self.counts: Dict[int, torch.Tensor] = {}
        for i, router in enumerate(self.routers):
            router.register_forward_hook(self._hook(i))

    def _hook(self, i: int):
        def count(router, _inputs, outputs):
            if router.training and torch.is_grad_enabled():
                routed = outputs[1].sum(dim=0).to(torch.float64).detach()
                self.counts[i] = self.counts.get(i, 0) + routed
        return count

    def take(self, sum_groups=(), layer_groups=()) -> Optional[float]:
        """The mean over MoE layers of max/mean tokens per expert, or None if nothing routed.
        Collective over the groups (every rank calls it, a stage without routers too):
        sum_groups: ranks that routed other tokens of the same layers (DP, TP with SP);
        layer_groups: ranks that hold other layers (PP)."""
        totals = torch.zeros(2, dtype=torch.float64, device=device.current_device())
        if self.routers:
            counts = torch.stack([self.counts.get(i, torch.zeros(r.weight.shape[0],
                                                                 dtype=torch.float64,
                                                                 device=r.weight.device))
                                  for i, r in enumerate(self.routers)])
            for group in sum_groups:
                torch.distributed.all_reduce(counts, group=group)
            mean = counts.mean(dim=1)
            used = mean > 0
            totals = torch.stack([(counts.max(dim=1).values[used] / mean[used]).sum(),
                                  used.sum().to(torch.float64)])
        self.counts = {}
        for group in layer_groups:
            torch.distributed.all_reduce(totals, group=group)
        return float(totals[0] / totals[1]) if totals[1] > 0 else None


def take_aux_loss(num_micro_batches: int, groups=()) -> Optional[float]:
    """Megatron's tracked load-balancing loss(es) of the passes since the last call, the mean
    over MoE layers and micro batches (None when none was computed), and the tracker cleared.
    Collective over `groups`: ranks holding other layers (PP) or other samples (DP)."""
    from megatron.core.transformer.moe.moe_utils import (clear_aux_losses_tracker,
                                                         get_moe_layer_wise_logging_tracker)

    tracker = get_moe_layer_wise_logging_tracker()
    tracked = []
    for name, entry in tracker.items():
        if not name.endswith("load_balancing_loss"):
            continue
        values = entry["values"].clone()
        if entry.get("reduce_group") is not None and not entry.get("reduce_group_has_dp"):
            # Under sequence parallelism each TP rank holds its tokens' part of the loss.
            torch.distributed.all_reduce(values, group=entry["reduce_group"])
        tracked.append(values)
    totals = torch.zeros(2, dtype=torch.float64, device=device.current_device())
    if tracked:
        values = torch.stack(tracked).sum(dim=0)   # [layers]: each layer's, over micro batches
        layers = (values != 0).sum()
        totals = torch.stack([values.sum(), layers * num_micro_batches]).double()
        totals = totals.to(device.current_device())
    clear_aux_losses_tracker()
    for group in groups:
        torch.distributed.all_reduce(totals, group=group)
    return float(totals[0] / totals[1]) if totals[1] > 0 else None
