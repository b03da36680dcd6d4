"""Independent references: transformers models built straight from transformers' classes."""

import torch
import transformers


def reference_hf_model(spec, seed=0):
    """A transformers model of the spec's shape, built directly from transformers' classes."""
    common = dict(vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
                  intermediate_size=spec.ffn_hidden_size, num_hidden_layers=spec.num_layers,
                  num_attention_heads=spec.num_attention_heads,
                  num_key_value_heads=spec.num_query_groups, rms_norm_eps=spec.norm_epsilon,
                  max_position_embeddings=spec.max_position_embeddings,
                  tie_word_embeddings=spec.tied_embeddings, rope_theta=spec.rotary_base)
    if spec.architecture == "qwen2":
        config = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    elif spec.architecture == "qwen3":   # q/k norms; its head dim is its own number
        config = transformers.Qwen3Config(head_dim=spec.head_dim, attention_bias=False,
                                          **common)
        cls = transformers.Qwen3ForCausalLM
    elif spec.architecture == "qwen3_moe":   # Qwen3's attention, experts in the MLP
        moe = spec.moe
        config = transformers.Qwen3MoeConfig(
            head_dim=spec.head_dim, attention_bias=False, num_experts=moe.num_experts,
            num_experts_per_tok=moe.router_topk, moe_intermediate_size=moe.ffn_hidden_size,
            norm_topk_prob=moe.norm_topk_prob, mlp_only_layers=list(moe.dense_layers),
            **common)
        cls = transformers.Qwen3MoeForCausalLM
    else:
        config = transformers.LlamaConfig(attention_bias=spec.add_qkv_bias, **common)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():  # non-zero biases and norms so that every tensor matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model
