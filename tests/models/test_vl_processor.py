"""The hub-free Qwen2.5-VL tokenizer and processor (mindrl/models/processors.py): a directory
with them and a tiny model loads offline in transformers, and vLLM on CPU generates from images
with transformers' own log-probabilities."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from mindrl.models.processors import (DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, IMAGE_PAD,
                                      VISION_END, VISION_START, VL_EXTRA_SPECIAL_TOKENS,
                                      write_vl_tokenizer_and_processor)
from mindrl.models.tokenizers import build_char_tokenizer
from support.synthetic_images import synthetic_image
from support import run_env

# (height, width, seed). 56x84 keeps its size: a 4 x 6 patch grid, 6 merged tokens. 84x56 is
# the transpose. 20x20 is under min_pixels (3136): up to 56x56, 4 x 4 patches, 4 tokens.
# 448x448 is 4x max_pixels (50176): down to 224x224, 16 x 16 patches, 64 tokens. 300x200 goes
# down to 252x168 (18 x 12 patches, 54 tokens): a downscale, where image-processor backends
# differ most (docs/platforms.md#qwen25-vl-on-cpu), so a backend mismatch fails the logprob check.
IMAGE_A, IMAGE_B, IMAGE_SMALL, IMAGE_BIG = (56, 84, 0), (84, 56, 1), (20, 20, 2), (448, 448, 3)
IMAGE_WIDE = (300, 200, 4)
GRIDS = {IMAGE_A: [1, 4, 6], IMAGE_B: [1, 6, 4], IMAGE_SMALL: [1, 4, 4], IMAGE_BIG: [1, 16, 16],
         IMAGE_WIDE: [1, 18, 12]}
PROMPTS = [  # (chat content parts, images in order)
    ([{"type": "image"}, {"type": "text", "text": "What is it?"}], [IMAGE_A]),
    ([{"type": "text", "text": "Compare "}, {"type": "image"}, {"type": "text", "text": " and "},
      {"type": "image"}, {"type": "text", "text": "."}], [IMAGE_B, IMAGE_SMALL]),
    ([{"type": "text", "text": "Read: "}, {"type": "image"}], [IMAGE_WIDE]),
]
MAX_TOKENS = 24
TOL = 1e-4
VLLM_SCRIPT = Path(__file__).parents[1] / "support" / "vllm_vl_generate.py"


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    """The tiny VL model as users make it (`cli/make_tiny_model.py --model tiny-qwen25vl
    --tokenizer char`), the ids its tokenizer gives, and its saved weights."""
    from safetensors.torch import load_file

    from mindrl.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("tiny_vl")
    out = subprocess.run([run_env.python(), str(Path(__file__).parents[2] / "cli" /
                                               "make_tiny_model.py"),
                          "--model", "tiny-qwen25vl", "--tokenizer", "char", "--out",
                          str(root / "model")], capture_output=True, text=True, check=True,
                         env=run_env.for_a_run())
    out = Path(out.stdout.strip())
    ids = write_vl_tokenizer_and_processor(root / "ids")
    # The factory is seeded: the same call gives the same weights.
    again = make_tiny_model("tiny-qwen25vl", "char", root / "again")
    state = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(state[k], t) for k, t in
               load_file(str(again / "model.safetensors")).items())
    return out, ids, state


@pytest.fixture(scope="module")
def processor(vl_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(vl_dir[0])


def chat_text(processor, content):
    return processor.apply_chat_template([{"role": "user", "content": content}],
                                         add_generation_prompt=True, tokenize=False)


def test_ids_and_tokenizer(vl_dir):
    from transformers import AutoTokenizer

    out, ids, _ = vl_dir
    tok = AutoTokenizer.from_pretrained(out)
    text_tok = build_char_tokenizer()
    assert len(tok) == ids["vocab_size"] == len(text_tok) + len(VL_EXTRA_SPECIAL_TOKENS) == 110
    # Qwen's 14 special tokens, each one id; the vision ones after the text tokenizer's ids.
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *VL_EXTRA_SPECIAL_TOKENS]
    assert [tok.encode(t) for t in specials] == [[i] for i in [0, 1, 2, *range(99, 110)]]
    assert (ids["vision_start_token_id"], ids["vision_end_token_id"], ids["image_token_id"],
            ids["video_token_id"]) == (105, 106, 108, 109)
    assert (ids["bos_token_id"], ids["eos_token_id"], ids["pad_token_id"]) == (0, 2, 0)
    text = "Q: 7*8?\nA: {56} ~ end."
    assert tok.encode(text) == text_tok.encode(text) and len(tok.encode(text)) == len(text)
    assert tok.decode(tok.encode(text)) == text
    # text-only chats render as the text tokenizer's ChatML (data code need not branch)
    chat = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    for msgs in (chat, [{"role": "system", "content": "Be brief."}] + chat):
        assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == \
            text_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    marked = f"a{VISION_START}{IMAGE_PAD}{VISION_END}b"
    assert tok.encode(marked) == [68, 105, 108, 106, 69]
    assert tok.decode(tok.encode(marked), skip_special_tokens=True) == "ab"


def test_directory_loads_offline(vl_dir, processor):
    from transformers import AutoModelForImageTextToText

    from mindrl.ckpt.mapping import hf_disk_name

    out, ids, state = vl_dir
    assert type(processor).__name__ == "Qwen2_5_VLProcessor"
    image_processor = processor.image_processor
    assert (image_processor.size["shortest_edge"], image_processor.size["longest_edge"]) == (
        DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS)
    assert (image_processor.patch_size, image_processor.merge_size,
            image_processor.temporal_patch_size) == (14, 2, 2)
    # the torchvision backend, as vLLM uses (pixel values differ by up to 0.015 with PIL's)
    assert type(image_processor).__name__ == "Qwen2VLImageProcessor"
    model = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    loaded = {hf_disk_name(k): v for k, v in model.state_dict().items()}
    # tied embeddings: the file has no lm_head.weight, the loaded model shows it
    assert state.keys() <= loaded.keys() and set(loaded) - set(state) == {"lm_head.weight"}
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    config = model.config            # the factory gave the config the tokenizer's ids
    assert (config.image_token_id, config.video_token_id, config.vision_start_token_id,
            config.vision_end_token_id) == (ids["image_token_id"], ids["video_token_id"],
                                            ids["vision_start_token_id"],
                                            ids["vision_end_token_id"])


def test_processor_expands_each_image_to_its_grid(processor):
    text = chat_text(processor, PROMPTS[1][0][:2] + [{"type": "image"}, {"type": "image"}])
    assert text.count(f"{VISION_START}{IMAGE_PAD}{VISION_END}") == 3
    images = [IMAGE_B, IMAGE_SMALL, IMAGE_BIG]
    inputs = processor(text=[text], images=[synthetic_image(*i) for i in images],
                       return_tensors="pt")
    assert inputs["image_grid_thw"].tolist() == [GRIDS[i] for i in images]
    patches = sum(t * h * w for t, h, w in (GRIDS[i] for i in images))
    assert tuple(inputs["pixel_values"].shape) == (patches, 3 * 2 * 14 * 14)
    ids = inputs["input_ids"][0].tolist()
    # each image: vision_start, t*h*w/4 pads, vision_end, in prompt order
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == 105:
            j = ids.index(106, i)
            assert set(ids[i + 1:j]) == {108}
            runs.append(j - i - 1)
            i = j
        i += 1
    assert runs == [6, 4, 64]
    assert inputs["mm_token_type_ids"][0].sum().item() == 74


@pytest.mark.slow
def test_vllm_generates_from_images_with_transformers_logprobs(vl_dir, processor):
    from transformers import AutoModelForImageTextToText

    out = vl_dir[0]
    texts = [chat_text(processor, content) for content, _ in PROMPTS]
    tok = processor.tokenizer
    requests = [{"prompt_token_ids": tok.encode(t), "images": [list(i) for i in imgs]}
                for t, (_, imgs) in zip(texts, PROMPTS)]
    assert [r["prompt_token_ids"].count(108) for r in requests] == [1, 2, 1]  # one per image
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS="1")
    done = subprocess.run([run_env.python(), str(VLLM_SCRIPT), str(out), json.dumps(requests),
                           str(MAX_TOKENS)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])

    model = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32).eval()
    diffs = []
    for text, (_, imgs), got in zip(texts, PROMPTS, report["results"]):
        inputs = processor(text=[text], images=[synthetic_image(*i) for i in imgs],
                           return_tensors="pt")
        assert inputs["image_grid_thw"].tolist() == [GRIDS[i] for i in imgs]
        prompt = inputs["input_ids"][0].tolist()
        # vLLM expanded the single pads exactly as the HF processor does
        assert got["engine_prompt_ids"] == prompt
        assert len(got["tokens"]) == MAX_TOKENS
        new = torch.tensor([got["tokens"]])
        kw = dict(inputs, input_ids=torch.cat([inputs["input_ids"], new], 1),
                  mm_token_type_ids=torch.cat([inputs["mm_token_type_ids"],
                                               torch.zeros_like(new)], 1))
        kw["attention_mask"] = torch.ones_like(kw["input_ids"])
        with torch.no_grad():
            logits = model(**kw).logits[0, len(prompt) - 1:-1]
        logprobs = torch.log_softmax(logits.float(), -1)
        assert logprobs.argmax(-1).tolist() == got["tokens"]       # greedy on both sides
        expected = logprobs[torch.arange(MAX_TOKENS), new[0]]
        diffs.append((expected - torch.tensor(got["logprobs"])).abs().max().item())
    print(f"vLLM vs transformers max |logprob diff| per prompt: {diffs}; "
          f"vLLM batched: {report['tokens_per_s']:.0f} tokens/s ({report['batch_tokens']} tokens)")
    assert max(diffs) <= TOL


def test_load_vl_processor_checks_files_class_and_backend(vl_dir, tmp_path):
    """The one loader both sides use: torchvision backend accepted; a directory without
    processor files and a PIL-backend processor are refused naming the file / the backend."""
    from transformers import Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from mindrl.models.processors import (ProcessorError, build_vl_processor,
                                          check_vl_processor, load_vl_processor)

    assert load_vl_processor(vl_dir[0]).image_processor.backend == "torchvision"
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ProcessorError, match="preprocessor_config.json"):
        load_vl_processor(tmp_path)
    ours = build_vl_processor()
    pil = Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessorPil(
        min_pixels=DEFAULT_MIN_PIXELS, max_pixels=DEFAULT_MAX_PIXELS),
        tokenizer=ours.tokenizer, video_processor=ours.video_processor,
        chat_template=ours.chat_template)
    with pytest.raises(ProcessorError, match="'pil' backend"):
        check_vl_processor(pil, "trainer")
