"""Environments beyond tools: a user's class answers each model turn with an observation, or
ends the episode, and may give it a reward (docs/guides/agentic.md#writing-an-environment).

`agent_config.environment` names the class (`module:Class` or `path/to/file.py:Class`,
imported by config/environment_class.py). Each sample of a submitted batch gets its own
instance, made with no arguments; `reset(sample)` is called with the sample's row (`prompt`:
its prompt text with the template's special tokens, `label`, the dataset's additional keys)
before its first `step`, and returns None (the prompt is the first observation). After every
model turn that ended on its own (EOS or a stop id), `step(turn_text)` gets that turn's text
(the sampled ids decoded to read them, without special tokens such as the closing
`<|im_end|>` and, for qwen3, without the `<think>` block) and returns an Observation: not
done, its text goes in as the next user turn (`ToolFormat.observation_ids`: encoded alone,
special-token strings read as characters); done, the episode ends. Each step's reward adds to
the sample's, which the batch carries as `env_reward` (trainer/agent.py scores with it as
agent_config.reward says). The turn that reaches agent_config.max_turns is still stepped, so
the environment can score it; its observation is dropped and the episode ends. An episode
that runs out of tokens ends without a last step.

An environment that raises (in its constructor, reset or step) or answers something other
than an Observation stops the run: EnvironmentFailed names the class, the sample, the turn and
the start of the prompt's (last) user message. A broken environment's scores are nothing the
policy should learn from, so no sample is scored 0 in their place.

The tool loop (rollout/tool_episode.py) is the environment built in: it answers every turn it
is given in one call of the tool pool, where this protocol is asked one sample at a time.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Protocol, Sequence

import torch

from mindrl.models.tokenizers import IM_END
from mindrl.models.tool_formats import ToolFormat
from mindrl.rollout.episode import TurnEnd
from mindrl.rollout.tool_episode import USER_TURN, EpisodeCounts

PROMPT_HEAD = 120      # characters of the user's message an error quotes


@dataclass(frozen=True)
class Observation:
    """What an environment answers a model turn: `text`, the next user turn (needed unless
    `done`); `done`, the episode ends (the text is not inserted); `reward`, added to the
    sample's reward (summed over its steps)."""

    text: Optional[str] = None
    done: bool = False
    reward: float = 0.0


class Environment(Protocol):
    """One sample's episode: made with no arguments, `reset` with the sample's row, then
    `step` once per model turn until an Observation is done."""

    def reset(self, sample: dict) -> None:
        ...

    def step(self, turn_text: str) -> Observation:
        ...


class EnvironmentFailed(RuntimeError):
    """An environment raised or answered something else than an Observation: the run stops."""


class EnvironmentEpisode:
    """Multi-turn episodes with an environment per sample: `between` steps each ended turn's
    environment and answers its observation's ids, or None (done, or the last allowed
    turn). `rows[i]`: sample i's row, in batch order (TurnEnd.sample). `between` may be
    called from several threads at once (rollout/interleaved.py), never twice at once for one
    sample."""

    multi_turn = True

    def __init__(self, environment: type, fmt: ToolFormat, tokenizer, rows: Sequence[dict],
                 max_turns: int, counts: Optional[EpisodeCounts] = None,
                 name: Optional[str] = None):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.environment, self.fmt, self.tokenizer = environment, fmt, tokenizer
        # what errors call it: the recipe's spec (a file's module has a made-up name)
        self.name = name or f"{environment.__module__}.{environment.__qualname__}"
        self.rows, self.max_turns = list(rows), max_turns
        self.counts = counts or EpisodeCounts()
        self._turn_end = set(fmt.turn_end_ids(tokenizer))
        self._lock = threading.Lock()
        self._envs: Dict[int, object] = {}
        self._rewards: Dict[int, float] = {}

    def between(self, turns: Sequence[TurnEnd]) -> List[Optional[List[int]]]:
        return [self._answer(turn) for turn in turns]

    def batch_fields(self, samples: int) -> Dict[str, torch.Tensor]:
        """`env_reward`: per sample, the sum of its steps' rewards (0 if never stepped)."""
        with self._lock:
            return {"env_reward": torch.tensor([self._rewards.get(i, 0.0)
                                                for i in range(samples)], dtype=torch.float32)}

    def _answer(self, turn: TurnEnd) -> Optional[List[int]]:
        sampled = turn.last_turn()
        text = self.fmt.answer_text(self.tokenizer.decode(sampled, skip_special_tokens=True))
        env = self._env(turn)
        observation = self._call(turn, "step", lambda: env.step(text))
        self._check(observation, turn)
        with self._lock:
            self._rewards[turn.sample] = self._rewards.get(turn.sample, 0.0) + \
                float(observation.reward)
        last = turn.turn + 1 >= self.max_turns
        self.counts.add(turns=1, env_done=int(observation.done),
                        ended_by_max_turns=int(last and not observation.done))
        if observation.done or last:
            return None
        closed = bool(sampled) and sampled[-1] in self._turn_end
        return self.fmt.observation_ids(self.tokenizer, observation.text, closed)

    def _env(self, turn: TurnEnd):
        """The sample's environment, made and reset at its first ended turn."""
        with self._lock:
            env = self._envs.get(turn.sample)
        if env is not None:
            return env
        if not 0 <= turn.sample < len(self.rows):
            raise EnvironmentFailed(f"{self._where(turn)}: no row for it (the episode was "
                                    f"made for {len(self.rows)} samples)")
        env = self._call(turn, "its constructor", self.environment)
        row = {**self.rows[turn.sample], "prompt": self._prompt(turn)}
        first = self._call(turn, "reset", lambda: env.reset(row))
        if first is not None:
            raise EnvironmentFailed(f"{self._where(turn)}: reset returned a "
                                    f"{type(first).__name__}; it returns None (the prompt is "
                                    f"the first observation)")
        with self._lock:
            self._envs[turn.sample] = env
        return env

    def _call(self, turn: TurnEnd, what: str, fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - raised again, named
            raise EnvironmentFailed(f"{self._where(turn)}: {what} raised "
                                    f"{type(e).__name__}: {e}") from e

    def _check(self, observation, turn: TurnEnd) -> None:
        if not isinstance(observation, Observation):
            raise EnvironmentFailed(f"{self._where(turn)}: step returned a "
                                    f"{type(observation).__name__}, not an Observation")
        reward = observation.reward
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or \
                not math.isfinite(reward):
            raise EnvironmentFailed(f"{self._where(turn)}: the observation's reward is "
                                    f"{reward!r}, not a finite number")
        if not observation.done and not isinstance(observation.text, str):
            raise EnvironmentFailed(f"{self._where(turn)}: an observation that is not done "
                                    f"needs text (a str), not {type(observation.text).__name__}")

    def _prompt(self, turn: TurnEnd) -> str:
        return self.tokenizer.decode(list(turn.prompt), skip_special_tokens=False)

    def _where(self, turn: TurnEnd) -> str:
        """The environment, sample, turn and the start of the prompt's last user message."""
        user = self._prompt(turn).rsplit(USER_TURN, 1)[-1].split(IM_END, 1)[0]
        head = user[:PROMPT_HEAD] + ("..." if len(user) > PROMPT_HEAD else "")
        return (f"environment {self.name}, sample {turn.sample}, turn {turn.turn}, "
                f"prompt {head!r}")
