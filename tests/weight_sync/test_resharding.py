"""Resharding Megatron (TP2, PP2, TP2xPP2) into vLLM by every transport: vLLM's logprobs
equal Megatron's.

One spawn of 4 ranks runs every layout against one vLLM hosted by rank 0; the tests below
read its results. Layouts in a world of 4: TP2 (x DP2), PP2 (x DP2), TP2 x PP2.
"""

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM

from mindrl.ckpt import mapping
from mindrl.config.schema import GenerateConfig, SamplingConfig
from mindrl.distributed import spawn_local
from mindrl.config.model_spec import load_model_spec
from mindrl.models.tiny import make_tiny_model
from mindrl.weight_sync.plan import plan_buckets, plan_units

from support.reshard_worker import sync_layouts

pytestmark = pytest.mark.slow   # see tests/conftest.py

LAYOUTS = [(2, 1), (1, 2), (2, 2)]
PROMPTS = [[40, 41, 42, 43, 44, 45], [50, 60, 70], [7, 8, 9, 10, 11, 12, 13, 14]]
TOL = 1e-4


@pytest.fixture(scope="module")
def spec():
    # Megatron pads the vocabulary (128 -> 129 / 132 rows): the sync must cut it again.
    return dataclasses.replace(load_model_spec("tiny-qwen2"), make_vocab_size_divisible_by=3)


@pytest.fixture(scope="module")
def run(spec, tmp_path_factory):
    root = tmp_path_factory.mktemp("reshard")
    vllm_dir = make_tiny_model("tiny-qwen2", "char", root / "vllm", seed=0)
    # Each layout trains from weights vLLM has never seen: a sync that did nothing would fail.
    layout_dirs = [str(make_tiny_model("tiny-qwen2", "char", root / f"layout{i}", seed=10 + i))
                   for i in range(len(LAYOUTS))]
    gen_cfg = GenerateConfig(max_num_seqs=16, max_model_len=128,
                             kv_cache_memory_bytes=32 * 2**20,
                             sampling_config=SamplingConfig(max_tokens=12, temperature=1.0))
    fulls = [mapping.full_mcore_from_hf(AutoModelForCausalLM.from_pretrained(d).state_dict(),
                                        spec, tp) for d, (tp, _) in zip(layout_dirs, LAYOUTS)]
    return spawn_local(sync_layouts, 4, spec, str(vllm_dir), layout_dirs, fulls, LAYOUTS,
                       PROMPTS, gen_cfg)[0]


def test_plan_buckets_bound_size_and_keep_modules_whole(spec):
    units = plan_units(spec, pp_size=2)
    assert [(u.rule, u.layer) for u in units] == list(mapping.iter_rules(spec))
    assert {u.stage for u in units if u.layer is not None and u.layer < 1} == {0}
    assert {u.stage for u in units if u.layer == 1} == {1}
    limit = 40_000
    buckets = plan_buckets(units, limit)
    assert [u for b in buckets for u in b] == units
    for b in buckets:
        assert sum(u.numel for u in b) <= limit or len({u.module for u in b}) == 1
    modules = [{u.module for u in b} for b in buckets]
    for i, first in enumerate(modules):
        for later in modules[i + 1:]:
            assert not first & later, "a module was split across buckets"


@pytest.mark.parametrize("tp", [1, 2])
def test_write_shard_places_every_rank_like_gather_then_unfuse(spec, tp):
    """The shared-memory path: each rank writes its shard straight into the HF parts; together
    they must equal mcore_to_hf(gather(shards)) for every rule (padded vocab included)."""
    for rule, layer in mapping.iter_rules(spec):
        if layer not in (None, 0):
            continue
        shapes = mapping.expected_hf_shapes(rule, spec)
        parts = [torch.randn(s) for s in shapes]
        rows = -(-spec.vocab_size // (spec.make_vocab_size_divisible_by * tp)) \
            * spec.make_vocab_size_divisible_by * tp
        full = mapping.hf_to_mcore(rule, parts, spec, rows)
        shards = [mapping.shard(rule, full, r, tp) for r in range(tp)]
        ref = mapping.mcore_to_hf(rule, mapping.gather(rule, shards), spec, layer)
        dests = [torch.full(s, float("nan")) for s in shapes]
        for r in range(tp):
            mapping.write_shard(rule, spec, shards[r], r, tp, dests)
        for (name, want), got in zip(ref.items(), dests):
            assert torch.equal(want, got), name


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: f"tp{l[0]}pp{l[1]}")
def test_vllm_logprobs_equal_megatron_after_sync(run, layout):
    res = run["layouts"][layout]
    assert res["tokens"] > 0
    assert res["diff_before"] <= TOL, res["diff_before"]
    assert res["sync"].buckets > 1 and res["sync"].tensors == 26


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: f"tp{l[0]}pp{l[1]}")
def test_vllm_follows_an_optimizer_step(run, layout):
    res = run["layouts"][layout]
    assert res["diff_new_vs_old"] > 0.05, "the step barely moved the model: test is weak"
    assert res["diff_rescored_vs_new"] <= TOL, res["diff_rescored_vs_new"]
    assert res["diff_rescored_vs_old"] > 0.05
    assert res["diff_after"] <= TOL, res["diff_after"]


@pytest.mark.parametrize("label,names", [("gate<->up", ("gate_proj", "up_proj")),
                                         ("k<->v", ("k_proj", "v_proj"))])
def test_wrong_mapping_entry_is_caught_by_fingerprint(run, label, names):
    message = run["wrong_entries"][label]
    assert message is not None, f"{label} swap went unnoticed"
    assert "mindrl/ckpt/mapping/" in message
    for name in names:
        assert f".{name}.weight" in message


def test_cpu_loaders_in_use(run):
    assert run["modes"] == ("packed", "in_place")


def test_each_sync_names_its_transport(run):
    assert {res["sync"].transport for res in run["layouts"].values()} == {"shm_bucket"}
    assert run["shared"]["sync"].transport == "shared_weights"
    assert run["collective"]["sync"].transport == "collective"


def _follows_megatron(res):
    """vLLM samples what Megatron scores, before and after an update that moved the policy."""
    assert res["sync"].tensors == 26
    assert res["diff_before"] <= TOL, res["diff_before"]
    assert res["diff_new_vs_old"] > 0.05
    assert res["diff_rescored_vs_new"] <= TOL and res["diff_rescored_vs_old"] > 0.05
    assert res["diff_after"] <= TOL, res["diff_after"]


def test_the_collective_transport_follows_megatron(run):
    """Full tensors gathered on the host (the GPU / other-node path), TP2 x PP2."""
    assert run["collective"]["sync"].buckets > 1
    _follows_megatron(run["collective"])


def test_shared_weights_written_by_the_ranks_follow_megatron(run):
    """vLLM's weights in shared memory, written directly by TP2 x PP2 ranks: same checks."""
    assert run["shared"]["sync"].buckets == 1
    _follows_megatron(run["shared"])


def test_a_deferred_check_returns_pending_and_its_verdict_comes_at_settle(run):
    deferred = run["deferred"]
    assert deferred["pending"]                       # the honest sync's verdict waited later
    assert "v_proj" in deferred["error"] and "differ" in deferred["error"]


def test_a_failed_direct_write_names_the_tensor_and_is_fatal(run):
    failure = run["shared_failure"]
    assert "linear_fc2" in failure["error"] and "down_proj" in failure["error"]
    assert "unusable" in failure["after"]


def test_a_failed_bucket_load_names_the_tensor_and_is_fatal(run):
    """vLLM fails loading a bucket while the ranks fill the next one (two buffers)."""
    failure = run["bucket_failure"]
    assert "v_proj.weight" in failure["error"], failure
    assert "unusable" in failure["after"]
