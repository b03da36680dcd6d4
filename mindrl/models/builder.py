"""ModelSpec -> Megatron TransformerConfig -> GPTModel (local layer spec, TP/PP aware).

What the decoder is (norm, activation, biases, its layer spec) comes from the spec's
registered family (mindrl/models/families/); shape, parallelism, dtype and the device's
fusions are set here for every family. The local spec keeps Megatron-core free of Transformer
Engine / Apex, so one builder serves CPU (gloo), CUDA and Ascend; fusions are switched off
where the device has no kernels.
"""

from __future__ import annotations

from typing import Optional

import torch

from mindrl import device
from mindrl.config.model_spec import ModelSpec
from mindrl.config.roles import Parallelism  # noqa: F401  (builders take it; callers import it here)
from mindrl.models.families import model_family

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"params dtype {name!r}: use one of {sorted(DTYPES)}") from None


def transformer_config(spec: ModelSpec, parallel: Parallelism, params_dtype: str = "fp32",
                       init_method_std: float = 0.02, **overrides):
    """The TransformerConfig of the spec's decoder: its family's settings (for Qwen2 /
    Llama: RMSNorm, SwiGLU, GQA, RoPE) with the spec's shape."""
    from megatron.core.transformer import TransformerConfig

    dtype = torch_dtype(params_dtype)
    values = dict(
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        ffn_hidden_size=spec.ffn_hidden_size,
        num_attention_heads=spec.num_attention_heads,
        num_query_groups=spec.num_query_groups,
        kv_channels=spec.head_dim,
        layernorm_epsilon=spec.norm_epsilon,
        **model_family(spec.architecture).transformer_config_kwargs(spec),
        attention_dropout=0.0,
        hidden_dropout=0.0,
        init_method_std=init_method_std,
        tensor_model_parallel_size=parallel.tensor_model_parallel_size,
        pipeline_model_parallel_size=parallel.pipeline_model_parallel_size,
        expert_model_parallel_size=parallel.expert_model_parallel_size,
        expert_tensor_parallel_size=parallel.expert_tp,
        num_layers_in_first_pipeline_stage=parallel.first_stage_layers,
        num_layers_in_last_pipeline_stage=parallel.last_stage_layers,
        sequence_parallel=parallel.sequence_parallel and parallel.tensor_model_parallel_size > 1,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype is torch.bfloat16,
        fp16=dtype is torch.float16,
        attention_softmax_in_fp32=True,
        perform_initialization=True,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        # Megatron's own backward (custom_backward, in schedules.backward_step): on CPU the
        # pass step that runs outside the CUDA -> CPU redirect mode
        # (docs/platforms.md#megatron-core-on-cpu), and the one expert parallelism works with.
        deallocate_pipeline_outputs=True,
    )
    values.update(device.megatron_config())   # host init, fused kernels, p2p sync
    values.update(overrides)
    return TransformerConfig(**values)


def _block_spec(config, family):
    """The family's local (no Transformer Engine) layer spec with SDPA as its core attention
    and torch norms that work under sequence parallelism (`norms.SequenceParallelNorm`), the
    block's final norm and any q/k norms included, for this rank's pipeline stage. A MoE
    model's layers follow `config.moe_layer_freq`: the family's MoE layer where it is 1, its
    dense layer (`dense_layer_spec`) where it is 0."""
    from megatron.core.transformer.transformer_block import (TransformerBlockSubmodules,
                                                             get_num_layers_to_build)
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    from mindrl.models import packed_rope
    from mindrl.models.norms import SequenceParallelNorm

    packed_rope.install()

    first = get_transformer_layer_offset(config)
    layers = range(first, first + get_num_layers_to_build(config))
    if config.num_moe_experts:
        moe, dense = _local_layer(family.layer_spec(config), config), None
        freq = config.moe_layer_freq
        if isinstance(freq, list) and 0 in freq:
            dense = _local_layer(family.dense_layer_spec(config), config)
        specs = [moe if dense is None or freq[i] else dense for i in layers]
    else:
        specs = [_local_layer(family.layer_spec(config), config)] * len(layers)
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=SequenceParallelNorm)


def _local_layer(layer, config):
    """One layer spec with MindRL's attention and SP-capable norms in its slots."""
    from mindrl.models.norms import SequenceParallelNorm
    from mindrl.models.sdpa_attention import SDPAttention

    attention = layer.submodules.self_attention.submodules
    attention.core_attention = SDPAttention
    if config.qk_layernorm:   # per-head q/k norms (Qwen3): the local spec's refuses SP too
        attention.q_layernorm = attention.k_layernorm = SequenceParallelNorm
    layer.submodules.input_layernorm = SequenceParallelNorm
    layer.submodules.pre_mlp_layernorm = SequenceParallelNorm
    return layer


def build_gpt_model(spec: ModelSpec, parallel: Parallelism, params_dtype: str = "fp32",
                    pre_process: Optional[bool] = None, post_process: Optional[bool] = None,
                    model_class=None, model_kwargs: Optional[dict] = None,
                    family: Optional[str] = None, **config_overrides):
    """One pipeline stage of the model for this rank (parallel_state must be initialised).

    spec.head "scalar" gives a reward model: the last stage outputs [b, s, 1] scores instead
    of vocab-parallel logits (mindrl/models/scalar_head.py).
    model_class / model_kwargs: a GPTModel subclass and the constructor arguments it adds or
    replaces (a multimodal family, mindrl/models/families/), so such a family is this same
    decoder, built here, plus its own parts; `family` (default the spec's) is the registered
    family the model records as `model.family`, whose declared features callers read.
    """
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel

    device.prepare_megatron()
    config = transformer_config(spec, parallel, params_dtype, **config_overrides)
    if pre_process is None:
        pre_process = parallel_state.is_pipeline_first_stage()
    if post_process is None:
        post_process = parallel_state.is_pipeline_last_stage()
    arguments = dict(
        config=config,
        transformer_layer_spec=_block_spec(config, model_family(spec.architecture)),
        vocab_size=spec.padded_vocab_size(parallel.tensor_model_parallel_size),
        max_sequence_length=spec.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        parallel_output=True,
        share_embeddings_and_output_weights=spec.tied_embeddings,
        position_embedding_type="rope",
        rotary_base=int(spec.rotary_base),
    )
    arguments.update(model_kwargs or {})
    model = (model_class or GPTModel)(**arguments)
    if spec.head == "scalar" and post_process:
        from mindrl.models.scalar_head import ScalarHead

        # GPTModel always builds a vocab head; a reward model swaps in its [1, hidden] score.
        model.output_layer = ScalarHead(config)
    model.head_kind = spec.head   # on every stage: checkpoint loading checks it (mcore_io)
    model.family = family or spec.family
    return model.to(device.current_device())


def initialize_parallel(parallel: Parallelism, seed: int = 1234) -> None:
    """parallel_state for this world (torch.distributed must be up), with seeded RNG streams."""
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=parallel.tensor_model_parallel_size,
        pipeline_model_parallel_size=parallel.pipeline_model_parallel_size,
        # Experts over EP ranks; each expert split over expert TP ranks (the TP by default;
        # 1: whole experts, the ETP x EP grid inside a stage's TP x DP ranks).
        expert_model_parallel_size=parallel.expert_model_parallel_size,
        expert_tensor_parallel_size=parallel.expert_tp,
    )
    device.seed_model_parallel(seed)
