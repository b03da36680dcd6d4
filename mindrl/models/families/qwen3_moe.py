"""Qwen3-MoE: Qwen3's attention (q/k norms, no qkv bias, its own head dim) with a
Mixture-of-Experts MLP: a softmax router over `num_experts` experts, the top `router_topk`
per token (renormalised to sum 1 when `norm_topk_prob`), each expert a SwiGLU of width
`moe.ffn_hidden_size`; the layers in `moe.dense_layers` keep a dense MLP.

On Megatron: the local spec's MoELayer (its experts a SequentialMLP, or where the device has a
grouped GEMM the same parameters run in two grouped GEMMs: models/grouped_experts.py), its
top-k router with
`moe_router_pre_softmax` set so that it equals HF's routing, the allgather dispatcher (no
side streams or collective split sizes at expert parallelism 1, so it runs the same on CPU
and GPU) and `moe_layer_freq` as a 0/1 list from dense_layers. Parity with transformers'
`Qwen3MoeForCausalLM`: docs/platforms.md#qwen3-and-qwen3-moe-probes.

HF's `decoder_sparse_step` is read into dense_layers exactly (HF: layer i is sparse when
(i + 1) % step == 0 and i is not in mlp_only_layers) and always written back as 1; shared
experts and sliding windows have no spec field and are refused.
"""

from __future__ import annotations

from typing import Any

from mindrl.config.model_spec import ModelSpec, MoESpec
from mindrl.models.families import Features, register_model_family
from mindrl.models.families.qwen3 import Qwen3Family

# The published Qwen3-MoE configs' coefficient, written into HF configs for fidelity; the
# load-balancing loss Megatron trains with is a separate setting (moe_aux_loss_coeff).
HF_ROUTER_AUX_LOSS_COEF = 0.001


def dense_layers_from_hf(config: Any) -> tuple:
    """HF's rule for which layers keep a dense MLP, as a sorted tuple of layer indices."""
    step = getattr(config, "decoder_sparse_step", 1) or 1
    only = set(getattr(config, "mlp_only_layers", None) or ())
    return tuple(i for i in range(config.num_hidden_layers)
                 if i in only or config.num_experts <= 0 or (i + 1) % step != 0)


def moe_layer_freq(spec: ModelSpec) -> list:
    """Megatron's per-layer pattern: 1 for a MoE layer, 0 for a dense one."""
    return [int(spec.moe.is_moe_layer(i)) for i in range(spec.num_layers)]


class Qwen3MoeFamily(Qwen3Family):
    model_type, hf_prefix = "qwen3_moe", "Qwen3Moe"
    features = Features(qkv_bias=False, qk_norm=True, experts=True)

    # ------------------------------------------------------------------ spec <-> HF

    def hf_extra(self, spec: ModelSpec) -> dict:
        moe = spec.moe
        return dict(attention_bias=False, use_sliding_window=False, sliding_window=None,
                    num_experts=moe.num_experts, num_experts_per_tok=moe.router_topk,
                    moe_intermediate_size=moe.ffn_hidden_size,
                    norm_topk_prob=moe.norm_topk_prob, mlp_only_layers=list(moe.dense_layers),
                    decoder_sparse_step=1, output_router_logits=False,
                    router_aux_loss_coef=HF_ROUTER_AUX_LOSS_COEF)

    def check_hf(self, config, name: str) -> None:
        super().check_hf(config, name)
        for key in ("shared_expert_intermediate_size", "n_shared_experts"):
            if getattr(config, key, None):
                raise ValueError(f"{name}: shared experts ({key}={getattr(config, key)}) are "
                                 f"not supported by the qwen3_moe family")
        if getattr(config, "num_experts", 0) <= 0:
            raise ValueError(f"{name}: num_experts={getattr(config, 'num_experts', 0)}; a "
                             f"qwen3_moe model without experts is a dense qwen3 (model_type "
                             f"qwen3)")

    def spec_extra(self, config, name: str) -> dict:
        """The `moe:` block from num_experts, num_experts_per_tok, moe_intermediate_size,
        norm_topk_prob and the dense layers (mlp_only_layers and decoder_sparse_step)."""
        return dict(moe=MoESpec(
            num_experts=config.num_experts, router_topk=config.num_experts_per_tok,
            ffn_hidden_size=config.moe_intermediate_size,
            norm_topk_prob=bool(config.norm_topk_prob),
            dense_layers=dense_layers_from_hf(config)))

    # ------------------------------------------------------------------ Megatron

    def transformer_config_kwargs(self, spec: ModelSpec) -> dict:
        """Qwen3's settings plus the MoE layer's. The router: Megatron's default top-k takes
        the top-k logits and softmaxes over them, which is HF's softmax -> top-k ->
        renormalise (norm_topk_prob); without renormalising HF keeps the full softmax's
        top-k probabilities, Megatron's `moe_router_pre_softmax`. The aux loss is off unless
        the recipe turns it on (RL peers train without it)."""
        moe = spec.moe
        return dict(super().transformer_config_kwargs(spec),
                    num_moe_experts=moe.num_experts, moe_router_topk=moe.router_topk,
                    moe_ffn_hidden_size=moe.ffn_hidden_size,
                    moe_router_pre_softmax=not moe.norm_topk_prob,
                    moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=0.0,
                    moe_layer_freq=moe_layer_freq(spec),
                    moe_token_dispatcher_type="allgather",
                    moe_grouped_gemm=None)     # None: the device's (grouped_experts.choose)

    def layer_spec(self, config):
        """A MoE layer: the local spec's MoELayer, its experts grouped where
        grouped_experts.choose says (config.moe_grouped_gemm then records the choice)."""
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

        from mindrl.models import grouped_experts

        config.moe_grouped_gemm = grouped_experts.choose(config, config.moe_grouped_gemm)
        spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts,
                                        moe_grouped_gemm=False, normalization="RMSNorm",
                                        qk_layernorm=self.features.qk_norm)
        if config.moe_grouped_gemm:
            spec.submodules.mlp.submodules.experts.module = grouped_experts.grouped_experts_class()
        return spec

    def dense_layer_spec(self, config):
        """A layer of `moe.dense_layers`: Qwen3's dense layer."""
        return super().layer_spec(config)


QWEN3_MOE = Qwen3MoeFamily()
register_model_family(QWEN3_MOE)
