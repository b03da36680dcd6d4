"""Cheap per-tensor fingerprints of model weights in HF naming, for both sides of a sync.

A 2-D tensor W [out, in] is digested through y = W @ p (p a fixed probe over `in`), a 1-D
tensor is y itself; the digest is (sum y, sum y^2, sum y*r) with r a fixed probe over `out`,
i.e. r^T W p: sensitive to swapped parts, permuted rows or columns and stale tensors. The
form lets vLLM's side run each linear layer on the probe instead of reading its weight, which
the CPU build has repacked for oneDNN and removed.

Kept apart from vllm_engine.py so the trainer side (resharding) uses it without vLLM.
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


def _linear_outputs(module, dtype):
    """(W p per part, bias per part or None) of a vLLM linear layer on this TP rank, by
    running it. A row-parallel layer takes this rank's slice of the probe and all-reduces, so
    every rank gets the whole W p; a column-parallel one gives this rank's rows."""
    in_features = module.input_size
    x = torch.stack([probe(in_features), torch.zeros(in_features)])
    if getattr(module, "input_is_parallel", False):
        per_rank = module.input_size_per_partition
        rank = getattr(module, "tp_rank", 0)
        x = x[:, rank * per_rank:(rank + 1) * per_rank]
    with torch.no_grad():
        out = module(x.to(dtype))
    out = (out[0] if isinstance(out, tuple) else out).float()
    sizes = list(getattr(module, "output_partition_sizes", [out.shape[1]]))
    if getattr(module, "input_is_parallel", False):
        sizes = [out.shape[1]]
    has_bias = getattr(module, "bias", None) is not None
    weight_parts = torch.split(out[0] - out[1], sizes)
    bias_parts = torch.split(out[1], sizes) if has_bias else [None] * len(sizes)
    return weight_parts, bias_parts


def _output_parts(module, parts: int):
    """Per fused part of a linear layer, where this TP rank's rows sit in the HF tensor:
    (full rows, first row, whether this rank counts them). A row-parallel layer's output is
    whole on every rank (rank 0 counts it); a KV head replicated over several ranks is
    counted once."""
    tp_size, tp_rank = getattr(module, "tp_size", 1), getattr(module, "tp_rank", 0)
    if getattr(module, "input_is_parallel", False) or tp_size == 1:
        full = [module.output_size] if parts == 1 else list(module.output_sizes)
        return [(rows, 0, tp_rank == 0 or tp_size == 1) for rows in full]
    local = list(getattr(module, "output_partition_sizes", [module.output_size_per_partition]))
    if hasattr(module, "total_num_kv_heads"):      # fused q, k, v with GQA
        replicas = module.num_kv_head_replicas
        full = [module.total_num_heads * module.head_size,
                module.total_num_kv_heads * module.head_size,
                module.total_num_kv_heads * getattr(module, "v_head_size", module.head_size)]
        return [(full[0], tp_rank * local[0], True)] + [
            (full[j], (tp_rank // replicas) * local[j], tp_rank % replicas == 0)
            for j in (1, 2)]
    if len(local) != parts:
        local = [sum(local)]
    return [(rows * tp_size, tp_rank * rows, True) for rows in local]


def _head_output(module, dtype):
    """This rank's W p rows of an output layer through the path the sampler uses (its own
    packed copy on CPU), and the first HF row they hold."""
    x = probe(module.weight.shape[1])
    with torch.no_grad():
        logits = module.quant_method.apply(module, x[None].to(dtype)).float()[0]
    shard = module.shard_indices
    return logits[:shard.org_vocab_end_index - shard.org_vocab_start_index], \
        shard.org_vocab_start_index


SUM, ONE = "sum", "one"    # how TP workers' digests combine: add shards, or take rank 0's


def vllm_view(worker, with_digest: bool):
    """{HF name: [full shape, [digest per place vLLM uses the tensor], loading module, how
    ranks combine]} on this TP worker; `combine_views` merges the workers' views.

    Names come from vLLM itself: ``packed_modules_mapping`` (qkv_proj -> q/k/v_proj, ...) and
    each fused linear's ``output_partition_sizes``, never from mindrl/ckpt/mapping.py. Linear
    layers and output heads are digested by running them; a tied output head is a second
    place of the embedding (on CPU it keeps its own packed copy, which can go stale). At infer
    TP > 1 each worker digests the rows it holds (`digest` of a shard), so only digests
    leave the workers.
    """
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    model = worker.model_runner.get_model()
    dtype = next(model.parameters()).dtype
    packed = getattr(model, "packed_modules_mapping", None) or {}
    name_of_param: Dict[int, str] = {}
    out: Dict[str, list] = {}

    def add(name, shape, owner, y, combine, offset=0, counts=True):
        entry = out.setdefault(name, [tuple(shape), [], owner, combine])
        if y is not None:
            entry[1].append(digest(y if counts else torch.zeros_like(y), offset, shape[0]))

    for mod_name, module in model.named_modules():
        params = dict(module.named_parameters(recurse=False))
        if not params:
            continue
        prefix, _, leaf = mod_name.rpartition(".")
        prefix = prefix + "." if prefix else ""
        if isinstance(module, LinearBase):
            parts = [prefix + part for part in packed.get(leaf, [leaf])]
            places = _output_parts(module, len(parts))
            if len(places) != len(parts):
                parts = [prefix + leaf]
            w_parts, b_parts = (_linear_outputs(module, dtype) if with_digest
                                else ([None] * len(places), [None] * len(places)))
            for part, (rows, first, counts), w, b in zip(parts, places, w_parts, b_parts):
                add(part + ".weight", (rows, module.input_size), mod_name, w, SUM, first, counts)
                if "bias" in params:
                    add(part + ".bias", (rows,), mod_name, b, SUM, first, counts)
        elif isinstance(module, ParallelLMHead):
            weight = params["weight"]
            tied = name_of_param.get(id(weight))     # a tied head is the embedding's 2nd place
            y, first = _head_output(module, dtype) if with_digest else (None, 0)
            add(tied or mod_name + ".weight", (module.org_vocab_size, weight.shape[1]),
                out[tied][2] if tied else mod_name, y, SUM, first)
        else:
            shard = getattr(module, "shard_indices", None)     # vocab-parallel embeddings
            for pname, p in params.items():
                name = f"{prefix}{leaf}.{pname}"
                name_of_param[id(p)] = name
                if shard is not None and p.dim() == 2:
                    t = p.detach()[:shard.org_vocab_end_index - shard.org_vocab_start_index]
                    add(name, (module.org_vocab_size, p.shape[1]), mod_name,
                        t.float() @ probe(t.shape[1]) if with_digest else None, SUM,
                        shard.org_vocab_start_index)
                else:
                    t = p.detach()
                    add(name, t.shape, mod_name, t.float() if with_digest else None, ONE)
    return out


def combine_views(views: List[dict]) -> dict:
    """One view from every TP worker's `vllm_view`, in rank order: shard digests added,
    replicated ones taken from rank 0. {HF name: [full shape, [digest per place], module]}."""
    first = views[0]
    out = {}
    for name, (shape, digests, owner, combine) in first.items():
        if combine == SUM and digests:
            digests = [sum(view[name][1][k] for view in views) for k in range(len(digests))]
        out[name] = [shape, digests, owner]
    return out
