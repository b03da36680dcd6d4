"""DAPO's overlong penalty reaches the step's scores: the trainer's reward step passes each
response's token count to the rule reward that dapo_qwen3_32b's miniature assembles."""

from types import SimpleNamespace

import pytest
from mindrl.config import ClusterResources, load_recipe
from mindrl.data.batch import Batch, right_pad
from mindrl.models.tokenizers import build_tokenizer
from mindrl.rewards import RuleReward
from mindrl.trainer.assemble import overlong_config
from mindrl.trainer.sampling import Sampler


def test_the_penalty_reaches_the_scores():
    run = load_recipe("dapo_qwen3_32b", ["+scale_down=8"], cluster=ClusterResources("cpu", 2))
    rl = run.rl_config           # 8 response tokens, the last 2 of them the buffer, factor 0.1
    tok = build_tokenizer("char")
    lengths = [3, 6, 7, 8]
    responses = [tok.encode("9" * n, add_special_tokens=False) for n in lengths]
    ids, mask = right_pad(responses, tok.pad_token_id)
    batch = Batch.of(response_ids=ids, response_mask=mask, label=["3"] * 4)
    reward = RuleReward(rl.verifier_function, rl.verifier_weight, verifier_parallel=1,
                        overlong=overlong_config(run))
    parts = SimpleNamespace(reward=reward, reward_model=None, agent=None,
                            prompts=SimpleNamespace(tokenizer=tok, extra_keys=[]))
    try:
        scores, metrics = Sampler(run, parts).score(batch)
    finally:
        reward.close()
    # acc_for_dapo: no answer in "999..." -> -1 each; the penalty ramps from 6 tokens to 8.
    assert scores == pytest.approx([-1.0, -1.0, -1.05, -1.1])
    assert metrics["rewards/overlong_penalty"] == pytest.approx(-0.0375)
    assert metrics["rewards/acc_for_dapo"] == -1.0
