"""A Qwen2.5-VL rollout as the trainer makes it (data/vl_prompts -> vLLM on CPU -> rollout
merge -> the actor's log-prob pass): prompts with 0, 1 and 2 images, two downscaled by the
processor. vLLM's sampled log-probs equal the actor's within 1e-4; a trainer side on the PIL
image backend (pixel values up to 0.015 apart) is off by more than 1e-3, so the check would
catch a processor mismatch; ids an HF processor already expanded are caught before any
Megatron pass."""

import io

import pytest
import torch

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.data.batch import Batch
from mindrl.data.vl_prompts import VisionPrompts
from mindrl.distributed import spawn_local
from mindrl.models.processors import load_vl_processor
from mindrl.rollout.merge import PromptMismatch, rollout_prompts, with_rollout
from support.synthetic_images import synthetic_image
from support.tiny_vl import sharpen
from support.vl_rollout_worker import actor_log_probs

pytestmark = pytest.mark.slow   # a vLLM engine and a Megatron rank

N, MAX_TOKENS, TOL = 2, 12, 1e-4
# (height, width, seed). 300 x 200 and 448 x 448 are downscaled by the processor (to 252 x 168,
# 224 x 224), where image backends differ most; 84 x 56 keeps its size.
IMAGES = [[], [(300, 200, 4)], [(84, 56, 1), (448, 448, 3)]]
CONFIG = GenerateConfig(max_num_seqs=8, max_model_len=256, kv_cache_memory_bytes=32 * 2**20,
                        sampling_config=SamplingConfig(max_tokens=MAX_TOKENS, seed=0))


def png(spec) -> bytes:
    out = io.BytesIO()
    synthetic_image(*spec).save(out, format="PNG")
    return out.getvalue()


def rows(processor):
    out = []
    for specs in IMAGES:
        content = [{"type": "image"}] * len(specs) + [{"type": "text", "text": "Which?"}]
        text = processor.apply_chat_template([{"role": "user", "content": content}],
                                             add_generation_prompt=True, tokenize=False)
        out.append({"prompt_ids": processor.tokenizer(text)["input_ids"],
                    "images": [png(s) for s in specs]})
    return out


def step_batch(prompts, pad_id):
    return Batch.from_prompts(
        [p.prompt_ids for p in prompts], N, pad_id,
        rollout_prompt_ids=[p.rollout_ids for p in prompts], images=[p.images for p in prompts],
        pixel_values=[p.pixel_values for p in prompts],
        image_grid_thw=[p.image_grid_thw for p in prompts])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from transformers import Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from mindrl.engines.vllm_engine import VLLMEngine
    from mindrl.models.tiny import make_tiny_model

    model_dir = make_tiny_model("tiny-qwen25vl", "char", tmp_path_factory.mktemp("vl") / "m")
    sharpen(model_dir)
    processor = load_vl_processor(model_dir)
    vision = VisionPrompts(processor)
    prompts = [vision.prepare(r, f"row {i}") for i, r in enumerate(rows(processor))]
    pad_id = processor.tokenizer.pad_token_id
    engine = VLLMEngine(model_dir, CONFIG, seed=0, enable_prefix_caching=False,
                        mm_processor_cache_gb=0)
    batch = step_batch(prompts, pad_id)
    ids, images = rollout_prompts(batch)
    out = engine.generate(ids, N, images=images, mm_processor_kwargs=vision.mm_processor_kwargs)
    batch = with_rollout(batch, out, N)
    # The trainer side on transformers' PIL backend: same images, other pixel values.
    size = processor.image_processor.size
    pil = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessorPil(min_pixels=size["shortest_edge"],
                                                 max_pixels=size["longest_edge"]),
        tokenizer=processor.tokenizer, video_processor=processor.video_processor,
        chat_template=processor.chat_template)
    pil_prompts = [VisionPrompts(pil).prepare(r, f"row {i}")
                   for i, r in enumerate(rows(processor))]
    pil_batch = step_batch(pil_prompts, pad_id).add(**{k: batch[k] for k in (
        "response_ids", "response_mask", "rollout_log_probs", "finish_reason")})
    actor, actor_pil = spawn_local(actor_log_probs, 1, str(model_dir), [batch, pil_batch])[0]
    yield {"engine": engine, "batch": batch, "actor": actor, "actor_pil": actor_pil,
           "prompts": prompts, "vision": vision}
    # The in-process engine holds a torch.distributed world: a later in-process engine of
    # this test worker would refuse to start beside it.
    engine.close()


def test_vllm_ran_the_batch_s_expanded_prompt_ids(world):
    batch, prompts = world["batch"], world["prompts"]
    assert batch.prompts() == [p.prompt_ids for p in prompts]
    assert [len(p.prompt_ids) - len(p.rollout_ids) for p in prompts] == [0, 53, 5 + 63]


def test_vllm_log_probs_equal_the_actor_s_first_pass(world):
    batch = world["batch"]
    mask = batch["response_mask"].bool()
    diff = (world["actor"] - batch["rollout_log_probs"]).abs()[mask]
    print(f"max |vLLM - actor| over {int(mask.sum())} tokens: {diff.max():.2e}")
    assert diff.max() <= TOL


def test_a_pil_backend_trainer_side_is_caught_by_the_log_probs(world):
    batch = world["batch"]
    images = torch.tensor([bool(i) for i in batch["images"]])
    mask = batch["response_mask"].bool() & images.unsqueeze(1)
    diff = (world["actor_pil"] - batch["rollout_log_probs"]).abs()[mask]
    print(f"max |vLLM - actor on PIL pixels|: {diff.max():.2e}")
    assert diff.max() > 1e-3


def test_expanded_ids_sent_as_rollout_ids_stop_the_merge(world):
    """vLLM expands the pads again without an error; the merge names the prompt group."""
    prompts, vision = world["prompts"], world["vision"]
    batch = step_batch(prompts[1:2], world["batch"].pad_id)
    out = world["engine"].generate([prompts[1].prompt_ids], N, images=[prompts[1].images],
                                   mm_processor_kwargs=vision.mm_processor_kwargs)
    with pytest.raises(PromptMismatch, match="prompt group 0 of the step"):
        with_rollout(batch, out, N)


def test_prompts_with_images_generated_in_chunks_give_the_whole_generation(world):
    """Partial rollouts with pictures (rollout/partial.py): greedy, chunks of 2 tokens, each
    continuation sent as the one-pad-per-image ids plus the tokens so far with the same
    images, equal the whole generation's tokens and log-probs, and report vLLM's expanded
    prompt ids (what the merge checks against the batch)."""
    from mindrl.rollout.partial import generate_in_chunks

    batch, vision, engine = world["batch"], world["vision"], world["engine"]
    ids, images = rollout_prompts(batch)
    kwargs = {"mm_processor_kwargs": vision.mm_processor_kwargs, "temperature": 0.0}
    whole = engine.generate(ids, 1, images=images, **kwargs)
    chunked, versions = generate_in_chunks(engine.generate, ids, n=1, max_tokens=MAX_TOKENS,
                                           chunk=2, images=images, **kwargs)
    assert max(map(len, whole.response_token_ids)) > 4          # 3+ chunks for some
    assert chunked.response_token_ids == whole.response_token_ids
    assert chunked.finish_reasons == whole.finish_reasons
    assert chunked.prompt_token_ids == whole.prompt_token_ids == batch.prompts()
    worst = max(abs(a - b) for ours, theirs in zip(chunked.log_probs, whole.log_probs)
                for a, b in zip(ours, theirs))
    print(f"chunked vs whole, images: max |log-prob difference| {worst:.2e}")
    assert worst < 1e-5
    assert versions == [[0] * len(t) for t in whole.response_token_ids]
