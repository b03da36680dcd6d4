"""The tool loop as an episode (rollout/episode.py): a model turn that ends with tool calls gets
the tools' answers inserted in the chat template's layout, and the model samples again.

Per ended turn (all turns that ended in one chunk at once, so the tool pool gets one batch):
the turn's sampled ids are decoded only to read its calls (models/tool_formats.py); no call
means the model answered and the episode is done; calls run through the run's ToolRunner
(tools/runner.py: deadlines, the sandbox, errors as answers) and their answers become the
format's suffix ids, encoded alone and appended after the ids the engine sampled. The turn
that reaches `max_turns` ends the episode whatever it wrote (its calls are counted as ended by
max_turns, not run). A malformed call is answered with its error, as a tool's failure is: the
episode goes on. In a format with empty calls (``char``), ``<tool_call></tool_call>`` calls the
run's first tool with its first argument set to the prompt's own expression (the user text
before "="): a random-init model finds two tokens by chance, never a JSON object.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from mindrl.models.tokenizers import IM_END, IM_START
from mindrl.models.tool_formats import CallError, EmptyCall, ToolCall, ToolFormat
from mindrl.rollout.episode import TurnEnd

USER_TURN = f"{IM_START}user\n"


def prompt_expression(prompt_text: str) -> str:
    """The last user message's text before its first "=" (all of it without one)."""
    user = prompt_text.rsplit(USER_TURN, 1)[-1].split(IM_END, 1)[0]
    return user.split("=", 1)[0].strip()


class EpisodeCounts:
    """What the episodes of a run did since the last drain (thread-safe: several batches'
    episodes answer from their own threads): model turns that ended, turns with calls, calls
    by kind, episodes ended by max_turns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter = Counter()

    def add(self, **counts: int) -> None:
        with self._lock:
            self._counts.update(counts)

    def drain(self) -> Dict[str, float]:
        with self._lock:
            out = {f"agent/{k}": float(v) for k, v in sorted(self._counts.items())}
            self._counts.clear()
        return out


class ToolEpisode:
    """Multi-turn episodes with tools: `between` answers each ended turn with the suffix ids
    of its calls' answers, or None (no call, or the last allowed turn)."""

    multi_turn = True

    def __init__(self, fmt: ToolFormat, tokenizer, tools, max_turns: int,
                 counts: Optional[EpisodeCounts] = None):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.fmt, self.tokenizer, self.tools, self.max_turns = fmt, tokenizer, tools, max_turns
        self.counts = counts or EpisodeCounts()
        self._turn_end = set(fmt.turn_end_ids(tokenizer))
        first = tools.schemas()[0]["function"] if tools.schemas() else None
        self._default_tool = None if first is None else first["name"]
        params = [] if first is None else list(first["parameters"].get("properties", {}))
        self._default_arg = params[0] if params else None

    def between(self, turns: Sequence[TurnEnd]) -> List[Optional[List[int]]]:
        plans: List[Optional[Tuple[list, bool]]] = []
        calls: List[Tuple[str, object]] = []
        counted: Counter = Counter()
        for turn in turns:
            sampled = turn.last_turn()
            found = self.fmt.parse_turn(self.tokenizer, sampled)
            counted["turns"] += 1
            if not found:
                counted["answered"] += 1
                plans.append(None)
                continue
            if turn.turn + 1 >= self.max_turns:
                counted["ended_by_max_turns"] += 1
                plans.append(None)
                continue
            counted["tool_turns"] += 1
            entries = []
            for call in found:
                if isinstance(call, CallError):
                    counted["malformed_calls"] += 1
                    entries.append(("text", call.message))
                    continue
                entries.append(("call", len(calls)))
                calls.append(self._call_of(call, turn))
            closed = bool(sampled) and sampled[-1] in self._turn_end
            plans.append((entries, closed))
        results = self.tools.call_many(calls) if calls else []
        self.counts.add(**counted)
        out: List[Optional[List[int]]] = []
        for plan in plans:
            if plan is None:
                out.append(None)
                continue
            entries, closed = plan
            answers = [value if kind == "text" else results[value].text
                       for kind, value in entries]
            out.append(self.fmt.suffix_ids(self.tokenizer, answers, closed))
        return out

    def _call_of(self, call, turn: TurnEnd) -> Tuple[str, object]:
        """(tool name, arguments) of a parsed call; an EmptyCall asks the first tool about the
        prompt's expression."""
        if isinstance(call, ToolCall):
            return call.name, call.arguments
        assert isinstance(call, EmptyCall)
        if self._default_tool is None or self._default_arg is None:
            return self._default_tool or "", {}      # answered as an error by the runner
        text = self.tokenizer.decode(list(turn.prompt), skip_special_tokens=False)
        return self._default_tool, {self._default_arg: prompt_expression(text)}
