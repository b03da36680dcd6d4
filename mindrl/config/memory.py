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
    """One decoder layer, its MLP the average over layers (a MoE layer holds every expert:
    they split over TP like a dense MLP; expert parallelism, which would split them further,
    is 1 here)."""
    h, d = spec.hidden_size, spec.head_dim
    q, kv = spec.num_attention_heads * d, spec.num_query_groups * d
    attn = h * (q + 2 * kv) + q * h + (q + 2 * kv if spec.add_qkv_bias else 0)
    qk_norms = 2 * d if spec.architecture in names.QK_NORM_ARCHITECTURES else 0
    return attn + -(-spec.mlp_parameters() // spec.num_layers) + 2 * h + qk_norms


def params_per_device(spec: ModelSpec, tp: int, pp: int, first: Optional[int] = None,
                      last: Optional[int] = None) -> int:
    """Largest stage's share: its layers (layers / PP, or an uneven split's counts), TP-split,
    plus the vocab-parallel embedding on the first stage and the output layer (or tied
    embedding copy) on the last."""
    if (first, last) == (None, None):
        counts = [-(-spec.num_layers // pp)] * pp
    else:
        counts = stage_layer_counts(spec.num_layers, pp, first, last)
    h = spec.hidden_size
    emb = spec.padded_vocab_size(tp) * h // tp
    body = [layers * _layer_params(spec) // tp for layers in counts]
    head = h if spec.head == "scalar" else emb   # a reward model's score is [1, hidden]
    if pp == 1:
        return body[0] + emb + h + (0 if spec.tied_embeddings else head)
    # PP > 1: the last stage holds the output layer, or a copy of the tied embedding.
    return max(body[0] + emb, *body[1:-1], body[-1] + h + head)


def train_state_bytes(spec: ModelSpec, tp: int, pp: int, dp: int, params_dtype: str,
                      distributed_optimizer: bool, first: Optional[int] = None,
                      last: Optional[int] = None) -> dict[str, int]:
    """Megatron mixed precision: bf16/fp16 params, fp32 main grads, fp32 master copy + Adam
    m and v (the copy and moments sharded over DP by the distributed optimizer). fp32 runs
    keep no master copy. first / last: an uneven pipeline's first and last stage counts."""
    n = params_per_device(spec, tp, pp, first, last)
    b = DTYPE_BYTES[params_dtype]
    mixed = b < 4
    grad_b = 4 if params_dtype in ("bfloat16", "float32") else 2
    opt_b = 12 if mixed else 8
    shard = dp if distributed_optimizer and dp > 0 else 1
    return {"params": n * b, "grads": n * grad_b, "optimizer": n * opt_b // shard}


def inference_weight_bytes(spec: ModelSpec, tp: int, pp: int, dtype: str) -> int:
    return spec.num_parameters() * DTYPE_BYTES[dtype] // (tp * pp)
