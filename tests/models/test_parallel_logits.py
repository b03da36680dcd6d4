"""The same full weights give the same logits at TP1, TP2 and PP2 (gloo), and equal transformers'."""

import dataclasses

import pytest
import torch

from mindrl.ckpt import mapping
from mindrl.distributed import spawn_local
from mindrl.config.model_spec import load_model_spec

from support.hf_reference import reference_hf_model
from support.parallel_logits_worker import logits_at_layouts

pytestmark = pytest.mark.slow   # see tests/conftest.py


@pytest.mark.parametrize("model_name,vocab,divisible", [
    ("tiny-qwen2", 126, 4),    # tied embeddings, qkv bias, 2 query groups, padded vocab
    ("tiny-llama", 128, 1),    # untied, no bias, 1 query group
    ("tiny-qwen3", 128, 1),    # q/k norms, no bias, head dim 64 apart from hidden / heads
])
def test_tp_pp_logits_match_each_other_and_transformers(model_name, vocab, divisible):
    spec = dataclasses.replace(load_model_spec(model_name), vocab_size=vocab,
                               make_vocab_size_divisible_by=divisible)
    hf = reference_hf_model(spec)
    tokens = torch.randint(0, vocab, (4, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
    hf_sd = hf.state_dict()
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf_sd, spec, tp) for tp in (1, 2)}
    layouts = [(1, 1), (2, 1), (1, 2)]
    results = spawn_local(logits_at_layouts, 2, spec, full_by_tp, tokens, layouts)
    logits = {k: v for r in results for k, v in r.items()}
    assert set(logits) == set(layouts)
    for layout in layouts[1:]:
        diff = (logits[layout] - logits[(1, 1)]).abs().max().item()
        assert diff <= 1e-6, f"{layout} vs TP1: {diff}"
    diff_hf = (logits[(1, 1)] - expected).abs().max().item()
    print(model_name, "max |TP1 - transformers| =", diff_hf)
    assert diff_hf <= 1e-5, f"TP1 vs transformers: {diff_hf}"


def test_uneven_pipeline_stages_give_the_same_logits():
    # A 3-layer tiny Qwen3-MoE on 2 stages: 1 + 2 and 2 + 1 layers (an uneven split, as
    # Qwen3-235B-A22B's 94 layers over 16 stages), each stage's weights from the checkpoint
    # tables' split and the sync plan's names checked against the built stage (worker).
    spec = dataclasses.replace(load_model_spec("tiny-qwen3-moe"), num_layers=3)
    hf = reference_hf_model(spec)
    tokens = torch.randint(0, spec.vocab_size, (4, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf(tokens).logits
    full = {1: mapping.full_mcore_from_hf(hf.state_dict(), spec, 1)}
    layouts = [(1, 1), (1, 2, 1, None), (1, 2, None, 1), (1, 2, 2, 1)]
    results = spawn_local(logits_at_layouts, 2, spec, full, tokens, layouts)
    logits = {k: v for r in results for k, v in r.items()}
    assert set(logits) == set(layouts)
    for layout in layouts[1:]:
        diff = (logits[layout] - logits[(1, 1)]).abs().max().item()
        assert diff <= 1e-6, f"{layout} vs PP1: {diff}"
    assert (logits[(1, 1)] - expected).abs().max().item() <= 1e-5
