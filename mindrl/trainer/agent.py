"""A run's agent parts (agent_config with tools or an environment; docs/guides/agentic.md): the
tool runner or the environment class, the format its episodes write, a fresh episode per
submitted batch (ToolEpisode, EnvironmentEpisode), how the environment's reward joins the
score, the step's agent metrics and the episode traces in the run folder. None of it exists
for a single-turn run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from mindrl.config.environment_class import load_environment
from mindrl.config.schema import RunConfig
from mindrl.models.tokenizers import IM_END, IM_START
from mindrl.models.tool_formats import (TOOL_RESPONSE, TOOL_RESPONSE_END, ToolFormat,
                                        encode_segments, get_tool_format)
from mindrl.rollout.environment import EnvironmentEpisode
from mindrl.rollout.episode import INSERTED, SAMPLED
from mindrl.rollout.tool_episode import EpisodeCounts, ToolEpisode
from mindrl.tools import ToolLimits, ToolRunner

TRACES_DIR = "episodes"      # <run_dir>/episodes/step_000001.txt
SCORED_BY = {"verifiers": "the verifiers (the environment's reward logged only)",
             "environment": "the environment's reward (the verifiers logged only)",
             "sum": "the verifiers' score + the environment's reward"}


@dataclass
class AgentParts:
    fmt: ToolFormat
    tokenizer: object
    tools: Optional[ToolRunner]      # the tool loop's pool; None with an environment
    max_turns: int
    stop_token_ids: List[int]        # the sampling config's (tools: plus the format's call end)
    traces_per_step: int
    traces_dir: Path
    counts: EpisodeCounts
    call_bonus: float = 0.0
    environment: Optional[type] = None   # agent_config.environment's class
    environment_spec: str = ""           # and its spec, what errors name it by
    reward: str = "verifiers"            # agent_config.reward

    @classmethod
    def start(cls, run: RunConfig, tokenizer,
              log: Callable[[str], None] = print) -> Optional["AgentParts"]:
        """The agent parts of `run`: the tool pool started (the sandbox's layers announced;
        strict mode refuses a machine where one cannot be set up) or the environment class
        imported; None for single-turn episodes. ValueError naming prepare.tokenizer when the
        tokenizer lacks the format's tokens."""
        agent = run.agent_config
        if not agent.multi_turn:
            return None
        fmt = get_tool_format(agent.format)
        try:
            fmt.check_tokenizer(tokenizer)
        except ValueError as e:
            raise ValueError(f"agent_config.format={agent.format}: {e} (the tiny recipes: "
                             f"prepare.tokenizer: char_tools)") from None
        base = list(run.generate_config.sampling_config.stop_token_ids)
        common = dict(max_turns=agent.max_turns, traces_per_step=agent.traces_per_step,
                      traces_dir=Path(run.run_dir) / TRACES_DIR, counts=EpisodeCounts())
        if agent.environment is not None:
            environment = load_environment(agent.environment)
            log(f"agent: environment {agent.environment} in format {fmt.name}, at most "
                f"{agent.max_turns} model turns, scored by {SCORED_BY[agent.reward]}")
            return cls(fmt, tokenizer, None, stop_token_ids=base, environment=environment,
                       environment_spec=agent.environment, reward=agent.reward, **common)
        limits = ToolLimits(timeout_s=agent.tool_timeout_s,
                            max_response_tokens=agent.max_tool_response_tokens,
                            sandbox=agent.sandbox, search_corpus=agent.search_corpus)
        tools = ToolRunner(agent.tools, limits, num_workers=agent.tool_workers,
                           tokenizer=tokenizer, announce=log)
        stops = base + [i for i in fmt.call_end_ids(tokenizer) if i not in base]
        log(f"agent: tools {', '.join(tools.tools)} in format {fmt.name}, at most "
            f"{agent.max_turns} model turns, a call stops at id {stops[len(base):]}")
        return cls(fmt, tokenizer, tools, stop_token_ids=stops, call_bonus=agent.call_bonus,
                   **common)

    def episode(self, batch, extra_keys: Sequence[str] = ()):
        """A fresh episode for the submitted `batch`: the tool loop, or an environment per
        sample with its row (the label and the dataset's `extra_keys`)."""
        if self.environment is None:
            return ToolEpisode(self.fmt, self.tokenizer, self.tools, self.max_turns,
                               self.counts)
        keys = ["label", *[k for k in extra_keys if k != "label"]]
        rows = [{k: batch[k][i] for k in keys if k in batch} for i in range(len(batch))]
        return EnvironmentEpisode(self.environment, self.fmt, self.tokenizer, rows,
                                  self.max_turns, self.counts, self.environment_spec or None)

    def scored(self, batch, scores: Sequence[float]) -> List[float]:
        """The verifiers' per-sample `scores` with the environment's reward as
        agent_config.reward says: the verifiers' alone, the environment's alone, or their
        sum (without an environment: the scores as they are)."""
        if self.environment is None or self.reward == "verifiers":
            return list(scores)
        env = batch["env_reward"].tolist()
        if self.reward == "environment":
            return env
        return [s + e for s, e in zip(scores, env)]

    def scoring_texts(self, batch) -> List[str]:
        """What the verifiers read. The tool loop: the whole response (tool answers included),
        with the tool-answer markers dropped from what the model sampled: only a tool's answer
        is one, so "the text after the last tool answer" cannot be forged. An environment:
        the final answer, the text the model sampled after the last observation (read by
        token kind, so it cannot be forged either)."""
        out = []
        for runs in kind_runs(batch):
            if self.environment is not None:
                tail = []
                for kind, _, ids in reversed(runs):
                    if kind != SAMPLED:
                        break
                    tail = ids + tail
                out.append(self.tokenizer.decode(tail, skip_special_tokens=True))
                continue
            pieces = []
            for kind, _, ids in runs:
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                if kind == SAMPLED:
                    for marker in (TOOL_RESPONSE, TOOL_RESPONSE_END):
                        text = text.replace(marker, "")
                pieces.append(text)
            out.append("".join(pieces))
        return out

    def bonus(self, batch) -> List[float]:
        """Per sample, call_bonus when a tool answered one of its calls without an error."""
        if not self.call_bonus:
            return [0.0] * len(batch)
        return [self.call_bonus * (n > 0) for n in answered_calls(self.tokenizer, batch)]

    def metrics(self, batch) -> Dict[str, float]:
        """The step's agent metrics: the batch's episodes (episode_metrics) and what the
        episodes and tools did since the last step (agent/*, tools/* counts; with
        asynchronous GRPO they include batches generated ahead)."""
        tools = {} if self.tools is None else self.tools.drain_metrics()
        return {**episode_metrics(batch, self.tokenizer, self.tools is not None),
                **self.counts.drain(), **tools}

    def write_traces(self, step: int, batch, scores: Sequence[float]) -> Optional[Path]:
        """The first traces_per_step episodes of the batch as readable text, each span with
        its kind and turn: <run_dir>/episodes/step_NNNNNN.txt (written whole, then renamed)."""
        if self.traces_per_step < 1:
            return None
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        path = self.traces_dir / f"step_{step:06d}.txt"
        note = "" if self.tools is None else self.tools.sandbox_note
        texts = [episode_trace(self.tokenizer, batch, i, float(scores[i]), note)
                 for i in range(min(self.traces_per_step, len(batch)))]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n\n".join(texts) + "\n")
        tmp.replace(path)
        return path

    def close(self) -> None:
        if self.tools is not None:
            self.tools.close()


def episode_metrics(batch, tokenizer, tools: bool = True) -> Dict[str, float]:
    """Per batch: turns per episode (mean, max), tokens by kind per episode, the share that
    ended by length; with `tools`, the share of episodes a tool answered at least once
    without an error (call_rate) and such answers per episode; with an environment's
    `env_reward` in the batch, its mean."""
    real = batch["response_mask"].bool()
    trained = batch.trained_mask().bool()
    turns = torch.where(real, batch["token_turn"], torch.zeros_like(batch["token_turn"]))
    per_episode = turns.max(-1).values.float() + 1
    inserted = (real & ~trained).sum(-1).float()
    reasons = batch["finish_reason"]
    out = {"agent/turns_mean": float(per_episode.mean()),
           "agent/turns_max": float(per_episode.max()),
           "agent/sampled_tokens_mean": float(trained.sum(-1).float().mean()),
           "agent/inserted_tokens_mean": float(inserted.mean()),
           "agent/ended_by_length": sum(r == "length" for r in reasons) / max(len(reasons), 1)}
    if tools:
        answered = answered_calls(tokenizer, batch)
        out["agent/call_rate"] = sum(n > 0 for n in answered) / max(len(answered), 1)
        out["agent/answered_calls_mean"] = sum(answered) / max(len(answered), 1)
    if "env_reward" in batch:
        out["agent/env_reward_mean"] = float(batch["env_reward"].float().mean())
    return out


def tool_prompt(run: RunConfig, tokenizer) -> Optional[Callable[[List[int]], List[int]]]:
    """How an agent run's prompt ids get the tools' schemas in their system message, as the
    chat template writes them (`apply_chat_template(messages, tools=...)`): None without
    tools or for a format that writes none (char). The row's own system message, if any, is
    kept in front of the tools block."""
    agent = run.agent_config
    if not agent.tools:
        return None
    fmt = get_tool_format(agent.format)
    if not fmt.schemas_in_prompt:
        return None
    from mindrl.tools import resolve_all

    return system_with_tools(fmt, tokenizer, [t.schema for t in resolve_all(agent.tools)
                                              .values()])


def system_with_tools(fmt: ToolFormat, tokenizer, schemas: Sequence[dict]):
    """A function of prompt ids -> the same prompt with `schemas` in its system message (one
    made with the format's default system prompt where the prompt has none)."""
    head = encode_segments(tokenizer, [(f"{IM_START}system\n", True)])
    [end] = fmt.turn_end_ids(tokenizer)
    newline = encode_segments(tokenizer, [("\n", False)])

    def finish(ids: List[int]) -> List[int]:
        ids, system, rest = list(ids), None, list(ids)
        if ids[:len(head)] == head and end in ids[len(head):]:
            k = ids.index(end, len(head))
            system = tokenizer.decode(ids[len(head):k])     # the dataset's text
            rest = ids[k + 1:]
            if rest[:len(newline)] == newline:
                rest = rest[len(newline):]
        return encode_segments(tokenizer, [(f"{IM_START}system\n", True),
                                           *fmt.system_segments(schemas, system),
                                           (f"{IM_END}\n", True)]) + rest
    return finish


FAILED = ("error:", "timeout after")      # how tools/runner.py answers a failed call


def answered_calls(tokenizer, batch) -> List[int]:
    """Per sample, the tool answers in its inserted tokens that are not failures. Read from
    the inserted ids only (the episode wrote them), so text the model sampled, a forged
    `<tool_response>` included, never counts."""
    real, trained = batch["response_mask"].bool(), batch.trained_mask().bool()
    out = []
    for i in range(len(batch)):
        inserted = batch["response_ids"][i][real[i] & ~trained[i]].tolist()
        text = tokenizer.decode(inserted, skip_special_tokens=False)
        answers = [a.split(TOOL_RESPONSE_END, 1)[0].strip("\n")
                   for a in text.split(TOOL_RESPONSE)[1:]
                   if TOOL_RESPONSE_END in a]     # an answer cut by the budget is not one
        out.append(sum(1 for a in answers if not a.startswith(FAILED)))
    return out


def kind_runs(batch) -> List[List[Tuple[int, int, List[int]]]]:
    """Per sample, its real response tokens as runs of one kind and turn: (kind, turn, ids)."""
    real, trained = batch["response_mask"].bool(), batch.trained_mask()
    out = []
    for i in range(len(batch)):
        ids = batch["response_ids"][i][real[i]].tolist()
        kinds = trained[i][real[i]].tolist()
        turns = batch["token_turn"][i][real[i]].tolist()
        runs, start = [], 0
        for end in range(1, len(ids) + 1):
            if end == len(ids) or (kinds[end], turns[end]) != (kinds[start], turns[start]):
                runs.append((SAMPLED if kinds[start] else INSERTED, turns[start],
                             ids[start:end]))
                start = end
        out.append(runs)
    return out


def episode_trace(tokenizer, batch, i: int, score: float, note: str = "",
                  runs: Optional[List[Tuple[int, int, List[int]]]] = None) -> str:
    """Sample i of the batch as text: a header (score, label, finish, an environment's
    reward), the prompt, then each run of one kind and turn as `[turn T sampled|inserted]`
    and its text (decoded to read)."""
    runs = kind_runs(batch)[i] if runs is None else runs
    prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()
    head = {"sample": i, "score": round(score, 4), "label": batch["label"][i],
            "finish": batch["finish_reason"][i]}
    if "env_reward" in batch:
        head["env_reward"] = round(float(batch["env_reward"][i]), 4)
    lines = [f"=== {json.dumps(head)}" + (f"  [{note}]" if note else ""),
             "[prompt]", tokenizer.decode(prompt, skip_special_tokens=False)]
    for kind, turn, ids in runs:
        lines += [f"[turn {turn} {'sampled' if kind == SAMPLED else 'inserted'}]",
                  tokenizer.decode(ids, skip_special_tokens=False)]
    return "\n".join(lines)
