"""bench/bench_e2e.py's arithmetic and its MindRL recipes, without running either framework:
the floor on hand-computed lengths, the length summary on a hand list, the machine's flags,
and every shape's overrides through MindRL's own validation."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from bench.common.flops import FlopModel
from bench.common.machine import cpu_facts
from bench.common.mindrl_runs import mindrl_overrides, mindrl_step
from bench.common.steps import completion_distribution

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_e2e.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_e2e", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_the_floor_counts_each_sample_at_its_own_length(bench):
    flops = FlopModel(weights=10, layers=2, q_width=4)
    # One forward over L tokens: 2 x 10 x L + 4 x 4 x 2 x L(L+1)/2 = 20 L + 16 L(L+1).
    # L = 3: 60 + 192 = 252; L = 5: 100 + 480 = 580. Generate (1x) + train (3x): 4 x 832.
    assert flops.forward(3) == 252 and flops.forward(5) == 580
    assert flops.step([3, 5]) == 3328
    # Two samples of the mean length (4) cost less: the attention term is convex in L.
    assert flops.step([4, 4]) == 4 * 2 * (80 + 320) < flops.step([3, 5])


def test_the_75m_model_multiplies_its_hand_counted_weights(bench):
    flops = FlopModel.of("bench-qwen2-75m")
    # hidden 768, 12 heads x 64, 4 KV heads x 64, ffn 2048, 12 layers, vocab 128 (LM head):
    # per layer 768 x (768 + 512) + 768 x 768 + 3 x 768 x 2048 = 6,291,456.
    assert (flops.weights, flops.layers, flops.q_width) == (12 * 6_291_456 + 128 * 768, 12, 768)


def test_length_summary_on_hand_lists(bench):
    s = bench.length_summary(range(1, 11))
    assert (s["mean"], s["p50"], s["max"], s["samples"]) == (5.5, 5.5, 10.0, 10)
    assert math.isclose(s["p90"], 9.1)          # between the 9th and 10th of 10 values
    s = bench.length_summary([7, 1, 4])         # order does not matter
    assert (s["mean"], s["p50"], s["max"]) == (4.0, 4.0, 7.0)
    assert math.isclose(s["p90"], 6.4)          # 4 + 0.8 x (7 - 4)
    assert bench.length_summary([])["p50"] is None


def test_completion_distribution_from_samples_or_from_step_statistics(bench):
    trl_steps = [{"completion_lengths": [1, 2, 3]}, {"completion_lengths": [10]}]
    d = completion_distribution(trl_steps)
    assert (d["mean"], d["p50"], d["max"], d["samples"]) == (4.0, 2.5, 10.0, 4)
    row = {"timing_s/step": 2.0, "timing_s/gen": 1.0, "timing_s/reward": 0.1,
           "timing_s/old_log_prob": 0.0, "timing_s/ref": 0.0, "timing_s/update_actor": 0.5,
           "timing_s/reshard": 0.2, "response_length/mean": 60.0, "response_length/max": 200.0,
           "prompt_length/mean": 10.0, "critic/score/mean": 0.25}
    step = mindrl_step(row, completions=4)
    assert step["seq_lengths"] == [70.0] * 4 and step["completion_tokens"] == 240.0
    other = mindrl_step({**row, "response_length/mean": 40.0, "response_length/max": 300.0},
                        completions=4)
    d = completion_distribution([step, other])
    assert (d["mean"], d["max"], d["p50"], d["p90"]) == (50.0, 300.0, None, None)
    logged = [mindrl_step({**row, "response_length/p50": p50, "response_length/p90": 99.0},
                          completions=4) for p50 in (30.0, 50.0)]
    d = completion_distribution(logged)
    assert (d["p50"], d["p90"]) == (40.0, 99.0)


def test_cpu_facts_read_the_model_and_the_bf16_flags(bench):
    text = ("processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f "
            "avx512_bf16 amx_tile amx_bf16\n\nprocessor\t: 1\nmodel name\t: other\n")
    facts = cpu_facts(text)
    assert facts == {"cpu_model": "AMD EPYC 9R14", "avx512f": True, "avx512_bf16": True,
                     "amx": True, "amx_flags": ["amx_bf16", "amx_tile"]}
    plain = cpu_facts("model name : X\nflags : fpu avx2\n")
    assert (plain["avx512f"], plain["avx512_bf16"], plain["amx"]) == (False, False, False)
    fp32 = [s for s in bench.SHAPES.values() if not s.bf16]
    machine = bench.machine_info(fp32)
    assert machine["bf16"] is False and machine["threads_per_process"]["natural"] == 2
    assert bench.machine_info([*fp32, bench.SHAPES["75m_bf16"]])["bf16"] is True


def _shapes(bench):
    smoke = bench.shrink(bench.SHAPES["natural"], steps=2, prompts=2, n=4)
    return [*bench.SHAPES.values(), smoke]


def test_every_shape_passes_mindrl_validation_packed_with_a_token_budget(bench, tmp_path):
    from mindrl.config import ClusterResources, load_recipe

    for shape in _shapes(bench):
        run = load_recipe("grpo_tiny_cpu", mindrl_overrides(shape, tmp_path),
                          cluster=ClusterResources("cpu", 2))
        mt, rl, gen = run.megatron_training, run.rl_config, run.generate_config
        assert run.active_roles == ["actor"], shape.name          # kl_coef 0: no reference
        assert mt.pack_sequences and rl.actor_forward_micro_batch_size is None
        assert run.actor_config.max_tokens_per_micro_batch == shape.token_budget \
            == shape.micro_batch * (24 + shape.max_tokens)
        assert mt.seq_length == gen.max_model_len == 24 + shape.max_tokens
        assert gen.sampling_config.max_tokens == shape.max_tokens
        assert shape.completions % shape.micro_batch == 0
        assert set(shape.frameworks) <= {"mindrl", *bench.TRL_VARIANTS}
        assert mt.bf16 is shape.bf16, shape.name
    natural = bench.SHAPES["natural"]
    assert (natural.max_tokens, natural.exact_length, natural.steps) == (1024, False, 6)
    assert "+generate_config.sampling_config.ignore_eos=false" in mindrl_overrides(
        natural, tmp_path)


def test_the_bf16_shape_is_the_75m_shape_in_bf16_with_its_own_keys(bench):
    fp32, bf16 = bench.SHAPES["75m"], bench.SHAPES["75m_bf16"]
    assert (bf16.bf16, fp32.bf16) == (True, False)
    assert (bf16.prompts, bf16.n, bf16.max_tokens, bf16.exact_length, bf16.micro_batch) == \
        (fp32.prompts, fp32.n, fp32.max_tokens, fp32.exact_length, fp32.micro_batch)

    def figures(speedup, ratio):
        return {"speedup_vs_trl": speedup, "step_s_over_flop_floor": ratio,
                "trl_step_s_over_flop_floor": 2 * ratio, "timed_steps": 5,
                "final_reward_mindrl": 0.1, "final_reward_trl": 0.2, "matmul_gflops": 300.0,
                **{f"{fw}_step_s_{stat}": 1.0 for fw in ("mindrl", "trl")
                   for stat in ("min", "median")}}

    line = bench.headline({"75m": figures(1.1, 1.4), "75m_bf16": figures(1.7, 1.25)}, {})
    assert (line["speedup_vs_trl"], line["step_s_over_flop_floor"]) == (1.1, 1.4)
    assert (line["speedup_vs_trl_bf16"], line["step_s_over_flop_floor_bf16"],
            line["trl_step_s_over_flop_floor_bf16"], line["matmul_gflops_bf16"]) == \
        (1.7, 1.25, 2.5, 300.0)
    assert "speedup_vs_trl_bf16" not in bench.headline({"75m": figures(1.1, 1.4)}, {})
    alone = bench.headline({"75m_bf16": figures(1.7, 1.25)}, {})   # no fp32 key from bf16
    assert alone["speedup_vs_trl_bf16"] == 1.7 and "speedup_vs_trl" not in alone


def test_a_bf16_shape_is_refused_where_the_cpu_has_no_bf16(bench, monkeypatch):
    from mindrl import device

    monkeypatch.setattr(device, "bf16_supported", lambda: False)
    bench.refuse_bf16_without_the_instructions([bench.SHAPES["75m"]])      # fp32: fine
    with pytest.raises(SystemExit, match=r"\['75m_bf16'\] run in bf16.*run the fp32 shape 75m"):
        bench.refuse_bf16_without_the_instructions([bench.SHAPES["75m_bf16"]])
