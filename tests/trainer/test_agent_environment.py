"""An environment run's agent parts (trainer/agent.py): each submitted batch gets an episode
whose environments see their rows, the verifiers read the final answer, the score is the
verifiers', the environment's or their sum as agent_config.reward says, and the metrics and
traces carry the environment's reward, not the tool loop's call rate."""

from pathlib import Path

import pytest
import torch

from mindrl.config.environment_class import load_environment
from mindrl.data.batch import Batch, left_pad, right_pad
from mindrl.models.tokenizers import IM_END, build_char_tokenizer
from mindrl.models.tool_formats import get_tool_format
from mindrl.rollout.environment import EnvironmentEpisode, EnvironmentFailed, Observation
from mindrl.rollout.episode import INSERTED, SAMPLED, TurnEnd
from mindrl.rollout.tool_episode import EpisodeCounts
from mindrl.trainer.agent import AgentParts, episode_metrics, episode_trace

TOK = build_char_tokenizer(tool_markers=True)
CHAR = get_tool_format("char")
RETRY = load_environment(str(Path(__file__).parents[2] / "examples" / "environments" /
                             "retry.py") + ":Retry")


def ids(text):
    return TOK.encode(text, add_special_tokens=False)


def env_batch() -> Batch:
    """Two episodes: a wrong answer, the observation inline, the right one; and a right answer
    at once. Per token: its kind and turn, as the rollout writes them."""
    spans = [[("12" + IM_END, SAMPLED, 0), ("<tool_response>no</tool_response>", INSERTED, 0),
              ("357" + IM_END, SAMPLED, 1)],
             [("357" + IM_END, SAMPLED, 0)]]
    rows = [[(t, k, turn) for text, k, turn in sample for t in ids(text)] for sample in spans]
    response, mask = right_pad([[t for t, _, _ in r] for r in rows], 0)
    kinds, _ = right_pad([[k for _, k, _ in r] for r in rows], 0)
    turns, _ = right_pad([[u for _, _, u in r] for r in rows], 0)
    prompt, prompt_mask = left_pad([ids("12+345=")] * 2, 0)
    return Batch.of(prompt_ids=prompt, prompt_mask=prompt_mask,
                    group_id=torch.tensor([0, 0]), response_ids=response,
                    response_mask=mask, loss_mask=kinds * mask, token_turn=turns,
                    finish_reason=["stop", "stop"], label=["357", "357"], numbers=[[1], [2]],
                    env_reward=torch.tensor([0.5, 1.0]))


def parts(reward: str, tmp_path=Path("."), traces=0) -> AgentParts:
    return AgentParts(CHAR, TOK, None, max_turns=2, stop_token_ids=[], traces_per_step=traces,
                      traces_dir=tmp_path, counts=EpisodeCounts(), environment=RETRY,
                      reward=reward)


@pytest.mark.parametrize("reward, scores", [("verifiers", [0.1, 0.2]),
                                            ("environment", [0.5, 1.0]),
                                            ("sum", [0.6, 1.2])])
def test_the_score_is_as_agent_config_reward_says(reward, scores):
    assert parts(reward).scored(env_batch(), [0.1, 0.2]) == pytest.approx(scores)


def test_the_verifiers_read_the_final_answer_after_the_last_observation():
    assert parts("sum").scoring_texts(env_batch()) == ["357", "357"]


def test_each_batch_gets_an_episode_whose_environments_see_their_rows():
    seen = []

    class Rows:
        def reset(self, sample):
            seen.append(sample)

        def step(self, text):
            if not text:
                raise ValueError("an empty turn")
            return Observation(done=True)

    agent = parts("environment")
    agent.environment = Rows
    episode = agent.episode(env_batch(), extra_keys=["numbers"])
    assert isinstance(episode, EnvironmentEpisode)
    prompt = ids("12+345=")
    episode.between([TurnEnd(prompt, ids("1"), [SAMPLED], 0, sample=1)])
    assert seen == [{"label": "357", "numbers": [2], "prompt": "12+345="}]
    # a failing environment is named by the recipe's spec
    agent.environment_spec = "mymodule:Rows"
    with pytest.raises(EnvironmentFailed, match="environment mymodule:Rows, sample 0, turn 0, "
                                                "prompt '12\\+345=': step raised "
                                                "ValueError: an empty turn"):
        agent.episode(env_batch()).between([TurnEnd(prompt, ids(""), [], 0, sample=0)])


def test_metrics_and_traces_carry_the_environments_reward(tmp_path):
    batch = env_batch()
    metrics = episode_metrics(batch, TOK, tools=False)
    assert metrics["agent/env_reward_mean"] == pytest.approx(0.75)
    assert metrics["agent/turns_mean"] == 1.5 and metrics["agent/turns_max"] == 2
    assert "agent/call_rate" not in metrics        # an observation is no tool's answer
    agent = parts("environment", tmp_path, traces=2)
    assert set(agent.metrics(batch)) == set(metrics)
    trace = agent.write_traces(3, batch, [0.5, 1.0]).read_text()
    assert trace.startswith('=== {"sample": 0, "score": 0.5, "label": "357", "finish": "stop", '
                            '"env_reward": 0.5}')
    assert "[turn 0 inserted]\n<tool_response>no</tool_response>" in trace
    assert episode_trace(TOK, batch, 1, 1.0).count("[turn") == 1
    agent.close()      # no tool pool to close
