"""A tiny random Qwen2.5-VL in transformers and prompts with 0, 1 and 2 synthetic images:
the reference the Megatron family, the engine and the converter are checked against."""

import torch

VOCAB = 130
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 120, 121, 122, 123
PATCH, TEMPORAL_PATCH, MERGE = 14, 2, 2
# One patch's values, flattened as the HF image processor does.
PIXEL_ROW = 3 * TEMPORAL_PATCH * PATCH * PATCH
# Images per prompt: none, one, two of other sizes. Grids of 6 or 8 patches cross the 2 x 2
# merged-patch windows (window_size 56 = 4 patches) unevenly, so window padding is exercised.
PROMPT_GRIDS = [[], [(1, 6, 8)], [(1, 4, 4), (1, 8, 4)]]


def tiny_vl_config(tie_word_embeddings=True):
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, rope_theta=10000.0,
                         rope_scaling={"type": "mrope", "mrope_section": [8, 12, 12]},
                         bos_token_id=0, eos_token_id=1, pad_token_id=0),
        vision_config=dict(depth=4, hidden_size=128, intermediate_size=256, num_heads=2,
                           patch_size=PATCH, temporal_patch_size=TEMPORAL_PATCH,
                           spatial_merge_size=MERGE, window_size=56, fullatt_block_indexes=[1, 3],
                           out_hidden_size=256, in_channels=3),
        image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END, tie_word_embeddings=tie_word_embeddings)


def tiny_vl_model(seed=0):
    """A random transformers Qwen2_5_VLForConditionalGeneration; biases and norm scales are not
    0 / 1 (tiny.init_weights_, the merger's ln_q counted as a norm), so each tensor matters."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from mindrl.models.tiny import init_weights_

    model = Qwen2_5_VLForConditionalGeneration(tiny_vl_config()).eval()
    init_weights_(model, seed, std=0.05)    # the merger's ln_q counts as a norm there
    return model


def prompts(seed=0):
    """[{input_ids [L], pixel_values [patches, PIXEL_ROW] or None, image_grid_thw [k, 3] or
    None}] for PROMPT_GRIDS: text, then each image as vision_start, its pads, vision_end."""
    gen = torch.Generator().manual_seed(seed)
    text = lambda n: torch.randint(2, VISION_START, (n,), generator=gen).tolist()   # noqa: E731
    out = []
    for grids in PROMPT_GRIDS:
        ids = text(3)
        for t, h, w in grids:
            ids += [VISION_START] + [IMAGE_PAD] * (t * h * w // MERGE ** 2) + [VISION_END] + text(2)
        ids += text(7)
        patches = sum(t * h * w for t, h, w in grids)
        out.append({
            "input_ids": torch.tensor(ids),
            "pixel_values": torch.randn(patches, PIXEL_ROW, generator=gen) if grids else None,
            "image_grid_thw": torch.tensor(grids) if grids else None})
    return out


def padded_tokens(samples, multiple_of=2):
    """[B, S] right-padded with 0 (engines/sequences.py's layout), S a multiple of TP."""
    length = max(len(s["input_ids"]) for s in samples)
    length = -(-length // multiple_of) * multiple_of
    tokens = torch.zeros(len(samples), length, dtype=torch.long)
    for b, s in enumerate(samples):
        tokens[b, :len(s["input_ids"])] = s["input_ids"]
    return tokens


def megatron_schedule(model, samples, micro_batch_size, forward_only, on_output):
    """Megatron's pipeline schedule over the samples with their images, per micro batch."""
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    tp = ps.get_tensor_model_parallel_world_size()
    tokens = padded_tokens(samples, multiple_of=tp)
    micro = [{"tokens": tokens[i:i + micro_batch_size],
              "pixel_values": [s["pixel_values"] for s in samples[i:i + micro_batch_size]],
              "image_grid_thw": [s["image_grid_thw"] for s in samples[i:i + micro_batch_size]]}
             for i in range(0, len(samples), micro_batch_size)]

    def forward_step(data_iterator, stage):
        m = next(data_iterator)
        out = stage(m["tokens"], pixel_values=m["pixel_values"],
                    image_grid_thw=m["image_grid_thw"])
        return out, lambda output, non_loss_data=False: on_output(output, m)

    return get_forward_backward_func()(
        forward_step_func=forward_step, data_iterator=iter(micro), model=[model],
        num_microbatches=len(micro), seq_length=tokens.shape[1],
        micro_batch_size=micro_batch_size, forward_only=forward_only,
        collect_non_loss_data=forward_only)


def sharpen(model_dir, gain: float = 4.0) -> None:
    """Give a random tiny HF model folder a trained model's scale: norm weights 1 and matrices
    `gain` times larger (random init leaves std 0.02 everywhere, and near-uniform logits that
    hardly move with anything). Image features then weigh in the log-probs as in a real model,
    so a pixel-level processor difference or a tower change shows there."""
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    path = str(Path(model_dir) / "model.safetensors")
    state = load_file(path)
    for name, value in state.items():
        if "norm" in name or "ln_q" in name:
            state[name] = torch.ones_like(value)
        elif value.dim() >= 2:
            state[name] = value * gain
    save_file(state, path, metadata={"format": "pt"})
