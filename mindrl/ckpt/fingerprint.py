"""Cheap per-tensor fingerprints of model weights in HF naming: the maths both sides of a
weight sync share (the actor's ranks in weight_sync/fingerprint.py, vLLM's workers in
engines/vllm_fingerprint.py) and the mapping-free reference of a checkpoint directory.

A 2-D tensor W [out, in] is digested through y = W @ p (p a fixed probe over `in`), a 1-D
tensor is y itself; the digest is (sum y, sum y^2, sum y*r) with r a fixed probe over `out`,
i.e. r^T W p: sensitive to swapped parts, permuted rows or columns and stale tensors. The
form lets vLLM's side run each linear layer on the probe instead of reading its weight, which
the CPU build has repacked for oneDNN and removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import torch

NamedTensors = Iterable[Tuple[str, torch.Tensor]]

# Relative size of the rounding noise in y for vLLM's dtype (the reference is cast to it first).
_NOISE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def probe(n: int, salt: int = 0) -> torch.Tensor:
    """A fixed pseudo-random vector in [-1, 1): identical in every process."""
    g = torch.Generator().manual_seed(7919 * n + salt)
    return torch.rand(n, generator=g) * 2 - 1


def digest(y: torch.Tensor, offset: int = 0, length: Optional[int] = None) -> torch.Tensor:
    """(sum, sum of squares, probe-weighted sum) of a 1-D vector, in float64.

    A shard: `y` holds elements offset ... of a vector of `length`; the digests of a vector's
    shards add up to the digest of the whole (what vLLM's TP workers send)."""
    y = y.detach().reshape(-1).double().cpu()
    length = y.numel() if length is None else length
    weights = probe(length, 1).double()[offset:offset + y.numel()]
    return torch.stack([y.sum(), (y * y).sum(), (y * weights).sum()])


def tensor_fingerprint(t: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Digest of an HF tensor as vLLM would hold it in `dtype`."""
    t = t.detach()
    if dtype is not None:
        t = t.to(dtype)
    t = t.float()
    return digest(t @ probe(t.shape[1]).to(t.device) if t.dim() == 2 else t)


def fingerprint_tensors(named: NamedTensors,
                        dtype: Optional[torch.dtype] = None) -> Dict[str, torch.Tensor]:
    return {name: tensor_fingerprint(t, dtype) for name, t in named}


def checkpoint_fingerprint(model_dir,
                           dtype: Optional[torch.dtype] = None) -> Dict[str, torch.Tensor]:
    """Fingerprints of an HF checkpoint directory's safetensors (a mapping-free reference)."""
    from safetensors import safe_open

    out = {}
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                out[name] = tensor_fingerprint(f.get_tensor(name), dtype)
    return out


def compare_fingerprints(got: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor],
                         dtype: torch.dtype, strict: bool = True) -> List[str]:
    """One line per tensor whose vLLM digest is not the expected one (empty: all equal)."""
    noise = 10 * _NOISE.get(dtype, 1e-2)
    problems = []
    for name, e in expected.items():
        g = got.get(name)
        if g is None:
            problems.append(f"{name}: vLLM has no such tensor")
            continue
        norm = float(e[1]) ** 0.5
        tol = torch.tensor([noise * norm, 2 * noise * float(e[1]), noise * norm]) + 1e-30
        if not bool(((g - e).abs() <= tol).all()):   # NaN counts as a mismatch
            where = " (one per place vLLM uses it, e.g. a tied output head)" if g.dim() > 1 else ""
            problems.append(f"{name}: vLLM digest {g.tolist()}{where} != expected {e.tolist()}")
    if strict:
        problems += [f"{name}: vLLM holds it but it was not in the expected set (never loaded?)"
                     for name in sorted(set(got) - set(expected))]
    return problems
