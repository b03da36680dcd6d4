"""Per-device memory arithmetic for the plan: parameters, gradients, Adam states, vLLM.

Estimates, not measurements: activations, communication buffers and allocator slack are
left out; the numbers are meant to tell 'fits' from 'does not fit by a factor of two'.
"""

from __future__ import annotations

from typing import Optional

from mindrl.config import names
from mindrl.config.model_spec import ModelSpec
from mindrl.config.pipeline_stages import stage_layer_counts

GIB = 2 ** 30
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "auto": 2}


def _layer_params(spec: ModelSpec) -> int:
    """One decoder layer, its MLP the average over layers (a MoE layer holds every expert)."""
    h, d = spec.hidden_size, spec.head_dim
    q, kv = spec.num_attention_heads * d, spec.num_query_groups * d
    attn = h * (q + 2 * kv) + q * h + (q + 2 * kv if spec.add_qkv_bias else 0)
    qk_norms = 2 * d if spec.architecture in names.QK_NORM_ARCHITECTURES else 0
    return attn + -(-spec.mlp_parameters() // spec.num_layers) + 2 * h + qk_norms


def _layer_expert_params(spec: ModelSpec) -> int:
    """The experts' share of `_layer_params` (0 for a dense model): what expert TP x EP
    splits instead of the TP."""
    moe = spec.moe
    if moe is None:
        return 0
    layers = sum(1 for i in range(spec.num_layers) if moe.is_moe_layer(i))
    return -(-layers * moe.num_experts * 3 * spec.hidden_size * moe.ffn_hidden_size
             // spec.num_layers)


def _per_device(spec: ModelSpec, tp: int, pp: int, first: Optional[int],
                last: Optional[int], expert_split: Optional[int]) -> tuple[int, int]:
    """(everything but the experts, the experts) on the largest stage's device."""
    if (first, last) == (None, None):
        counts = [-(-spec.num_layers // pp)] * pp
    else:
        counts = stage_layer_counts(spec.num_layers, pp, first, last)
    h = spec.hidden_size
    emb = spec.padded_vocab_size(tp) * h // tp
    experts = _layer_expert_params(spec)
    split = expert_split or tp
    body = [layers * (_layer_params(spec) - experts) // tp for layers in counts]
    expert_body = [layers * experts // split for layers in counts]
    head = h if spec.head == "scalar" else emb   # a reward model's score is [1, hidden]
    if pp == 1:
        return body[0] + emb + h + (0 if spec.tied_embeddings else head), expert_body[0]
    # PP > 1: the last stage holds the output layer, or a copy of the tied embedding.
    ends = [body[0] + emb, *body[1:-1], body[-1] + h + head]
    stage = max(range(pp), key=lambda i: ends[i] + expert_body[i])
    return ends[stage], expert_body[stage]


def params_per_device(spec: ModelSpec, tp: int, pp: int, first: Optional[int] = None,
                      last: Optional[int] = None, expert_split: Optional[int] = None) -> int:
    """Largest stage's share: its layers (layers / PP, or an uneven split's counts), TP-split
    (a MoE layer's experts split over expert TP x EP, `expert_split`; None: the TP, as at
    the default expert TP and EP 1), plus the vocab-parallel embedding on the first stage and
    the output layer (or tied embedding copy) on the last."""
    return sum(_per_device(spec, tp, pp, first, last, expert_split))


def train_state_bytes(spec: ModelSpec, tp: int, pp: int, dp: int, params_dtype: str,
                      distributed_optimizer: bool, first: Optional[int] = None,
                      last: Optional[int] = None, etp: Optional[int] = None,
                      ep: int = 1) -> dict[str, int]:
    """Megatron mixed precision: bf16/fp16 params, fp32 main grads, fp32 master copy + Adam
    m and v (the copy and moments sharded over DP by the distributed optimizer; a MoE
    model's experts' over expert DP = TP x DP / (expert TP x EP)). fp32 runs keep no master
    copy. first / last: an uneven pipeline's first and last stage counts; etp (None: the TP)
    and ep: the experts' split."""
    etp = etp or tp
    dense, experts = _per_device(spec, tp, pp, first, last, etp * ep)
    n = dense + experts
    b = DTYPE_BYTES[params_dtype]
    mixed = b < 4
    grad_b = 4 if params_dtype in ("bfloat16", "float32") else 2
    opt_b = 12 if mixed else 8
    sharded = distributed_optimizer and dp > 0
    shard = dp if sharded else 1
    expert_shard = max(1, dp * tp // (etp * ep)) if sharded else 1
    return {"params": n * b, "grads": n * grad_b,
            "optimizer": dense * opt_b // shard + experts * opt_b // expert_shard}


def inference_weight_bytes(spec: ModelSpec, tp: int, pp: int, dtype: str) -> int:
    return spec.num_parameters() * DTYPE_BYTES[dtype] // (tp * pp)


def kv_bytes_per_token(spec: ModelSpec, tp: int, pp: int, dtype: str) -> int:
    """vLLM's KV cache per token on one engine device: keys and values of its layers' KV
    heads (a KV head is replicated when TP exceeds the groups)."""
    layers = -(-spec.num_layers // pp)
    heads = max(spec.num_query_groups // tp, 1)
    return 2 * layers * heads * spec.head_dim * DTYPE_BYTES[dtype]


def full_length_capacity(kv_bytes: int, per_token: int, tokens: int,
                         block_size: Optional[int]) -> int:
    """How many sequences of `tokens` tokens the KV cache holds at once (in whole blocks)."""
    if block_size:
        tokens = -(-tokens // block_size) * block_size
    return kv_bytes // (per_token * tokens)
