"""A sync's expected fingerprints, computed where the Megatron shards already are.

Every rank of the replica multiplies its own shards by the probe (`W_local p`: a read of its
own bytes, all ranks at once); only those vectors (rows, not rows x columns) travel to the
host, which puts them together the way full tensors are put together (`mapping.gather`, then
`mapping.mcore_to_hf` on a one-column tensor) and digests each HF part. The result equals
`tensor_fingerprint` of the gathered HF tensor (r^T W p is linear in W), so the engines'
digests compare against it unchanged, and no full tensor is gathered to verify a sync.

It is computed from the actor's parameters through the converter's own table, not from the
bytes the transport wrote, so a transport that writes a shard to the wrong place fails the
check too.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from mindrl.ckpt import mapping
from mindrl.ckpt.fingerprint import digest, probe
from mindrl.models.expert_names import expert_number

PROBE_SLAB_BYTES = 64 * 2**20
ProbeRows = Dict[int, torch.Tensor]      # unit index -> this rank's W_local p (or 1-D shard)


def probe_rows(rule: mapping.TensorRule, local: torch.Tensor, tp_rank: int, tp_size: int,
               dtype: Optional[torch.dtype]) -> torch.Tensor:
    """This rank's share of a tensor's digest input: W_local p as [rows, 1] for a matrix
    (the probe's slice of this rank's columns when TP splits the columns), the shard itself
    for a vector. Cast to the engines' dtype first, as the engines hold it."""
    t = local.detach()
    if t.dim() != 2:
        return (t if dtype is None else t.to(dtype)).float()
    cols = t.shape[1]
    if rule.tp_dim == 1 and tp_size > 1:
        p = probe(cols * tp_size)[tp_rank * cols:(tp_rank + 1) * cols]
    else:
        p = probe(cols)
    p = p.to(t.device)
    # Rows in slabs of PROBE_SLAB_BYTES of fp32: an fp32 copy of a whole bf16 embedding
    # (0.93 GB at 151936 x 1536) would outgrow the sync's own buffers.
    step = max(1, PROBE_SLAB_BYTES // (4 * cols))
    return torch.cat([(rows if dtype is None else rows.to(dtype)).float() @ p
                      for rows in t.split(step)]).cpu()[:, None]


def unit_digests(rule: mapping.TensorRule, spec, layer: Optional[int],
                 shards: List[torch.Tensor]) -> Dict[str, torch.Tensor]:
    """{HF name: digest} of one Megatron tensor from every TP rank's `probe_rows` (rank
    order): column splits add up, row splits are put together as the tensor's shards are."""
    if rule.tp_dim is None or len(shards) == 1:
        full = shards[0]
    elif rule.tp_dim == 1:
        full = torch.stack(shards).sum(0)
    else:
        full = mapping.gather(rule, shards)
    parts = mapping.mcore_to_hf(rule, full, spec, layer)
    return {name: digest(part.reshape(-1)) for name, part in parts.items()}


def expected_fingerprints(source, dtype: Optional[torch.dtype]) -> Optional[Dict[str, torch.Tensor]]:
    """Collective over the replica's model-parallel ranks (`source`: MegatronShards): the
    expected fingerprint of every HF tensor on the host, None on the other ranks."""
    rows: ProbeRows = {}
    for index, unit in enumerate(source.units):
        place = source.shard_place(unit)      # an expert: its expert-TP shard, or none here
        if unit.stage != source.pp_rank or place is None:
            continue
        if unit.rule.tp_dim is None and place[0] != 0:
            continue                                  # replicated: TP rank 0 speaks for it
        rows[index] = probe_rows(unit.rule, source.params[unit.local_name], *place, dtype)
    mine: Tuple[int, int, ProbeRows] = (source.pp_rank, source.tp_rank, rows)
    if len(source.mp_ranks) == 1:
        gathered = [mine]
    else:
        from megatron.core import parallel_state as ps

        gathered = [None] * len(source.mp_ranks) if source.is_host else None
        torch.distributed.gather_object(mine, gathered, dst=source.host,
                                        group=ps.get_model_parallel_group())
    if not source.is_host:
        return None
    by_place = {(pp, tp): r for pp, tp, r in gathered}
    expected: Dict[str, torch.Tensor] = {}
    for index, unit in enumerate(source.units):
        # an expert's shards: on the TP ranks below expert TP (their expert-TP ranks)
        size = source.etp_size if expert_number(unit.local_name) is not None else source.tp_size
        ranks = 1 if unit.rule.tp_dim is None else size
        shards = [by_place[(unit.stage, tp)][index] for tp in range(ranks)]
        expected.update(unit_digests(unit.rule, source.spec, unit.layer, shards))
    return expected
