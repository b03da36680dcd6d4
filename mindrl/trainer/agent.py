"""A run's agent parts (agent_config with tools; docs/guides/agentic.md): the tool runner, the
format its episodes write, a fresh ToolEpisode per submitted batch, the step's agent metrics
and the episode traces in the run folder. None of it exists for a single-turn run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from mindrl.config.schema import RunConfig
from mindrl.models.tokenizers import IM_END, IM_START
from mindrl.models.tool_formats import (TOOL_RESPONSE, TOOL_RESPONSE_END, ToolFormat,
                                        encode_segments, get_tool_format)
from mindrl.rollout.episode import INSERTED, SAMPLED
from mindrl.rollout.tool_episode import EpisodeCounts, ToolEpisode
from mindrl.tools import ToolLimits, ToolRunner

TRACES_DIR = "episodes"      # <run_dir>/episodes/step_000001.txt


@dataclass
class AgentParts:
    fmt: ToolFormat
    tokenizer: object
    tools: ToolRunner
    max_turns: int
    stop_token_ids: List[int]        # the sampling config's plus the format's call end
    traces_per_step: int
    traces_dir: Path
    counts: EpisodeCounts
    call_bonus: float = 0.0

    @classmethod
    def start(cls, run: RunConfig, tokenizer,
              log: Callable[[str], None] = print) -> Optional["AgentParts"]:
        """The agent parts of `run`, the tool pool started (the sandbox's layers announced;
        strict mode refuses a machine where one cannot be set up), or None without tools.
        ValueError naming prepare.tokenizer when the tokenizer lacks the format's tokens."""
        agent = run.agent_config
        if not agent.multi_turn:
            return None
        fmt = get_tool_format(agent.format)
        try:
            fmt.check_tokenizer(tokenizer)
        except ValueError as e:
            raise ValueError(f"agent_config.format={agent.format}: {e} (the tiny recipes: "
                             f"prepare.tokenizer: char_tools)") from None
        limits = ToolLimits(timeout_s=agent.tool_timeout_s,
                            max_response_tokens=agent.max_tool_response_tokens,
                            sandbox=agent.sandbox, search_corpus=agent.search_corpus)
        tools = ToolRunner(agent.tools, limits, num_workers=agent.tool_workers,
                           tokenizer=tokenizer, announce=log)
        base = list(run.generate_config.sampling_config.stop_token_ids)
        stops = base + [i for i in fmt.call_end_ids(tokenizer) if i not in base]
        log(f"agent: tools {', '.join(tools.tools)} in format {fmt.name}, at most "
            f"{agent.max_turns} model turns, a call stops at id {stops[len(base):]}")
        return cls(fmt, tokenizer, tools, agent.max_turns, stops, agent.traces_per_step,
                   Path(run.run_dir) / TRACES_DIR, EpisodeCounts(), agent.call_bonus)

    def episode(self) -> ToolEpisode:
        return ToolEpisode(self.fmt, self.tokenizer, self.tools, self.max_turns, self.counts)

    def scoring_texts(self, batch) -> List[str]:
        """What the verifiers read (the whole response, tool answers included), with the
        tool-answer markers dropped from what the model sampled: only a tool's answer is
        one, so "the text after the last tool answer" cannot be forged."""
        out = []
        for runs in kind_runs(batch):
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
        return {**episode_metrics(batch, self.tokenizer), **self.counts.drain(),
                **self.tools.drain_metrics()}

    def write_traces(self, step: int, batch, scores: Sequence[float]) -> Optional[Path]:
        """The first traces_per_step episodes of the batch as readable text, each span with
        its kind and turn: <run_dir>/episodes/step_NNNNNN.txt (written whole, then renamed)."""
        if self.traces_per_step < 1:
            return None
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        path = self.traces_dir / f"step_{step:06d}.txt"
        note = self.tools.sandbox_note
        texts = [episode_trace(self.tokenizer, batch, i, float(scores[i]), note)
                 for i in range(min(self.traces_per_step, len(batch)))]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n\n".join(texts) + "\n")
        tmp.replace(path)
        return path

    def close(self) -> None:
        self.tools.close()


def episode_metrics(batch, tokenizer) -> Dict[str, float]:
    """Per batch: turns per episode (mean, max), tokens by kind per episode, the share of
    episodes a tool answered at least once without an error (call_rate), and the share that
    ended by length."""
    real = batch["response_mask"].bool()
    trained = batch.trained_mask().bool()
    turns = torch.where(real, batch["token_turn"], torch.zeros_like(batch["token_turn"]))
    per_episode = turns.max(-1).values.float() + 1
    inserted = (real & ~trained).sum(-1).float()
    reasons = batch["finish_reason"]
    answered = answered_calls(tokenizer, batch)
    return {"agent/turns_mean": float(per_episode.mean()),
            "agent/turns_max": float(per_episode.max()),
            "agent/sampled_tokens_mean": float(trained.sum(-1).float().mean()),
            "agent/inserted_tokens_mean": float(inserted.mean()),
            "agent/call_rate": sum(n > 0 for n in answered) / max(len(answered), 1),
            "agent/answered_calls_mean": sum(answered) / max(len(answered), 1),
            "agent/ended_by_length": sum(r == "length" for r in reasons) / max(len(reasons), 1)}


def tool_prompt(run: RunConfig, tokenizer) -> Optional[Callable[[List[int]], List[int]]]:
    """How an agent run's prompt ids get the tools' schemas in their system message, as the
    chat template writes them (`apply_chat_template(messages, tools=...)`): None without
    tools or for a format that writes none (char). The row's own system message, if any, is
    kept in front of the tools block."""
    agent = run.agent_config
    if not agent.multi_turn:
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
    """Sample i of the batch as text: a header (score, label, finish), the prompt, then each
    run of one kind and turn as `[turn T sampled|inserted]` and its text (decoded to read)."""
    runs = kind_runs(batch)[i] if runs is None else runs
    prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()
    head = {"sample": i, "score": round(score, 4), "label": batch["label"][i],
            "finish": batch["finish_reason"][i]}
    lines = [f"=== {json.dumps(head)}" + (f"  [{note}]" if note else ""),
             "[prompt]", tokenizer.decode(prompt, skip_special_tokens=False)]
    for kind, turn, ids in runs:
        lines += [f"[turn {turn} {'sampled' if kind == SAMPLED else 'inserted'}]",
                  tokenizer.decode(ids, skip_special_tokens=False)]
    return "\n".join(lines)
