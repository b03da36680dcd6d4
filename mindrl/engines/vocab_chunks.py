"""One chunk of response positions' vocabulary maths as pure functions, for fused kernels.

`vocab_parallel._ResponseStats` runs a chunk either eagerly, with in-place ops on one fp32 slab
(the memory bound it documents), or through these functions compiled into a few fused kernels
where the device compiles them (`device.fused_kernels`): each reads the chunk's logits in their
own dtype once and writes per-token sums (or the chunk's gradient) without materialising the
fp32 slabs the eager ops pass between them. On the H200 the eager chunk maths were about three
quarters of a packed bf16 update's device time (docs/platforms.md#gpu-sessions).

z = logits / T over this rank's vocabulary slice, -inf past the real vocabulary (`valid`
columns are real), minus the row's max over the whole (TP) vocabulary.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch


def _z(rows_logits: torch.Tensor, temperature: float, valid: int) -> torch.Tensor:
    z = rows_logits.float() / temperature
    cols = torch.arange(z.shape[-1], device=z.device)
    return torch.where(cols < valid, z, float("-inf"))


def _split(z: torch.Tensor) -> torch.Tensor:
    """[c, V] as [c, S, V/S] for a reduction over V in two stages: a compiled reduction of a
    few hundred rows over 152k columns gets one program per row and streamed at ~50 GB/s on
    an H200 (121 ms of a 1.5B update step); S pieces per row give the device c x S programs.
    S divides V (vocabularies padded to a multiple of 128 always have one); else no split."""
    width = z.shape[-1]
    for pieces in (64, 32, 16, 8, 4, 2):
        if width % pieces == 0 and width // pieces >= 1024:
            return z.view(z.shape[0], pieces, width // pieces)
    return z.unsqueeze(1)


def _row_sum(z: torch.Tensor) -> torch.Tensor:
    return _split(z).sum(-1).sum(-1)


def chunk_max(rows_logits: torch.Tensor, temperature: float, valid: int) -> torch.Tensor:
    """[c] the row max of logits / T over this rank's real columns."""
    return _split(_z(rows_logits, temperature, valid)).amax(-1).amax(-1)


def chunk_sums(rows_logits: torch.Tensor, temperature: float, valid: int,
               global_max: torch.Tensor, local: torch.Tensor, here: torch.Tensor
               ) -> torch.Tensor:
    """[3, c]: sum exp(z), sum exp(z) z and z[target] (0 where the target is on another
    rank), this rank's share of each (summed over TP by the caller)."""
    z = _z(rows_logits, temperature, valid) - global_max.unsqueeze(-1)
    p = torch.exp(z)
    pz = torch.where(p == 0, 0.0, p * z)      # padded / underflowed columns add 0, not nan
    target = torch.where(here, z.gather(1, local.unsqueeze(1))[:, 0], 0.0)
    return torch.stack([_row_sum(p), _row_sum(pz), target])


def chunk_grad(rows_logits: torch.Tensor, temperature: float, valid: int,
               global_max: torch.Tensor, log_sum_exp: torch.Tensor, mean_z: torch.Tensor,
               grad_logp: torch.Tensor, grad_entropy: torch.Tensor, local: torch.Tensor,
               here: torch.Tensor) -> torch.Tensor:
    """[c, V/TP] in the logits' dtype: d(grad_logp . logp + grad_entropy . H) / d logits, with
    d logp / dz_j = [j = target] - p_j and d H / dz_j = -p_j (z_j - E_p[z])."""
    z = _z(rows_logits, temperature, valid) - global_max.unsqueeze(-1)
    p = torch.exp(z - log_sum_exp.unsqueeze(-1))
    coef = -grad_entropy.unsqueeze(-1) * (z - mean_z.unsqueeze(-1)) - grad_logp.unsqueeze(-1)
    grad = torch.where(p == 0, 0.0, p * coef)
    cols = torch.arange(z.shape[-1], device=z.device)
    is_target = (cols == local.unsqueeze(-1)) & here.unsqueeze(-1)
    grad = grad + torch.where(is_target, grad_logp.unsqueeze(-1), 0.0)
    return (grad / temperature).to(rows_logits.dtype)


class ChunkKernels(NamedTuple):
    max: Callable
    sums: Callable
    grad: Callable

    @classmethod
    def plain(cls) -> "ChunkKernels":
        """The functions as they are (eager): the reference the compiled ones are tested on."""
        return cls(chunk_max, chunk_sums, chunk_grad)

    @classmethod
    def compiled(cls, compile_fn: Callable) -> "ChunkKernels":
        return cls(*(compile_fn(f) for f in (chunk_max, chunk_sums, chunk_grad)))
