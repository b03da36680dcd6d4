"""Layers per pipeline stage: Megatron's even split, or an uneven one (first / last stage's own
count, the rest even), as Megatron builds it (the builder's check: tests/models/
test_parallel_logits.py), with each refusal naming why."""

import dataclasses

import pytest

from mindrl.config.memory import _layer_params, params_per_device
from mindrl.config.model_spec import load_model_spec
from mindrl.config.pipeline_stages import split_problem, stage_layer_counts, stage_layer_range


def test_qwen3_235b_over_16_stages_as_mindspeed_rl_lays_it_out():
    # MindSpeed-RL: 96 layers with no-op layers 5 and 95 (1-based), 6 a stage; the same real
    # layers on each stage are 5 first, 6 on each of the 14 between, 5 last
    counts = stage_layer_counts(94, 16, 5, 5)
    assert counts == [5] + [6] * 14 + [5] and sum(counts) == 94
    assert stage_layer_range(94, 0, 16, 5, 5) == range(0, 5)
    assert stage_layer_range(94, 1, 16, 5, 5) == range(5, 11)
    assert stage_layer_range(94, 15, 16, 5, 5) == range(89, 94)


@pytest.mark.parametrize("args,counts", [
    ((8, 4, None, None), [2, 2, 2, 2]),
    ((3, 2, 1, None), [1, 2]),
    ((3, 2, None, 1), [2, 1]),
    ((7, 3, 1, None), [1, 3, 3]),
    ((7, 3, None, 3), [2, 2, 3]),
])
def test_counts(args, counts):
    assert stage_layer_counts(*args) == counts
    num_layers, pp, first, last = args
    ranges = [stage_layer_range(num_layers, s, pp, first, last) for s in range(pp)]
    assert [len(r) for r in ranges] == counts
    assert [layer for r in ranges for layer in r] == list(range(num_layers))


@pytest.mark.parametrize("args,words", [
    ((94, 16, None, None), "do not split 94 layers evenly"),
    ((4, 1, 2, None), "pipeline_model_parallel_size >= 2"),
    ((4, 2, 0, None), "at least 1"),
    ((4, 2, 4, None), "leave 0 for the 1 stages"),
    ((4, 2, 2, 1), "leave 1 for the 0 stages"),
    ((94, 16, 4, 5), "85 layers between the first and the last stage do not split evenly"),
])
def test_refusals_say_why(args, words):
    assert words in split_problem(*args)
    with pytest.raises(ValueError, match=words.split()[0]):
        stage_layer_counts(*args)


def test_the_memory_estimate_takes_the_largest_stage():
    # 10 layers over 4 stages as 1 + 4 + 4 + 1: a middle stage holds 4 layers and nothing
    # else, more than the ceiling of an even split (3) would say
    spec = dataclasses.replace(load_model_spec("tiny-qwen3"), num_layers=10)
    assert params_per_device(spec, 1, 4, 1, 1) == 4 * _layer_params(spec)
    assert params_per_device(spec, 1, 4, 1, 1) > params_per_device(spec, 1, 4)
