"""vLLM's side of a weight fingerprint: the digests of the weights a vLLM worker really
computes with, named and shaped from vLLM's own fused-module metadata (never from
mindrl/ckpt/mapping/), so that a wrong mapping entry shows up as a mismatch against an
independent reference. The digest maths is mindrl/ckpt/fingerprint.py's, shared with the
actor's side.
"""

from __future__ import annotations

from typing import Dict, List

import torch

from mindrl import device
from mindrl.ckpt.fingerprint import digest, probe


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


def _replicated(module) -> bool:
    """Whether every TP rank holds the whole layer (an MoE router: vLLM's ReplicatedLinear)."""
    from vllm.model_executor.layers.linear import ReplicatedLinear

    return isinstance(module, ReplicatedLinear)


def _output_parts(module):
    """Per output partition of a linear layer (its `output_partition_sizes`, the parts vLLM
    fuses), where this TP rank's rows sit in that part's full HF tensor: (full rows, first
    row, whether this rank counts them). A row-parallel layer's output is whole on every rank
    (rank 0 counts it); a KV head replicated over several ranks is counted once."""
    tp_size, tp_rank = getattr(module, "tp_size", 1), getattr(module, "tp_rank", 0)
    if getattr(module, "input_is_parallel", False):
        return [(module.output_size, 0, tp_rank == 0 or tp_size == 1)]
    local = list(getattr(module, "output_partition_sizes", None)
                 or [module.output_size_per_partition])
    if tp_size == 1 or _replicated(module):
        return [(rows, 0, tp_rank == 0) for rows in local]
    if hasattr(module, "total_num_kv_heads"):      # fused q, k, v with GQA
        replicas = module.num_kv_head_replicas
        full = [module.total_num_heads * module.head_size,
                module.total_num_kv_heads * module.head_size,
                module.total_num_kv_heads * getattr(module, "v_head_size", module.head_size)]
        return [(full[0], tp_rank * local[0], True)] + [
            (full[j], (tp_rank // replicas) * local[j], tp_rank % replicas == 0)
            for j in (1, 2)]
    return [(rows * tp_size, tp_rank * rows, True) for rows in local]


def _merged_places(places):
    """The places of several fused outputs held by ONE HF tensor (the vision tower's qkv: one
    checkpoint tensor, three output parts in vLLM): each part's rows follow the previous
    parts' full rows. Returns (full rows of the tensor, [(first row, counts)] per part)."""
    out, base = [], 0
    for rows, first, counts in places:
        out.append((base + first, counts))
        base += rows
    return base, out


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


def _expert_tensors(module):
    """[(HF name, shard id, expert)] of a vLLM expert layer, from vLLM's own expert mapping
    (the names its loader accepts: ``<mlp>.experts.<e>.{gate,up,down}_proj.weight``)."""
    base = module.layer_name.rpartition(".")[0]
    return [(f"{base}.{weight_name}weight", shard, expert)
            for _, weight_name, expert, shard in module.get_expert_mapping()]


def expert_place(shard: str, hidden: int, width: int, tp_size: int, tp_rank: int,
                 held: bool):
    """(HF shape, first row, counts) of this rank's digest of one expert tensor: gate / up
    (``w1`` / ``w3``) digest W p over the `width` rows this rank holds, at its TP offset; down
    (``w2``) digests W q, whole on every rank after the TP all-reduce (rank 0 counts it). With
    inference expert parallelism (vLLM then sets the experts' TP to 1) a rank holds whole
    experts, and only the one that `held` the expert counts it; the others add zeros, so the
    ranks' digests still add up to the whole tensor's."""
    full = width * tp_size
    if shard == "w2":
        return (hidden, full), 0, held and tp_rank == 0
    return (full, hidden), tp_rank * width, held


def _expert_entries(module, mod_name, with_digest, add) -> None:
    """Every expert's gate, up and down projection of a vLLM expert layer (``w13_weight``
    [E, 2I, H], ``w2_weight`` [E, H, I] over this rank's experts) as HF tensors, digested from
    what the platform's MoE kernel computes with (`VLLMBuild.expert_products`: on CPU, through
    the kernel, whose packed layout a stale load breaks). At infer TP > 1 a rank holds rows
    [r I/tp, ...) of each gate / up and the matching columns of each down, whose partial
    products are summed over TP; with inference expert parallelism it holds some experts whole
    (vLLM's `expert_map`: global -> local, -1 elsewhere)."""
    config = module.moe_config
    parallel = config.moe_parallel_config
    hidden = config.hidden_dim_unpadded or config.hidden_dim
    width = config.intermediate_size_per_partition_unpadded
    first = parallel.tp_rank * width
    expert_map = module.expert_map
    products = None
    if with_digest:
        p = probe(hidden)
        q = probe(width * parallel.tp_size)[first:first + width]
        gate, up, down = device.vllm_build().expert_products(module, p, q)
        if parallel.tp_size > 1:
            from vllm.distributed import tensor_model_parallel_all_reduce

            down = tensor_model_parallel_all_reduce(down.contiguous())
        products = {"w1": gate, "w3": up, "w2": down}
    for name, shard, expert in _expert_tensors(module):
        local = expert if expert_map is None else int(expert_map[expert])
        shape, offset, counts = expert_place(shard, hidden, width, parallel.tp_size,
                                             parallel.tp_rank, local >= 0)
        y = None if products is None else products[shard][max(local, 0)]
        add(name, shape, mod_name, y, SUM, offset, counts)


def vllm_view(worker, with_digest: bool):
    """{HF name: [full shape, [digest per place vLLM uses the tensor], loading module, how
    ranks combine]} on this TP worker; `combine_views` merges the workers' views.

    Names come from vLLM itself: ``packed_modules_mapping`` (qkv_proj -> q/k/v_proj, ...) and
    each fused linear's ``output_partition_sizes``, never from mindrl/ckpt/mapping/. A layer
    whose fused outputs are one checkpoint tensor (the vision tower's qkv: q, k and v parts
    in vLLM, one `attn.qkv` in HF) is digested as that one tensor, every part at its rows. Linear
    layers and output heads are digested by running them; a tied output head is a second
    place of the embedding (on CPU it keeps its own packed copy, which can go stale). At infer
    TP > 1 each worker digests the rows it holds (`digest` of a shard), so only digests
    leave the workers.
    """
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    model = worker.model_runner.get_model()
    dtype = next(model.parameters()).dtype
    packed = getattr(model, "packed_modules_mapping", None) or {}
    name_of_param: Dict[int, str] = {}
    out: Dict[str, list] = {}

    def add(name, shape, owner, y, combine, offset=0, counts=True, length=None):
        """length: of the digested vector (default: rows, as W p has; a tensor digested
        whole, like the 5-D patch embedding, passes its element count)."""
        entry = out.setdefault(name, [tuple(shape), [], owner, combine])
        if y is not None:
            entry[1].append(digest(y if counts else torch.zeros_like(y), offset,
                                   shape[0] if length is None else length))

    def add_merged(name, shape, owner, ys, merged):
        """One HF tensor holding several output parts: one digest, the parts' shard digests
        added at their rows."""
        entry = out.setdefault(name, [tuple(shape), [], owner, SUM])
        if ys[0] is not None:
            entry[1].append(sum(digest(y if counts else torch.zeros_like(y), first, shape[0])
                                for y, (first, counts) in zip(ys, merged)))

    for mod_name, module in model.named_modules():
        params = dict(module.named_parameters(recurse=False))
        if not params:
            continue
        prefix, _, leaf = mod_name.rpartition(".")
        prefix = prefix + "." if prefix else ""
        if isinstance(module, LinearBase):
            parts = [prefix + part for part in packed.get(leaf, [leaf])]
            places = _output_parts(module)
            w_parts, b_parts = (_linear_outputs(module, dtype) if with_digest
                                else ([None] * len(places), [None] * len(places)))
            if len(places) == len(parts):      # one HF tensor per output part
                for part, (rows, first, counts), w, b in zip(parts, places, w_parts, b_parts):
                    add(part + ".weight", (rows, module.input_size), mod_name, w, SUM, first,
                        counts)
                    if "bias" in params:
                        add(part + ".bias", (rows,), mod_name, b, SUM, first, counts)
            else:                              # every output part in one HF tensor
                rows, merged = _merged_places(places)
                name = prefix + leaf if len(parts) != 1 else parts[0]
                add_merged(name + ".weight", (rows, module.input_size), mod_name, w_parts,
                           merged)
                if "bias" in params:
                    add_merged(name + ".bias", (rows,), mod_name, b_parts, merged)
        elif isinstance(module, RoutedExperts):
            _expert_entries(module, mod_name, with_digest, add)
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
                    add(name, t.shape, mod_name, t.float() if with_digest else None, ONE,
                        length=t.numel())
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
