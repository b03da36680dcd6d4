"""Qwen2.5-VL on Megatron-core: transformers' vision tower feeding the text builder's GPTModel.

megatron-core has no Qwen2/2.5-VL vision tower, so the tower is transformers' own module
(`Qwen2_5_VisionTransformerPretrainedModel`: window attention, 2D rotary, 2x2 patch merger),
unchanged, which keeps its numerics and its tensor names identical to the HF checkpoint. The
language model is the same decoder `builder.build_gpt_model` builds for Qwen2, with multimodal
RoPE (`position_embedding_type="mrope"`): image features replace the `<|image_pad|>` token
embeddings and go in as `decoder_input`; 3D position ids come from transformers'
`get_rope_index`. Megatron-Bridge's Qwen2.5-VL has the same shape.

Where the tower lives: on the first pipeline stage only (it feeds the embeddings), whole on
every TP rank. Its gradients are then the same on each TP rank (the gradient reaching
`decoder_input` is already complete there), and Megatron's `finalize_model_grads` averages
them over TP anyway (`average_gradients_across_tp_domain`) so replicas cannot drift.

Registered as the `qwen2_5_vl` family (`FAMILY`: HF config both ways, the specs of the
decoder and the tower, the builder hook); its tensor table is mindrl/ckpt/mapping/qwen25_vl.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Mapping, Optional, Sequence, Tuple, Union

import torch
from megatron.core import tensor_parallel
from megatron.core.models.gpt import GPTModel
from transformers.initialization import no_init_weights
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
    Qwen2_5_VisionTransformerPretrainedModel, Qwen2_5_VLModel)

from mindrl.config.model_spec import ModelSpec, VisionSpec
from mindrl.models.builder import Parallelism, build_gpt_model
from mindrl.models.distinct_images import distinct_images, repeat_features
from mindrl.models.families import Features, register_model_family
from mindrl.models.families.dense import QWEN2, TokenIds

# transformers' text rotary embedding falls back to this when the config names no section.
HF_DEFAULT_MROPE_SECTION = (16, 24, 24)
# mm_token_type_ids values transformers' get_rope_index groups tokens by.
TEXT, IMAGE = 0, 1
# A VL config's token ids, from its tokenizer (models/processors.py writes them).
VISION_TOKEN_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id",
                     "vision_end_token_id")

Images = Union[None, torch.Tensor, Sequence[Optional[torch.Tensor]]]


def text_spec(hf_config, name: str = "qwen25-vl",
              make_vocab_size_divisible_by: int = 1) -> ModelSpec:
    """The ModelSpec of a Qwen2_5_VLConfig's language model: a Qwen2 decoder (qkv bias, SwiGLU,
    RMSNorm), so ckpt/mapping's qwen2 table names and lays out its tensors."""
    text = hf_config.text_config
    if getattr(text, "use_sliding_window", False):
        raise ValueError(f"{name}: sliding-window attention is not supported")
    return ModelSpec(
        name=name, architecture="qwen2", num_layers=text.num_hidden_layers,
        hidden_size=text.hidden_size, ffn_hidden_size=text.intermediate_size,
        num_attention_heads=text.num_attention_heads,
        num_query_groups=text.num_key_value_heads or text.num_attention_heads,
        vocab_size=text.vocab_size,
        untie_embeddings_and_output_weights=not hf_config.tie_word_embeddings,
        norm_epsilon=float(text.rms_norm_eps),
        rotary_base=float(text.rope_parameters["rope_theta"]),
        max_position_embeddings=text.max_position_embeddings, add_qkv_bias=True,
        make_vocab_size_divisible_by=make_vocab_size_divisible_by)


def mrope_section(hf_config) -> list:
    """Rotary channel pairs given to the temporal, height and width positions."""
    text = hf_config.text_config
    section = list(text.rope_parameters.get("mrope_section", HF_DEFAULT_MROPE_SECTION))
    head_dim = text.hidden_size // text.num_attention_heads
    if sum(section) * 2 != head_dim:
        raise ValueError(f"mrope_section {section} must sum to head_dim / 2 = {head_dim // 2}")
    return section


class _RopeIndex:
    """transformers' `Qwen2_5_VLModel.get_rope_index` without building that model: the method
    reads only `self.config` and `self.get_vision_position_ids`, so it runs bound to this."""

    get_rope_index = Qwen2_5_VLModel.get_rope_index
    get_vision_position_ids = Qwen2_5_VLModel.get_vision_position_ids

    def __init__(self, hf_config):
        self.config = hf_config


def batch_images(pixel_values: Images, image_grid_thw: Images
                 ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Per-sample images (a list with one [n_i, C] / [k_i, 3] tensor or None per sample) ->
    transformers' batch form: every image's patches and grid, in sample order. Tensors pass
    through; (None, None) when the batch has no image."""
    def cat(parts):
        if parts is None or isinstance(parts, torch.Tensor):
            return parts
        parts = [p for p in parts if p is not None and p.shape[0]]
        return torch.cat(parts) if parts else None

    return cat(pixel_values), cat(image_grid_thw)


class TowerClock:
    """Host seconds spent inside the vision tower (forward, and backward from the merger's
    output gradient to the patch embedding's weight gradient, the last one the tower makes):
    the tower's share of an update. Host time: on an asynchronous device it counts launches."""

    def __init__(self, visual):
        self.seconds, self._backward_start = 0.0, None
        weight = visual.patch_embed.proj.weight
        if weight.requires_grad:                 # a frozen tower has no backward to time
            visual.merger.register_full_backward_pre_hook(self._backward_started)
            weight.register_post_accumulate_grad_hook(self._backward_done)

    @contextlib.contextmanager
    def forward(self):
        start = time.perf_counter()
        yield
        self.seconds += time.perf_counter() - start

    def _backward_started(self, *_):
        self._backward_start = time.perf_counter()

    def _backward_done(self, *_):
        if self._backward_start is not None:
            self.seconds += time.perf_counter() - self._backward_start
            self._backward_start = None

    def take(self) -> float:
        """Seconds counted since the last take."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


class Qwen25VLModel(GPTModel):
    """One pipeline stage: the mrope GPTModel, plus the vision tower on the first stage.

    A GPTModel subclass so that every Megatron name, the pipeline hooks (`set_input_tensor`,
    shared embeddings) and the builder stay those of the text model; the vision tensors add
    `visual.*` under their HF names. Built by `build_qwen25_vl_model`.
    """

    family = "qwen2_5_vl"     # the vision family a checkpoint of it records (mcore_io)

    def __init__(self, *, hf_config, spec: ModelSpec, freeze_vision_tower: bool = False,
                 vision_seed: int = 0, **gpt_arguments):
        super().__init__(**gpt_arguments)
        self.hf_config, self.spec = hf_config, spec
        self.image_token_id = hf_config.image_token_id
        self.video_token_id = hf_config.video_token_id
        self._rope_index = _RopeIndex(hf_config)
        self.freeze_vision_tower = freeze_vision_tower
        if self.pre_process:
            # transformers initialises from the global RNG: a fixed seed gives every TP rank
            # (and DP replica) the same random tower, whatever Megatron did to the RNG.
            # perform_initialization False (a converter fills every tensor): no random init.
            # Built straight in the parameter dtype then, never touched (no memory in use).
            skip_init, build_dtype = contextlib.nullcontext(), {}
            if not self.config.perform_initialization:
                skip_init, build_dtype = no_init_weights(), {"dtype": self.config.params_dtype}
            with torch.random.fork_rng(devices=[]), skip_init:
                torch.manual_seed(vision_seed)
                visual = Qwen2_5_VisionTransformerPretrainedModel._from_config(
                    hf_config.vision_config, **build_dtype)
            self.visual = visual.to(dtype=self.config.params_dtype)
            for param in self.visual.parameters():
                param.average_gradients_across_tp_domain = True
                param.requires_grad_(not freeze_vision_tower)
            self.tower_clock = TowerClock(self.visual)

    # ------------------------------------------------------------------ inputs

    def image_slots(self, input_ids: torch.Tensor,
                    prompt_lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        """[B, S] bool: the `<|image_pad|>` tokens that take image features. With
        `prompt_lengths` (rows start with their prompt) only the prompt's: a pad the policy
        sampled in a response is text to vLLM (it places features at the prompt's placeholders
        only), so it is text here too, in positions and embeddings alike; so is a sampled
        `<|video_pad|>` (videos in prompts are not supported yet)."""
        prompt = torch.ones_like(input_ids, dtype=torch.bool)
        if prompt_lengths is not None:
            column = torch.arange(input_ids.shape[1], device=input_ids.device)
            prompt = column.unsqueeze(0) < prompt_lengths.to(input_ids.device).unsqueeze(1)
        if ((input_ids == self.video_token_id) & prompt).any():
            raise NotImplementedError("video inputs are not supported yet")
        return (input_ids == self.image_token_id) & prompt

    def mrope_position_ids(self, input_ids: torch.Tensor, image_grid_thw: Optional[torch.Tensor],
                           slots: Optional[torch.Tensor] = None) -> torch.Tensor:
        """[3, B, S] (temporal, height, width) positions, as transformers computes them: text
        tokens count on in all three; an image's tokens (`slots`, default every pad) take its
        grid coordinates. Rows are right-padded (data/rows/padded.py), so padding only
        follows the real tokens."""
        slots = self.image_slots(input_ids) if slots is None else slots
        positions, _ = self._rope_index.get_rope_index(input_ids, slots.long() * IMAGE,
                                                       image_grid_thw=image_grid_thw)
        return positions

    def _packed_slots_and_positions(self, input_ids: torch.Tensor, packed,
                                    prompt_lengths: Optional[torch.Tensor],
                                    image_grid_thw: Optional[torch.Tensor]):
        """A packed row [1, T] (data/rows/packed.py): image slots [1, T] and M-RoPE positions
        [3, 1, T] computed per sample, exactly as for that sample's own padded row, then laid
        back to back (Megatron's thd RoPE then takes each token's own frequencies)."""
        bounds = getattr(packed, "host_cu_seqlens", None) or packed.cu_seqlens_q.tolist()
        lengths = [b - a for a, b in zip(bounds, bounds[1:])]
        rows = torch.nn.utils.rnn.pad_sequence(list(input_ids[0].split(lengths)),
                                               batch_first=True)
        prompts = None
        if prompt_lengths is not None:   # the pad tail (its own entry) has no prompt
            prompts = torch.zeros(len(lengths), dtype=torch.long, device=input_ids.device)
            prompts[:len(prompt_lengths)] = prompt_lengths
        row_slots = self.image_slots(rows, prompts)
        positions = self.mrope_position_ids(rows, image_grid_thw, row_slots)
        keep = [slice(0, n) for n in lengths]
        slots = torch.cat([row_slots[i, k] for i, k in enumerate(keep)]).unsqueeze(0)
        return slots, torch.cat([positions[:, i, k] for i, k in enumerate(keep)], 1).unsqueeze(1)

    def embed(self, input_ids: torch.Tensor, pixel_values: Optional[torch.Tensor],
              image_grid_thw: Optional[torch.Tensor],
              slots: Optional[torch.Tensor] = None) -> torch.Tensor:
        """decoder_input [S(/TP under sequence parallel), B, H]: token embeddings with the
        vision tower's features in the image slots (default every `<|image_pad|>`), in order."""
        embeds = self.embedding(input_ids=input_ids, position_ids=None)   # [S, B, H], whole
        if pixel_values is not None:
            # Once per distinct picture: a prompt's n samples share it (models/distinct_images).
            pixels, grids, copy_of = distinct_images(pixel_values, image_grid_thw)
            with self.tower_clock.forward():
                features = self.visual(pixels.to(self.config.params_dtype),
                                       grid_thw=grids).pooler_output
            if copy_of is not None:
                features = repeat_features(features, grids, copy_of,
                                           self.visual.spatial_merge_size)
            slots = (input_ids == self.image_token_id if slots is None else slots).unsqueeze(-1)
            if int(slots.sum()) != features.shape[0]:
                raise ValueError(f"{int(slots.sum())} <|image_pad|> tokens for "
                                 f"{features.shape[0]} image features (grids "
                                 f"{image_grid_thw.tolist()})")
            # Batch-major like transformers: features fill sample 0's slots, then sample 1's.
            embeds = embeds.transpose(0, 1).masked_scatter(slots, features.to(embeds.dtype))
            embeds = embeds.transpose(0, 1).contiguous()
        if self.config.sequence_parallel:
            embeds = tensor_parallel.scatter_to_sequence_parallel_region(embeds)
        return embeds

    # ------------------------------------------------------------------ forward

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None, pixel_values: Images = None,
                image_grid_thw: Images = None, prompt_lengths: Optional[torch.Tensor] = None,
                **kwargs):
        """input_ids [B, S] (every stage: positions come from them); position_ids [3, B, S] or
        None (computed); attention_mask as GPTModel takes it (None: causal). Images per sample
        or in transformers' batch form (`batch_images`); only the first stage needs
        pixel_values, every stage needs image_grid_thw. prompt_lengths [B] (rows starting with
        their prompt): image features go to the prompt's pads only (`image_slots`). Returns
        what GPTModel returns."""
        pixel_values, image_grid_thw = batch_images(pixel_values, image_grid_thw)
        packed = kwargs.get("packed_seq_params")
        if packed is not None:
            slots, packed_positions = self._packed_slots_and_positions(
                input_ids, packed, prompt_lengths, image_grid_thw)
            position_ids = packed_positions if position_ids is None else position_ids
        else:
            slots = self.image_slots(input_ids, prompt_lengths)
        if position_ids is None:
            position_ids = self.mrope_position_ids(input_ids, image_grid_thw, slots)
        elif position_ids.dim() != 3:
            raise ValueError(f"position_ids {tuple(position_ids.shape)}: Qwen2.5-VL takes "
                             f"[3, B, S] multimodal positions (or None to compute them)")
        decoder_input = None
        if self.pre_process:
            decoder_input = self.embed(input_ids, pixel_values, image_grid_thw, slots)
        return super().forward(input_ids, position_ids, attention_mask,
                               decoder_input=decoder_input, **kwargs)


def build_qwen25_vl_model(hf_config, parallel: Parallelism, params_dtype: str = "fp32",
                          freeze_vision_tower: bool = False, make_vocab_size_divisible_by: int = 1,
                          vision_seed: int = 0, pre_process: Optional[bool] = None,
                          post_process: Optional[bool] = None,
                          perform_initialization: bool = True) -> Qwen25VLModel:
    """This rank's stage of a Qwen2.5-VL model of `hf_config`'s shape (a Qwen2_5_VLConfig),
    random-init (parallel_state must be initialised). freeze_vision_tower keeps the tower and
    its merger out of training: no gradients, so the optimizer never sees them.
    perform_initialization False leaves every tensor uninitialised (a converter's layout)."""
    spec = text_spec(hf_config, make_vocab_size_divisible_by=make_vocab_size_divisible_by)
    return build_gpt_model(
        spec, parallel, params_dtype, pre_process, post_process, model_class=Qwen25VLModel,
        family=Qwen25VLModel.family,
        model_kwargs=dict(position_embedding_type="mrope", hf_config=hf_config, spec=spec,
                          freeze_vision_tower=freeze_vision_tower, vision_seed=vision_seed,
                          # embed() scatters over sequence parallel once the images are in.
                          scatter_embedding_sequence_parallel=False),
        mrope_section=mrope_section(hf_config), perform_initialization=perform_initialization)


def vision_spec(hf_config, family: str = "qwen2_5_vl") -> VisionSpec:
    """The vision tower of a Qwen2_5_VLConfig (old and new config.json layouts alike:
    transformers normalises them), as the model spec describes towers."""
    v = hf_config.vision_config
    return VisionSpec(
        family=family, depth=v.depth, hidden_size=v.hidden_size,
        intermediate_size=v.intermediate_size, num_heads=v.num_heads,
        in_channels=v.in_channels, patch_size=v.patch_size,
        temporal_patch_size=v.temporal_patch_size, spatial_merge_size=v.spatial_merge_size,
        window_size=v.window_size, fullatt_block_indexes=tuple(v.fullatt_block_indexes),
        out_hidden_size=v.out_hidden_size)


class Qwen25VLFamily:
    """The Qwen2.5-VL family: the Qwen2 decoder (its TransformerConfig settings and layer
    spec, read by the builder through the spec's architecture) with mrope and the tower."""

    model_type = "qwen2_5_vl"
    features = Features(qkv_bias=True, multimodal=True, mrope=True)
    decoder = QWEN2
    model_class = Qwen25VLModel

    def config_class(self):
        from transformers import Qwen2_5_VLConfig

        return Qwen2_5_VLConfig

    def hf_config(self, spec: ModelSpec, torch_dtype: str = "float32",
                  bos_token_id: TokenIds = None, eos_token_id: TokenIds = None,
                  pad_token_id: Optional[int] = None, initializer_range: float = 0.02,
                  vision_token_ids: Optional[Mapping[str, int]] = None):
        """Qwen2_5_VLConfig: the decoder as text_config (mrope), the tower as vision_config."""
        missing = [k for k in VISION_TOKEN_KEYS if k not in (vision_token_ids or {})]
        if missing:
            raise ValueError(f"model {spec.name}: a VL config needs the tokenizer's {missing}")
        text = self.decoder.hf_config(
            dataclasses.replace(spec, vision=None, mrope_section=None), torch_dtype,
            bos_token_id, eos_token_id, pad_token_id, initializer_range).to_dict()
        keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "hidden_act",
                "max_position_embeddings", "rms_norm_eps", "bos_token_id", "eos_token_id",
                "pad_token_id", "initializer_range")
        text_config = {k: text[k] for k in keep}
        text_config.update(rope_theta=float(spec.rotary_base),
                           rope_scaling={"type": "mrope",
                                         "mrope_section": list(spec.mrope_section)})
        v = spec.vision
        vision_config = dict(depth=v.depth, hidden_size=v.hidden_size,
                             intermediate_size=v.intermediate_size, num_heads=v.num_heads,
                             out_hidden_size=v.out_hidden_size, patch_size=v.patch_size,
                             temporal_patch_size=v.temporal_patch_size,
                             spatial_merge_size=v.spatial_merge_size, window_size=v.window_size,
                             fullatt_block_indexes=list(v.fullatt_block_indexes),
                             in_channels=v.in_channels, hidden_act="silu")
        return self.config_class()(
            text_config=text_config, vision_config=vision_config,
            tie_word_embeddings=not spec.untie_embeddings_and_output_weights,
            architectures=["Qwen2_5_VLForConditionalGeneration"], dtype=torch_dtype,
            **{k: vision_token_ids[k] for k in VISION_TOKEN_KEYS})

    def spec_from_hf(self, config, name: str, make_vocab_size_divisible_by: int = 1
                     ) -> ModelSpec:
        """A Qwen2_5_VLConfig's spec: its text_config as the decoder (a Qwen2: the same
        checks), its vision_config as the vision part, the mrope sections from the text rope
        parameters."""
        text = config.text_config.to_dict()
        params = dict(text.get("rope_parameters") or {})
        section = params.pop("mrope_section", None)
        if section is None:
            raise ValueError(f"{name}: a Qwen2.5-VL text config without rope mrope_section")
        params.update(rope_type="default")
        text.pop("model_type", None)
        text.update(rope_parameters=params, tie_word_embeddings=config.tie_word_embeddings)
        decoder = self.decoder.spec_from_hf(self.decoder.config_class()(**text), name,
                                            make_vocab_size_divisible_by)
        return dataclasses.replace(decoder, mrope_section=tuple(section),
                                   vision=vision_spec(config))

    def text_spec(self, hf_config, name: str, make_vocab_size_divisible_by: int = 1
                  ) -> ModelSpec:
        return text_spec(hf_config, name, make_vocab_size_divisible_by)

    def vision_spec(self, hf_config) -> VisionSpec:
        return vision_spec(hf_config, self.model_type)

    def transformer_config_kwargs(self, spec: ModelSpec) -> dict:
        return self.decoder.transformer_config_kwargs(spec)

    def layer_spec(self, config):
        return self.decoder.layer_spec(config)

    def build(self, hf_config, parallel: Parallelism, params_dtype: str = "fp32", **kwargs
              ) -> Qwen25VLModel:
        return build_qwen25_vl_model(hf_config, parallel, params_dtype, **kwargs)


FAMILY = Qwen25VLFamily()
register_model_family(FAMILY)
