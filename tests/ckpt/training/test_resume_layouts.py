"""A training checkpoint saved at one TP/PP layout resumes at another: same weights, same Adam
moments (gathered to full tensors), same losses on the next batches. One spawn of two ranks
covers every change (each spawn costs ~10 s of imports)."""

import dataclasses

import pytest

from mindrl.ckpt import mapping
from mindrl.distributed import spawn_local
from mindrl.config.model_spec import load_model_spec

from support.engine_batch import make_batch
from support.hf_reference import reference_hf_model
from support.resume_worker import resume_checks

pytestmark = pytest.mark.slow   # see tests/conftest.py

# (distributed optimizer, saved (TP, PP), loaded (TP, PP)) in a world of 2: DP fills the rest.
CHANGES = [(True, (2, 1), (1, 1)), (True, (1, 2), (1, 1)), (True, (1, 1), (2, 1)),
           (False, (2, 1), (1, 1))]
LOSS_KEYS = ("actor/pg_loss", "actor/entropy", "actor/ppo_kl")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    # 126 rows pad to 126 at TP1 and 128 at TP2: the vocab tensors change shape too.
    spec = dataclasses.replace(load_model_spec("tiny-qwen2"), vocab_size=126,
                               make_vocab_size_divisible_by=2)
    hf = reference_hf_model(spec)
    full_by_tp = {tp: mapping.full_mcore_from_hf(hf.state_dict(), spec, tp) for tp in (1, 2)}
    batches = [make_batch(spec.vocab_size, seed=10 + i) for i in range(3)]
    return spawn_local(resume_checks, 2, spec, full_by_tp, batches, CHANGES,
                       str(tmp_path_factory.mktemp("ckpt")))[0]


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: f"{'distopt' if c[0] else 'opt'}-"
                         f"TP{c[1][0]}PP{c[1][1]}-to-TP{c[2][0]}PP{c[2][1]}")
def test_resume_at_another_layout_carries_weights_and_optimizer(results, change):
    res = results["changes"][change]
    # The load is pure data movement: gathered weights and Adam moments are the saved ones.
    assert res["loaded_diff"] == (0.0, 0.0)
    assert res["exp_avg_max"] > 1e-4          # ... and there was optimizer state to lose
    for step, (a, b) in enumerate(zip(res["straight"][1:], res["resumed"][1:]), start=2):
        for key in LOSS_KEYS:
            assert abs(a[key] - b[key]) <= 1e-6, f"step {step} {key}: {a[key]} vs {b[key]}"
    # One update later the two runs still agree (a fresh Adam would move params by ~lr=1e-3).
    params, moments = res["final_diff"]
    assert params <= 5e-6 and moments <= 1e-6
    # The RNG streams are per (PP, TP) rank: not restored at another layout, and said so.
    (note,) = res["notes"]
    src, dst = change[1], change[2]
    assert f"TP{src[0]} PP{src[1]}" in note and f"TP{dst[0]} PP{dst[1]}" in note


def test_an_older_checkpoint_that_cannot_reshard_is_refused_naming_both_layouts(results):
    # Saved before this change: distributed optimizer in dp_reshardable buckets, no recipe
    # (the layout is read from the RNG state's keys). It used to fail with a KeyError.
    msg = results["old"]
    assert msg is not None
    for text in ("iter_0000001", "saved at TP2 PP1", "this run is at TP1 PP1 DP2",
                 "dp_reshardable", "no_load_optim: true"):
        assert text in msg, (text, msg)
