"""What scores the rollouts: a rule reward or a reward model, and a reward model's own
trained weights (never the actor's checkpoint, which the reward role would inherit)."""

from __future__ import annotations

from mindrl.config import names
from mindrl.config.errors import Problem
from mindrl.config.schema import RunConfig


def check_reward(run: RunConfig) -> list[Problem]:
    """Something scores the rollouts (verifiers, a reward model or an environment), and a
    reward model starts from its own trained weights (the reward role inherits
    megatron_training.load, the actor's checkpoint, unless told)."""
    rl, agent = run.rl_config, run.agent_config
    out: list[Problem] = []
    by_environment = agent.environment is not None and agent.reward != "verifiers"
    if not rl.rule_reward and not rl.reward_model and not by_environment:
        out.append(Problem("rl_config.reward_model", "is false while rl_config.rule_reward is "
                           "false: nothing scores the rollouts", "set rl_config.reward_model: "
                           "true (a reward model, reward_config), rl_config.rule_reward: true "
                           "(verifier_function) or, with agent_config.environment, "
                           "agent_config.reward: environment", False))
    if not rl.reward_model:
        return out
    load = run.reward_config.load
    if load is None:
        out.append(Problem("reward_config.load", "is not set: a reward model needs trained "
                           "weights", "convert the HF reward model with cli/convert_ckpt.py "
                           "(docs/guides/reward-model.md) and point reward_config.load at it",
                           None))
    elif load == run.actor_config.load:
        out.append(Problem(names.role_key(run, "reward", "load"), "is the actor's checkpoint: a "
                           "reward model has a score head, not an LM head",
                           "set reward_config.load to a converted reward model", load))
    return out

