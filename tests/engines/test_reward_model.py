"""Reward model: transformers Qwen2ForSequenceClassification -> converter -> Megatron scores.

The reference is transformers' own pooled logits (last non-padding token), not our code. Two
spawns: one process converts HF -> mcore -> HF; two ranks score at TP1 (DP2), TP2 and PP2.
"""

import json

import pytest
import torch
import transformers

from mindrl.distributed import spawn_local

from support.reward_worker import convert, scores_at_layouts

pytestmark = pytest.mark.slow   # see tests/conftest.py

PAD = 0
B, P, R = 4, 5, 6
# TP, PP, sequence parallel (SP needs Apex / TE norms: it cannot run on this CPU stack)
# (tp, pp, sequence parallel[, token budget: packed rows, the score read at each sample's
# last real token inside the pack]); (1, 1) on 2 ranks is DP2.
LAYOUTS = [(1, 1, False), (2, 1, False), (1, 2, False), (1, 1, False, 20), (2, 1, True, 40),
           (1, 2, False, 20)]


def read_hf_tensors(directory):
    from safetensors.torch import load_file

    return {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(f).items()}


def make_reward_model(seed=0):
    config = transformers.Qwen2Config(
        vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
        max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=False,
        num_labels=1, pad_token_id=PAD, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    model = transformers.Qwen2ForSequenceClassification(config).eval()
    with torch.no_grad():   # non-trivial biases, norms and score: every tensor matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
        model.score.weight.normal_(0, 0.5)
    return model


def make_batch():
    g = torch.Generator().manual_seed(3)
    prompt_lengths, response_lengths = torch.tensor([5, 3, 1, 4]), torch.tensor([6, 2, 0, 1])
    prompt_mask = (torch.arange(P) >= P - prompt_lengths[:, None]).long()      # left-padded
    response_mask = (torch.arange(R) < response_lengths[:, None]).long()       # right-padded
    prompt_ids = torch.randint(3, 128, (B, P), generator=g) * prompt_mask
    response_ids = torch.randint(3, 128, (B, R), generator=g) * response_mask
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
            "response_ids": response_ids, "response_mask": response_mask}


def hf_scores(model, batch):
    """transformers on right-padded prompt ++ response rows: it pools at the last non-pad."""
    rows = [torch.cat([batch["prompt_ids"][b][batch["prompt_mask"][b].bool()],
                       batch["response_ids"][b][batch["response_mask"][b].bool()]])
            for b in range(B)]
    ids = torch.full((B, P + R), PAD)
    for b, row in enumerate(rows):
        ids[b, :len(row)] = row
    with torch.no_grad():
        return model(ids, attention_mask=(ids != PAD).long()).logits[:, 0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from mindrl.models.tokenizers import build_tokenizer

    root = tmp_path_factory.mktemp("reward")
    model, batch = make_reward_model(), make_batch()
    model.save_pretrained(root / "hf", safe_serialization=True)
    build_tokenizer("char").save_pretrained(root / "hf")
    spawn_local(convert, 1, root / "hf", root / "mg", root / "hf2")
    got = spawn_local(scores_at_layouts, 2, str(root / "mg"), batch, LAYOUTS)[0]
    return root, hf_scores(model, batch), got


def test_scores_match_transformers_at_tp1_tp2_pp2(world):
    _, expected, got = world
    report = []
    for layout in LAYOUTS:
        name = "TP{}PP{}{}".format(*layout[:2], "SP" if layout[2] else "")
        assert got[layout].shape == (B,)
        diff = (got[layout] - expected).abs().max().item()
        report.append(f"{name}: {diff:.2e}")
        assert diff <= 1e-5, f"{name}: max |mcore - transformers| = {diff}"
    print("max |score - transformers|:", "; ".join(report))
    assert expected.std() > 0.01   # the samples really score differently


def test_round_trip_is_bit_identical_and_has_no_lm_head(world):
    root = world[0]
    original, back = read_hf_tensors(root / "hf"), read_hf_tensors(root / "hf2")
    assert "score.weight" in original and "lm_head.weight" not in original
    assert sorted(original) == sorted(back)
    for key, tensor in original.items():
        assert torch.equal(back[key], tensor), key
    info = json.loads((root / "mg" / "release" / "mindrl_model.json").read_text())
    assert info["spec"]["head"] == "scalar"
    config = json.loads((root / "hf2" / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForSequenceClassification"]


def test_reward_checkpoint_refuses_a_vocab_head_model(world):
    message = world[2]["lm_error"]
    assert message and "head (lm / scalar): checkpoint scalar, model lm" in message
