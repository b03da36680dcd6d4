"""The Megatron side of a weight sync: this actor rank's shards and how full tensors are made.

Every rank of the actor builds one `MegatronShards` (TP x PP x DP processes). The host is
TP0 / PP0 of data-parallel replica 0 (global rank 0 in Megatron's default order); the peers
are the other ranks of that replica's model-parallel group. Other replicas hold the same
weights and take no part (`active` is False).

Expert parallelism (EP > 1) lays its ranks inside each stage's TP x DP ones, so replica 0
holds only some EP ranks' blocks of each layer's experts. Each expert is split over the
expert-TP ranks (expert TP, by default the TP; it divides the TP, so with Megatron's TP-fastest
order expert-TP rank r of the replica's expert shards is its TP rank r < expert TP). Before
each sync every EP group of expert-data-parallel rank 0 sends its experts to that group's EP
rank 0 (`gather_experts`, point to point: each expert shard travels once, from the EP rank that
holds it), and those receivers, the replica's TP ranks below expert TP, then hold all of their
expert-TP shard's experts under the tables' global numbers; the transports read `params` as at
EP 1, taking an expert's shards from those ranks (`shard_place`): whole from TP rank 0 at
expert TP 1, so vLLM's fused w13/w2 of a layer arrive whole, each expert once.
`release_experts` drops the copies after the sync. The cost: every receiving rank holds all
experts of its expert-TP shard during a sync (EP-fold its own); sending each expert from its
holder straight to the host would avoid that copy.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch

from mindrl import device
from mindrl.ckpt import mapping
from mindrl.config.model_spec import ModelSpec
from mindrl.models import lora
from mindrl.models.expert_names import expert_number, global_name
from mindrl.weight_sync.plan import WIRE_DTYPES, Unit, plan_units

_MAX_DIMS = 8     # a header's shape slots: the vision tower's patch embedding is 5-D
Alloc = Callable[[tuple, torch.dtype], torch.Tensor]   # where a full tensor is built


def sync_place() -> Tuple[bool, bool]:
    """(active, is_host) of this rank in a sync: whether it belongs to data-parallel replica 0
    (the one that sends), and whether it is that replica's TP0 / PP0 rank (the host)."""
    from megatron.core import parallel_state as ps

    active = ps.get_data_parallel_rank() == 0 and ps.get_context_parallel_rank() == 0
    host = (active and ps.get_tensor_model_parallel_rank() == 0
            and ps.get_pipeline_model_parallel_rank() == 0)
    return active, host


def plain_alloc(shape, dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device.current_device())


class MegatronShards:
    """This rank's parameters, the units in streaming order, and the point-to-point moves
    that assemble full tensors on a stage's TP rank 0 and on the host."""

    def __init__(self, model, spec: ModelSpec):
        from megatron.core import parallel_state as ps

        self.spec = spec
        self.module = getattr(model, "module", model)
        vpp = ps.get_virtual_pipeline_model_parallel_world_size()
        if vpp not in (None, 1):
            raise NotImplementedError("the weight sync does not support virtual pipeline stages")
        self.tp_rank = ps.get_tensor_model_parallel_rank()
        self.tp_size = ps.get_tensor_model_parallel_world_size()
        self.pp_rank = ps.get_pipeline_model_parallel_rank()
        self.pp_size = ps.get_pipeline_model_parallel_world_size()
        self.active, self.is_host = sync_place()
        config = self.module.config     # the stages' layer counts as Megatron built them
        self.units = plan_units(spec, self.pp_size, config.num_layers_in_first_pipeline_stage,
                                config.num_layers_in_last_pipeline_stage)
        self.own = dict(self.module.named_parameters())
        self.params = dict(self.own)    # under the tables' names (experts: global numbers)
        self._merged: List[str] = []    # params that hold merged LoRA copies during a sync
        self.ep_size = ps.get_expert_model_parallel_world_size() if spec.is_moe else 1
        self.etp_size = (ps.get_expert_tensor_parallel_world_size() if spec.is_moe
                         else self.tp_size)
        self.etp_rank = ps.get_expert_tensor_parallel_rank() if spec.is_moe else self.tp_rank
        if self.tp_size % self.etp_size:
            raise NotImplementedError(f"the weight sync reads expert shards inside the TP "
                                      f"group: expert TP {self.etp_size} must divide TP "
                                      f"{self.tp_size}")
        self.local_experts = [n for n in self.own if expert_number(n) is not None]
        if self.ep_size > 1:
            self.ep_rank = ps.get_expert_model_parallel_rank()
            self.ep_ranks = torch.distributed.get_process_group_ranks(
                ps.get_expert_model_parallel_group())
            # EP groups of expert-DP rank 0 hold replica 0's experts; their EP rank 0 (a TP
            # rank of replica 0 below expert TP) receives them.
            self.gathers_experts = ps.get_expert_data_parallel_rank() == 0
            for name in self.local_experts:
                del self.params[name]
        self.stage_ranks = torch.distributed.get_process_group_ranks(
            ps.get_pipeline_model_parallel_group())
        self.tp_ranks = torch.distributed.get_process_group_ranks(
            ps.get_tensor_model_parallel_group())
        self.mp_ranks = torch.distributed.get_process_group_ranks(ps.get_model_parallel_group())
        self.rank = torch.distributed.get_rank()

    def gather_experts(self) -> int:
        """EP > 1: every expert of this rank's expert-TP shard into `params` under its global
        number on EP rank 0 of each EP group of expert-DP rank 0 (point to point from the other
        EP ranks, which send each of theirs once). Returns the elements received."""
        if self.ep_size == 1 or not self.gathers_experts:
            return 0
        n_local = self.spec.moe.num_experts // self.ep_size
        if self.ep_rank != 0:
            for name in self.local_experts:
                torch.distributed.send(self.own[name].detach().contiguous(), self.ep_ranks[0])
            return 0
        received = 0
        for name in self.local_experts:     # the senders' order: no send waits on another
            local = self.own[name].detach()
            self.params[global_name(name, 0, n_local)] = local
            for r in range(1, self.ep_size):
                part = torch.empty_like(local)
                torch.distributed.recv(part, self.ep_ranks[r])
                self.params[global_name(name, r, n_local)] = part
                received += part.numel()
        return received

    def merge_adapters(self) -> int:
        """LoRA (`sync: merged`): each adapted layer's weight in `params` becomes this rank's
        shard of W + scale * B A (computed here, no communication: column layers hold B's
        rows of their output, row layers A's columns of their input), so the engines get
        full merged weights and the fingerprints check those. Returns the layers merged."""
        merged = lora.merged_weights(self.module)
        self.params.update(merged)
        self._merged = list(merged)
        return len(merged)

    def release_merged(self) -> None:
        """The params' own tensors back (the merged copies are a sync's)."""
        for name in self._merged:
            self.params[name] = self.own[name]
        self._merged = []

    def release_experts(self) -> None:
        """Drop the gathered expert copies (they are a sync's, and stale after a step)."""
        if self.ep_size > 1:
            for name in [n for n in self.params if expert_number(n) is not None]:
                del self.params[name]

    @property
    def host(self) -> int:
        return self.mp_ranks[0]

    @property
    def peers(self) -> List[int]:
        return [r for r in self.mp_ranks if r != self.rank]

    # ---------------------------------------------------------------- full tensors

    def shard_place(self, unit: Unit) -> Optional[Tuple[int, int]]:
        """(shard rank, shard count) of this rank's part of a unit: its TP rank and the TP,
        an expert's its expert-TP rank and the expert TP; None where this rank holds no part
        of it in the sync (an expert on a TP rank at or above expert TP: the copies there
        are another expert-DP replica's)."""
        if expert_number(unit.local_name) is None:
            return self.tp_rank, self.tp_size
        if self.tp_rank >= self.etp_size:
            return None
        return self.etp_rank, self.etp_size

    def gather_tp(self, unit: Unit, alloc: Alloc = plain_alloc) -> Optional[torch.Tensor]:
        """The full Megatron tensor on this stage's TP rank 0 (None on the others).

        Point to point rather than a gather collective: gloo's gather stages everything in a
        temporary of the full size, while recv writes straight into the destination (row-block
        shards land in place; others are put in order by `mapping.gather`). An expert's shards
        come from the first expert-TP TP ranks (`shard_place`).
        """
        place = self.shard_place(unit)
        if place is None:
            return None
        rank, size = place
        local = self.params[unit.local_name].detach()
        if size == 1 or unit.rule.tp_dim is None:
            return local if rank == 0 else None
        local = local.contiguous()
        if rank != 0:
            torch.distributed.send(local, self.tp_ranks[0])
            return None
        full = None
        if mapping.shards_are_row_blocks(unit.rule):
            full = alloc((local.shape[0] * size, *local.shape[1:]), local.dtype)
            shards = list(torch.chunk(full, size, dim=0))
        else:
            shards = [torch.empty_like(local) for _ in range(size)]
        shards[0].copy_(local)
        for r in range(1, size):
            torch.distributed.recv(shards[r], self.tp_ranks[r])
        return full if full is not None else mapping.gather(unit.rule, shards)

    def recv_full(self, unit: Unit, alloc: Alloc = plain_alloc) -> torch.Tensor:
        """A full tensor from the TP rank 0 of the unit's stage (shape/dtype header first)."""
        src = self.stage_ranks[unit.stage]
        header = torch.empty(2 + _MAX_DIMS, dtype=torch.long, device=device.current_device())
        torch.distributed.recv(header, src)
        code, ndim, *shape = header.tolist()
        out = alloc(tuple(shape[:ndim]), WIRE_DTYPES[code])
        torch.distributed.recv(out, src)
        return out

    def hf_parts(self, unit: Unit, alloc: Alloc = plain_alloc) -> Dict[str, torch.Tensor]:
        """On the host: the unit's HF tensors (gathered here, or received from its stage)."""
        full = self.gather_tp(unit, alloc) if unit.stage == 0 else self.recv_full(unit, alloc)
        return mapping.mcore_to_hf(unit.rule, full, self.spec, unit.layer)

    def send_full_tensors(self) -> None:
        """Peer side of `hf_parts`: each stage's TP rank 0 sends its full tensors to the host."""
        for unit in self.units:
            if unit.stage == self.pp_rank:
                full = self.gather_tp(unit)
                if full is not None:   # TP rank 0 of a stage other than the host's
                    _send(full, self.stage_ranks[0])

    def write_shards(self, destinations, where: str):
        """This rank's shards of each (unit, views of its HF parts) into those views
        (`mapping.write_shard`). None, or (index of the unit that failed, a message naming
        it) at the first failure."""
        for index, (unit, views) in enumerate(destinations):
            place = self.shard_place(unit)
            if unit.stage != self.pp_rank or place is None:
                continue
            try:
                mapping.write_shard(unit.rule, self.spec, self.params[unit.local_name].detach(),
                                    *place, views)
            except Exception as exc:
                return index, (f"rank {self.rank} failed to write {unit.local_name} "
                               f"({', '.join(unit.rule.hf_names(unit.layer))}) into {where}: "
                               f"{type(exc).__name__}: {exc}")
        return None


def _send(tensor: torch.Tensor, dst: int) -> None:
    """Shape and dtype header, then the data (the receiver allocates exactly)."""
    if tensor.dim() > _MAX_DIMS:
        raise ValueError(f"a {tensor.dim()}-D tensor {tuple(tensor.shape)} does not fit the "
                         f"sync's header ({_MAX_DIMS} dims): raise source._MAX_DIMS")
    shape = list(tensor.shape) + [0] * (_MAX_DIMS - tensor.dim())
    header = torch.tensor([WIRE_DTYPES.index(tensor.dtype), tensor.dim()] + shape,
                          dtype=torch.long, device=tensor.device)
    torch.distributed.send(header, dst)
    torch.distributed.send(tensor.contiguous(), dst)
