"""Qwen3-MoE's Megatron model gives transformers' Qwen3MoeForCausalLM logits under both of
Megatron's token dispatchers a recipe may name (moe_token_dispatcher_type: allgather, the
default, and alltoall, whose CUDA side stream the CPU compatibility layer stands in for), at
TP1 and TP2 with sequence parallelism."""

import pytest
import torch

from mindrl.ckpt import mapping
from mindrl.config.model_spec import load_model_spec
from mindrl.distributed import spawn_local

from support.hf_reference import reference_hf_model
from support.moe_dispatch_worker import logits_by_dispatcher

pytestmark = pytest.mark.slow   # see tests/conftest.py


def test_both_dispatchers_equal_transformers_at_tp1_and_tp2_sp():
    spec = load_model_spec("tiny-qwen3-moe")
    hf = reference_hf_model(spec)
    tokens = torch.randint(0, spec.vocab_size, (4, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    layouts = [(tp, tp > 1, d) for d in ("allgather", "alltoall") for tp in (1, 2)]
    results = spawn_local(logits_by_dispatcher, 2, spec, full_by_tp, tokens, layouts)
    logits = {k: v for r in results for k, v in r.items()}
    assert set(logits) == set(layouts)
    for layout in layouts:
        diff = (logits[layout] - expected).abs().max().item()
        print("qwen3_moe", layout, "max |logits - transformers| =", diff)
        assert diff <= 1e-5, layout
