"""Weight sync into a Qwen2.5-VL vLLM engine through the real path (a Megatron rank's shards
-> shared-memory bucket or collective buckets -> the engine's load), one Megatron world and
one set of engines for every case (tests/support/vl_sync_worker.py):

(a) the same image before and after a sync of a perturbed tower (the merger's last weight x
    1.1): log-probs equal a fresh engine started on the perturbed checkpoint and differ from
    the pre-sync run, and back again after a sync of the original, on each load path (shm
    bucket -> load_weights_from_bucket, collective -> load_weights), prefix caching on and
    off. A stale encoder or prefix cache would return the pre-sync log-probs.
(b) three verified syncs in a row with buckets smaller than one vision MLP tensor, at infer
    TP1 and TP2 (vLLM's mp executor); TP2 then samples as TP1.
(c) q and k swapped inside the first vision block's qkv on the way in: the verified sync
    fails naming exactly that tensor, at TP1 and TP2.
"""

import dataclasses
import io
import shutil

import pytest

from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.distributed import spawn_local
from support.synthetic_images import synthetic_image
from support.tiny_vl import sharpen
from support.vl_sync_worker import PERTURBED, SWAPPED, vl_syncs

pytestmark = pytest.mark.slow   # four vLLM engines and a Megatron rank (about 2 min)

TP1 = GenerateConfig(max_num_seqs=4, max_model_len=256, kv_cache_memory_bytes=32 * 2**20,
                     sampling_config=SamplingConfig(max_tokens=8, seed=0, ignore_eos=True))
TP2 = dataclasses.replace(TP1, infer_tensor_parallel_size=2)
SAME, MOVED = 1e-5, 1e-3


def perturb(path):
    from safetensors.torch import load_file, save_file

    state = load_file(path)
    state[PERTURBED] = state[PERTURBED] * 1.1
    save_file(state, path, metadata={"format": "pt"})


def request(model_dir):
    """One prompt with one image (ONE <|image_pad|>, vLLM expands it)."""
    from mindrl.models.processors import load_vl_processor

    processor = load_vl_processor(model_dir)
    content = [{"type": "image"}, {"type": "text", "text": "What?"}]
    text = processor.apply_chat_template([{"role": "user", "content": content}],
                                         add_generation_prompt=True, tokenize=False)
    image = io.BytesIO()
    synthetic_image(84, 56, 1).save(image, format="PNG")
    return {"ids": processor.tokenizer(text)["input_ids"], "images": [image.getvalue()],
            "mm_processor_kwargs": None}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from mindrl.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("vl_sync")
    model_dir = make_tiny_model("tiny-qwen25vl", "char", root / "base")
    sharpen(model_dir)
    perturbed_dir = root / "perturbed"
    shutil.copytree(model_dir, perturbed_dir)
    perturb(str(perturbed_dir / "model.safetensors"))
    out = spawn_local(vl_syncs, 1, str(model_dir), str(perturbed_dir), request(model_dir),
                      TP1, TP2)[0]
    print("vl sync:", {k: v for k, v in out.items() if k != "swapped"})
    return out


@pytest.mark.parametrize("engine", ["prefix_on", "prefix_off"])
def test_a_synced_tower_is_what_the_next_image_sees(run, engine):
    rows = run[engine]
    assert rows["repeat"] == 0.0          # a cached image gives the same numbers again
    assert run["reference_vs_base"] > MOVED
    for step, row in rows.items():
        if step == "repeat":
            continue
        assert row["same_tokens"], (step, row)
        assert row["vs_target"] <= SAME, (step, row)
        assert row["vs_other"] > MOVED, (step, row)


def test_three_verified_syncs_in_small_buckets_at_tp1_and_tp2(run):
    assert run["tp2_qkv_shape"] == (384, 128)       # q, k and v rows: the HF tensor's shape
    assert len(run["rounds"]) == 3
    for stats in run["rounds"]:
        for label in ("prefix_on", "tp2"):
            # Every tensor sent, in more buckets than modules of the tower's blocks.
            assert stats[label]["tensors"] == stats["prefix_on"]["tensors"]
            assert stats[label]["buckets"] > 4 * 3
    assert run["tp1_vs_tp2"] <= 1e-4


@pytest.mark.parametrize("engine", ["prefix_on", "tp2"])
def test_swapped_q_and_k_in_the_vision_qkv_fail_the_verified_sync_by_name(run, engine):
    message = run["swapped"][engine]
    assert message is not None
    assert message.startswith("1 vLLM tensor(s) differ"), message
    assert SWAPPED in message
