"""What a MoE model adds to the Megatron engine's passes, as one collaborator of
`MegatronEngine` (engines/megatron_engine.py keeps the passes themselves): routers frozen on
request, the routing load per step (models/moe_routing.py), the per-sample balancing loss fed
each micro batch's token -> sample map (models/moe_balance.py), and routing replay's routes
loaded into and recorded from the routers (models/route_replay.py), timed.

Under sequence parallelism each TP rank routes its own slice of a micro batch's tokens, so
the token maps and routes are cut to that slice (`_token_slice`).
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional

import torch

from mindrl.config.model_spec import ModelSpec
from mindrl.config.roles import MoETraining
from mindrl.data import rows
from mindrl.models import moe_balance, moe_routing, route_replay


def sample_lengths(micro: dict) -> torch.Tensor:
    """Each sample's real tokens (prompt and response) in a micro batch."""
    return rows.sample_lengths(micro["prompt_mask"], micro["response_mask"]).cpu()


def packed(micro: dict) -> bool:
    return "packed_seq_params" in micro


class MoEPasses:
    """One per engine of a MoE model. `ps`: megatron's parallel_state; `sequence_parallel`:
    the role's setting."""

    def __init__(self, module, spec: ModelSpec, moe: Optional[MoETraining],
                 sequence_parallel: bool, ps):
        self.spec, self.moe, self.ps = spec, moe, ps
        self.sequence_parallel = sequence_parallel
        if moe is not None and moe.router_freeze:
            moe_routing.freeze_routers(module)
        self.router_load = moe_routing.RouterLoad(module)
        self.balance = (moe_balance.SequenceBalance(
            module, moe.aux_loss_coeff, spec.moe.router_topk,
            module.config.moe_router_score_function, self.sp_group())
            if moe is not None and moe.per_sample_balance else None)
        self.routes = route_replay.RouteReplay(module, [
            i for i in range(spec.num_layers) if spec.moe.is_moe_layer(i)])
        self.replay_s = 0.0      # seconds preparing replayed routes since the last take

    def sp_group(self):
        """The TP group when its ranks route different tokens (sequence parallelism)."""
        ps = self.ps
        if self.sequence_parallel and ps.get_tensor_model_parallel_world_size() > 1:
            return ps.get_tensor_model_parallel_group()
        return None

    def _token_slice(self):
        """(this rank's slice, slices) of a micro batch's tokens its routers see."""
        if self.sp_group() is None:
            return 0, 1
        return (self.ps.get_tensor_model_parallel_rank(),
                self.ps.get_tensor_model_parallel_world_size())

    # ------------------------------------------------------------------ routing replay

    def load_routes(self, micro_batches: List[dict], field: str) -> None:
        """Every router replays the routes of batch field `field`, micro batch by micro batch
        (checked against the model first: layers, top-k, expert ids)."""
        start = time.perf_counter()
        rank, size = self._token_slice()
        moe, per_micro = self.spec.moe, []
        for m in micro_batches:
            lengths = sample_lengths(m)
            route_replay.check_routes(m[field], lengths, self.routes.moe_layers,
                                      moe.router_topk, moe.num_experts, field)
            per_micro.append(route_replay.to_megatron(
                m[field], lengths, packed(m), m["tokens"].shape[1], rank, size))
        self.routes.load(per_micro)
        self.replay_s += time.perf_counter() - start

    def stop_replay(self) -> None:
        self.routes.stop()

    def take_replay_s(self) -> float:
        out, self.replay_s = self.replay_s, 0.0
        return out

    def recorded_routes(self, micro: dict) -> torch.Tensor:
        """The micro batch's routes as the routers picked them, per sample [mb, P + R, L, K]."""
        if self.ps.get_pipeline_model_parallel_world_size() > 1:
            raise ValueError("recording routes needs pipeline parallel size 1 (each stage holds "
                             "other layers); replaying works at any")
        width = micro["prompt_ids"].shape[1] + micro["response_ids"].shape[1]
        return route_replay.from_megatron(self.routes.take(self.sp_group()),
                                          sample_lengths(micro), packed(micro), width)

    def routes_shape(self, samples: int, width: int) -> tuple:
        return samples, width, self.routes.moe_layers, self.spec.moe.router_topk

    # ------------------------------------------------------------------ balancing loss

    def load_balance(self, micro_batches: List[dict], samples: int) -> None:
        """Each micro batch's token -> sample map for the per-sample balancing loss (when on),
        scaled as objective.micro_batch_loss scales the policy loss (x micro batches x DP)."""
        if self.balance is None:
            return
        rank, size = self._token_slice()
        per_micro = []
        for m in micro_batches:
            lengths = sample_lengths(m)
            per_micro.append((moe_balance.sample_of_token(
                lengths, packed(m), m["tokens"].shape[1], rank, size), lengths))
        self.balance.load(per_micro, samples,
                          len(micro_batches) * self.ps.get_data_parallel_world_size())

    # ------------------------------------------------------------------ metrics

    def metrics(self, num_micro: int, metric_groups: list) -> Dict[str, float]:
        """Routing load and (when on) the load-balancing loss of the mini batch's passes;
        collective over the role's ranks, as the engine's other metrics. `num_micro`: the
        mini batch's micro batches; `metric_groups`: the groups its metrics spread over."""
        ps, out = self.ps, {}
        sum_groups = []
        if ps.get_data_parallel_world_size() > 1:
            sum_groups.append(ps.get_data_parallel_group())
        if self.sp_group() is not None:
            sum_groups.append(self.sp_group())
        layer_groups = ([ps.get_pipeline_model_parallel_group()]
                        if ps.get_pipeline_model_parallel_world_size() > 1 else [])
        load = self.router_load.take(sum_groups, layer_groups)
        if load is not None:
            out["moe/tokens_per_expert_max_over_mean"] = load
        if self.balance is not None:
            aux = self.balance.take(sum_groups, layer_groups)
            if aux is not None:
                out["actor/moe_aux_loss"] = aux
        elif self.moe is not None and self.moe.aux_loss_coeff > 0:
            aux = moe_routing.take_aux_loss(num_micro, metric_groups)
            if aux is not None:
                out["actor/moe_aux_loss"] = aux
        return out
