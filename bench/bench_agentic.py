"""Multi-turn agentic rollouts on the tiny model: 3-turn episodes against single-turn ones of
the same total length, prefix caching on against off, and a tool that sleeps on half of its
calls against the same tool without the sleep; TRL's GRPOTrainer with the same tool beside.

    python bench/bench_agentic.py                 # 8 prompts x 4, turns of 32, answers of 16
    python bench/bench_agentic.py --prompt-len 512 --no-trl   # prompts as long as a tool schema
    python bench/bench_agentic.py --prompts 2 --n 2 --turn-tokens 8 --insert-tokens 8 \\
        --repeats 1 --sleep 0.3 --no-trl   # smoke

What runs is the trainer's rollout path for one engine: a random-init tiny-qwen2
(`make_tiny_model`, char tokenizer) in MindRL's `VLLMEngine` (eager, --threads torch threads,
float32, ignore_eos) as a Ray actor of a `RolloutGroup`, driven by the trainer's handles:
`rollout.interleaved.submit_interleaved` (each episode goes on as soon as its own turn is
answered, its call beside the engine's others) and, for the `_barrier` mode,
`rollout.partial_handle.submit_in_chunks` (every turn of a chunk answered at once, then the
next chunk: the path multi-turn episodes took before), with an episode of the bench's own
(`FixedTurns`, rollout/episode.py's protocol). A random model does not end its turns where a
bench needs them, so the group's answers are read through `ExactTurns`: each call samples
exactly --turn-tokens (ignore_eos, max_tokens) and a call that did is reported as ended on its
own (finish "stop", as a model's tool call ends its turn); the sampling is the engine's own.
Every episode then has exactly 3 turns of T sampled tokens and, after each of the first two,
I inserted ids: a response of 3T + 2I tokens. Modes, each on the same prompts and seeds:

  single     one turn of 3T + 2I sampled tokens (one call of n samples per prompt);
  multi      3 turns, the inserted ids made in process (`agentic_tools.answer`): what the
             multi-turn bookkeeping and the continued calls cost;
  tool_fast  3 turns, each inserted answer a real call of the user tool
             `bench.agentic_tools:sleepy_answer` (sleep_s 0) through ToolRunner and the tool
             pool (one `call_many` per ended turn, as ToolEpisode answers it);
  tool_sleep the same calls with sleep_s = --sleep: call k sleeps when k is odd, k = the
             episode's index + its turn, so every tool turn has half its calls sleeping and
             every episode sleeps on exactly one of its two tool turns;
  tool_sleep_barrier  tool_sleep with every turn a barrier (submit_in_chunks);
  tool_sleep_sequential (one timed run, with --sequential) tool_sleep_barrier through a pool
             whose worker runs one call after another (calls_per_worker=1), what every batch
             cost before the pool's workers ran their calls at once.

Two engines run, each a Ray actor (one works at a time): prefix caching off (the tiny
recipes' setting) and on (generate_config.enable_prefix_caching; config/checks refuse it only
beside inflight_sync: keep_kv). Single and multi run on both, the tool modes with it off.
Every run is made once to warm up, then --repeats rounds of all of them in turn, so that a
change in the machine's load falls on every mode alike; the median counts. Sampled tokens are
counted from the batch's loss_mask (what the trainer trains), so single's are 3T + 2I per
episode and multi's 3T.

Figures (one JSON line, the results file's bench "agentic"):
  multi_over_single[_prefix_on]  multi's sampled tokens/s over single's on the engine with
                   prefix caching off [on] (goal >= 0.8: multi_goal_met[_prefix_on]);
  prefix_caching_speedup_multi / _single  tokens/s with caching on over off;
  sleep_growth_s   tool_sleep's seconds less tool_fast's; in sleeps (sleep_growth_sleeps), the
                   goal is little more than one (<= 1.5), not one a tool turn (2 here);
  sleep_growth_s_barrier  the same with every turn a barrier;
  sleep_growth_s_one_call_at_a_time  the same with the pool running one call after another;
  trl_multi_over_single, trl_sleep_growth_s[leeps]  the same figures of TRL (`trl_worker`:
                   its GRPOTrainer with tools=[sleepy_answer], HF generate, calls forced by
                   `ForcedCalls`; --no-trl leaves it out).
What a batch's generation grows by is what the step grows by (the tools run inside it).
Figures: docs/benchmarks.md#bench_agentic-multi-turn-episodes-and-tools.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.agentic_tools import answer  # noqa: E402
from bench.common.results import add_results_argument, emit, git_commit  # noqa: E402

TOOL = "bench.agentic_tools:sleepy_answer"
TOOL_NAME = "sleepy_answer"
MULTI_GOAL = 0.8            # multi's sampled tokens/s over single's, at least
SLEEP_GOAL = 1.5            # the sleep's cost in sleeps, at most ("little more than one")
TURNS = 3


@dataclasses.dataclass(frozen=True)
class Size:
    prompts: int
    n: int
    prompt_len: int
    turn_tokens: int        # T: sampled per turn
    insert_tokens: int      # I: inserted after each turn but the last
    turns: int = TURNS

    @property
    def episodes(self) -> int:
        return self.prompts * self.n

    @property
    def response_tokens(self) -> int:
        """An episode's whole length, sampled and inserted: single's sampled length."""
        return self.turns * self.turn_tokens + (self.turns - 1) * self.insert_tokens

    @property
    def tool_turns(self) -> int:
        return self.turns - 1

    def sampled_tokens(self, mode: str) -> int:
        """What a mode's batch samples: single all of the response, the others 3T."""
        per = self.response_tokens if mode == "single" else self.turns * self.turn_tokens
        return self.episodes * per

    def inserted_tokens(self, mode: str) -> int:
        return 0 if mode == "single" else self.episodes * self.tool_turns * self.insert_tokens

    def sleeping_calls(self) -> int:
        """Calls of k = episode + turn (turns 0 .. turns-2) that are odd."""
        return sum((e + t) % 2 for e in range(self.episodes) for t in range(self.tool_turns))


def prompt_ids(size: Size) -> List[List[int]]:
    """Fixed prompts of the char vocabulary (ids 3..92), each its own."""
    return [[3 + (i * 7 + j) % 90 for j in range(size.prompt_len)] for i in range(size.prompts)]


def call_arguments(episode: int, turn: int, width: int, sleep_s: float) -> dict:
    """The tool call of an episode's turn: k = episode + turn (odd k sleeps)."""
    return {"k": episode + turn, "width": width, "sleep_s": float(sleep_s)}


def answer_ids(text: str, width: int) -> List[int]:
    """An answer's characters as ids of the char vocabulary (digits: 19..28), exactly `width`."""
    ids = _char().encode(text, add_special_tokens=False)
    if len(ids) != width:
        raise ValueError(f"the answer {text!r} is {len(ids)} ids, not {width}")
    return ids


_CHAR = []


def _char():
    if not _CHAR:
        from mindrl.models.tokenizers import build_tokenizer

        _CHAR.append(build_tokenizer("char"))
    return _CHAR[0]


def as_turn_ends(output, turn_tokens: int):
    """The engine's answer with every sample that sampled exactly `turn_tokens` reported as
    ended on its own (finish "stop"); the rest as they were."""
    reasons = ["stop" if reason == "length" and len(ids) == turn_tokens else reason
               for ids, reason in zip(output.response_token_ids, output.finish_reasons)]
    return dataclasses.replace(output, finish_reasons=reasons)


class ExactTurns:
    """The engine group as the rollout handles see it, each call's answer read through
    `as_turn_ends`: every call samples `turn_tokens` (the chunk, ignore_eos) and reports them
    as a turn that ended on its own. The rest is the group's own."""

    def __init__(self, group, turn_tokens: int):
        self._group, self.turn_tokens = group, turn_tokens

    def __getattr__(self, name):
        return getattr(self._group, name)

    def _wait(self, refs, *args, **kwargs):
        return {i: as_turn_ends(out, self.turn_tokens)
                for i, out in self._group._wait(refs, *args, **kwargs).items()}


class FixedTurns:
    """A bench-only episode (rollout/episode.py): every episode runs `turns` turns; after each
    but the last, `insert` ids: the tool's answer to this turn's call (all the turns that ended
    in the chunk in one ToolRunner.call_many) or, without a runner, the same answer made in
    process. A turn's episode is its TurnEnd.sample (the interleaved rollout asks about one
    turn at a time, the chunked one about every turn of a chunk)."""

    multi_turn = True

    def __init__(self, turns: int, insert: int, tools=None, sleep_s: float = 0.0):
        self.turns, self.insert, self.tools, self.sleep_s = turns, insert, tools, sleep_s
        self.calls, self.lock = 0, threading.Lock()
        self.call_seconds: List[float] = []      # each call_many's wall time

    def between(self, ended) -> List[Optional[List[int]]]:
        plans = [None if t.turn + 1 >= self.turns else
                 call_arguments(t.sample, t.turn, self.insert, self.sleep_s)
                 for t in ended]
        asked = [p for p in plans if p is not None]
        if self.tools is not None and asked:
            start = time.perf_counter()
            results = self.tools.call_many([(TOOL_NAME, a) for a in asked])
            with self.lock:
                self.call_seconds.append(time.perf_counter() - start)
            bad = [r.text for r in results if r.status != "ok"]
            if bad:
                raise RuntimeError(f"{len(bad)} tool calls failed: {bad[:3]}")
            texts = iter(r.text for r in results)
        else:
            texts = iter(answer(a["k"], a["width"]) for a in asked)
        with self.lock:
            self.calls += len(asked)
        return [None if p is None else answer_ids(next(texts), self.insert) for p in plans]


def run_mode(group, mode: str, size: Size, seed: int, tools=None,
             sleep_s: float = 0.0) -> dict:
    """One batch of a mode through the trainer's rollout handles on the engine group, timed;
    its token counts checked against the size. Multi-turn modes interleave (each episode goes
    on as its own answer is in: rollout/interleaved.py), but `*_barrier` ones, which answer
    every turn of a chunk at once and then send the next (rollout/partial_handle.py)."""
    from mindrl.data.batch import Batch
    from mindrl.rollout.interleaved import submit_interleaved
    from mindrl.rollout.partial_handle import submit_in_chunks

    batch = Batch.from_prompts(prompt_ids(size), size.n, pad_id=0)
    episode = None
    start = time.perf_counter()
    if mode == "single":
        out = group.generate(batch, seed=seed, max_tokens=size.response_tokens)
    else:
        episode = FixedTurns(size.turns, size.insert_tokens,
                             tools if mode.startswith("tool") else None,
                             sleep_s if mode.startswith("tool_sleep") else 0.0)
        barrier = mode.endswith(("_barrier", "_sequential"))
        submit = submit_in_chunks if barrier else submit_interleaved
        out = submit(ExactTurns(group, size.turn_tokens), batch, size.turn_tokens,
                     episode=episode, seed=seed, max_tokens=size.response_tokens).wait()
    seconds = time.perf_counter() - start
    real, trained = out["response_mask"].bool(), out.trained_mask().bool()
    sampled, total = int((real & trained).sum()), int(real.sum())
    if sampled != size.sampled_tokens(mode) or total - sampled != size.inserted_tokens(mode):
        raise RuntimeError(f"{mode}: {sampled} sampled and {total - sampled} inserted tokens, "
                           f"not {size.sampled_tokens(mode)} and {size.inserted_tokens(mode)}")
    row = {"seconds": seconds, "sampled_tokens": sampled, "inserted_tokens": total - sampled}
    if episode is not None and episode.call_seconds:
        row["tool_batches_s"] = [round(s, 3) for s in episode.call_seconds]
    return row


def plan(prefix_on: bool) -> List[Tuple[str, str]]:
    """(result key, mode) of every timed run in a round: the tool modes on the engine with
    prefix caching off (the recipes'), single and multi on both."""
    runs = [(m, m) for m in ("single", "multi", "tool_fast", "tool_sleep", "tool_sleep_barrier")]
    if prefix_on:
        runs += [(m + "_prefix_on", m) for m in ("single", "multi")]
    return runs


def measure(engines: Dict[str, object], runs: Sequence[Tuple[str, str]], size: Size,
            repeats: int, tools, sleep_s: float,
            log: Callable[[str], None] = print) -> Dict[str, List[dict]]:
    """Each run once to warm up, then `repeats` rounds of every run in turn (a seed per
    round, the same for every run), so that the machine's load falls on all of them alike.
    `engines`: the engine of a key by its suffix ("" or "_prefix_on")."""
    def engine_of(key):
        return engines["_prefix_on" if key.endswith("_prefix_on") else ""]

    for key, mode in runs:
        run_mode(engine_of(key), mode, size, seed=7, tools=tools, sleep_s=sleep_s)
    rows: Dict[str, List[dict]] = {key: [] for key, _ in runs}
    for r in range(repeats):
        for key, mode in runs:
            row = run_mode(engine_of(key), mode, size, seed=1000 + r, tools=tools,
                           sleep_s=sleep_s)
            rows[key].append(row)
            log(f"  {key:24s} round {r}: {row['seconds']:.3f} s")
    return rows


def summarize(rows: List[dict]) -> dict:
    """Median seconds and sampled tokens/s of a mode's timed runs."""
    seconds = statistics.median(r["seconds"] for r in rows)
    sampled = rows[0]["sampled_tokens"]
    out = {"seconds": seconds, "seconds_all": [round(r["seconds"], 4) for r in rows],
           "sampled_tokens": sampled, "sampled_tokens_per_s": sampled / seconds}
    if "tool_batches_s" in rows[-1]:
        out["tool_batches_s"] = rows[-1]["tool_batches_s"]
    return out


def figures(results: Dict[str, dict], size: Size, sleep_s: float) -> dict:
    """The headline ratios from each mode's summary (keys mode, or mode + "_prefix_on")."""
    def tps(key):
        return results[key]["sampled_tokens_per_s"] if key in results else None

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    out = {"multi_over_single": ratio(tps("multi"), tps("single")),
           "multi_over_single_prefix_on": ratio(tps("multi_prefix_on"), tps("single_prefix_on")),
           "prefix_caching_speedup_multi": ratio(tps("multi_prefix_on"), tps("multi")),
           "prefix_caching_speedup_single": ratio(tps("single_prefix_on"), tps("single")),
           "multi_goal": f">= {MULTI_GOAL}"}
    for key in ("", "_prefix_on"):
        value = out["multi_over_single" + key]
        out["multi_goal_met" + key] = None if value is None else value >= MULTI_GOAL
    if "tool_sleep" in results and "tool_fast" in results:
        growth = results["tool_sleep"]["seconds"] - results["tool_fast"]["seconds"]
        out.update({"sleep_s": sleep_s, "tool_turns": size.tool_turns,
                    "sleeping_calls": size.sleeping_calls(),
                    "tool_calls": size.episodes * size.tool_turns,
                    "sleep_growth_s": round(growth, 3),
                    "sleep_growth_sleeps": round(growth / sleep_s, 3),
                    "sleep_goal": f"<= {SLEEP_GOAL} sleeps (one a tool turn: "
                                  f"{size.tool_turns})",
                    "sleep_goal_met": growth / sleep_s <= SLEEP_GOAL,
                    "tool_fast_over_multi_seconds": round(
                        results["tool_fast"]["seconds"] / results["multi"]["seconds"], 3)})
    if "tool_sleep_barrier" in results and "tool_fast" in results:
        growth = results["tool_sleep_barrier"]["seconds"] - results["tool_fast"]["seconds"]
        out["sleep_growth_s_barrier"] = round(growth, 3)
        out["sleep_growth_sleeps_barrier"] = round(growth / sleep_s, 3)
    if "tool_sleep_sequential" in results and "tool_fast" in results:
        growth = results["tool_sleep_sequential"]["seconds"] - results["tool_fast"]["seconds"]
        out["sleep_growth_s_one_call_at_a_time"] = round(growth, 3)
        out["sleep_growth_sleeps_one_call_at_a_time"] = round(growth / sleep_s, 3)
    return out


def start_ray():
    """A private local Ray with two CPU bundles (one per engine), as a run's driver has."""
    import ray
    from ray.util.placement_group import placement_group

    from mindrl.platforms import preload
    from mindrl.workers.worker_group import LOCAL_NODE_ENV

    os.environ.update(LOCAL_NODE_ENV)
    with preload.ray_node_python():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=128 * 2**20)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    if not pg.wait(60):
        raise RuntimeError("Ray could not place the bench's two CPU bundles")
    return pg


def stop_ray() -> None:
    import ray

    ray.shutdown()


def engine_group(model_dir, config, pg, bundle: int):
    """One vLLM engine as the trainer's RolloutGroup runs it (a Ray actor), started."""
    from mindrl.rollout.engine_group import RolloutGroup
    from mindrl.workers.placement import EngineSlot
    from mindrl.workers.worker_group import worker_env

    group = RolloutGroup(model_dir, config, 0, [EngineSlot(pg, bundle, {"num_cpus": 1},
                                                           (bundle,))], worker_env())
    group.start()
    return group


def engine_config(size: Size, prefix_caching: bool, threads: int, model: str):
    from bench.common.flops import kv_cache_bytes
    from mindrl.config.schema import GenerateConfig, SamplingConfig

    longest = size.prompt_len + size.response_tokens
    rows = size.episodes
    return GenerateConfig(
        max_num_seqs=rows, max_model_len=32 * -(-longest // 32),
        max_num_batched_tokens=max(4096, rows * longest), dtype="float32",
        kv_cache_memory_bytes=kv_cache_bytes(model, rows, longest), block_size=32,
        enforce_eager=True, enable_prefix_caching=prefix_caching, cpu_threads=threads,
        sampling_config=SamplingConfig(max_tokens=size.response_tokens, ignore_eos=True,
                                       seed=0, temperature=1.0, top_p=1.0, top_k=-1))


def trl_tool_calling() -> dict:
    """What the installed TRL's GRPOTrainer offers for tools (read from its signature)."""
    try:
        import inspect
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import trl
            from trl import GRPOConfig, GRPOTrainer
    except Exception as e:  # noqa: BLE001 - no TRL is a fact to report
        return {"version": None, "tools_argument": False, "why": f"{type(e).__name__}: {e}"}
    params = inspect.signature(GRPOTrainer.__init__).parameters
    return {"version": trl.__version__, "tools_argument": "tools" in params,
            "environment_factory": "environment_factory" in params,
            "max_tool_calling_iterations":
                "max_tool_calling_iterations" in getattr(GRPOConfig, "__dataclass_fields__", {})}


# ---------------------------------------------------------------------------- TRL

# A chat template for the char_tools tokenizer that renders tool calls and tool answers, as
# TRL's tool loop needs (trl.chat_template_utils.supports_tool_calling, prefix preserving): the
# Qwen2.5 markers, a tool's answer inline in the assistant's next turn.
TRL_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + message['content'] }}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{{- '<tool_call>' + call['function']['name'] + ' ' + (call['function']['arguments'] | tojson)"
    " + '</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<tool_response>' + message['content'] + '</tool_response>' }}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
TRL_MODES = ("tool_fast", "single", "tool_sleep")


class ForcedCalls:
    """TRL's `parse_response` (trl.trainer.grpo_trainer) replaced for the bench, as ExactTurns
    is MindRL's engine: a random model writes no call TRL's parser accepts, so every completion
    of a turn before the last is read as one call of `sleepy_answer` (k = its place in the turn
    + the turn, as `call_arguments`), the last turn as the answer. The turn is the count of
    inserted answers in what came before (`prefix`): of `answer_end`, the ids that close an
    answer and open the next turn (a random model samples a single marker id now and then,
    never that run of them)."""

    def __init__(self, answer_end: Sequence[int], turns: int, width: int, sleep_s: float):
        self.answer_end, self.turns, self.width, self.sleep_s = (list(answer_end), turns, width,
                                                                 sleep_s)
        self.seen: Dict[int, int] = {}

    def turn_of(self, prefix: Sequence[int]) -> int:
        ids, end, count, i = list(prefix), self.answer_end, 0, 0
        while i + len(end) <= len(ids):
            if ids[i:i + len(end)] == end:
                count, i = count + 1, i + len(end)
            else:
                i += 1
        return count

    def __call__(self, tokenizer, ids, prefix=None, tools=None) -> dict:
        turn = self.turn_of(prefix or [])
        if not tools or turn + 1 >= self.turns:
            return {"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}
        place = self.seen.get(turn, 0)
        self.seen[turn] = place + 1
        return {"role": "assistant", "content": "", "tool_calls": [{
            "type": "function", "function": {"name": TOOL_NAME, "arguments": call_arguments(
                place, turn, self.width, self.sleep_s)}}]}


def trl_worker(spec: dict, out: Path) -> None:
    """In a process of its own: TRL's GRPOTrainer with `tools=[sleepy_answer]` on the same
    random-init model (char_tools tokenizer, TRL_TEMPLATE), HF generate on CPU (TRL 1.16 runs
    vLLM 0.22-0.31 only; this one is 0.32), each turn exactly T tokens (min/max_new_tokens),
    and the calls forced (ForcedCalls). Per mode, 1 + repeats training steps; each step's
    `_generate` (generation, the tool loop, the answers' insertion) is timed and its tokens
    counted (its tool_mask: 1 sampled, 0 inserted). single's length is tool_fast's whole one."""
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(spec["threads"])
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import trl.trainer.grpo_trainer as grpo
    from trl import GRPOConfig, GRPOTrainer

    from bench.agentic_tools import sleepy_answer
    from mindrl.models.tiny import make_tiny_model

    size = Size(**{k: spec[k] for k in ("prompts", "n", "prompt_len", "turn_tokens",
                                        "insert_tokens")})
    model_dir = make_tiny_model(spec["model"], "char_tools", Path(spec["dir"]) / "model")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = TRL_TEMPLATE
    tokenizer.response_schema = {"type": "object"}   # set: TRL parses (ForcedCalls answers)
    forced = ForcedCalls(tokenizer.encode("</tool_response><|im_start|>assistant\n",
                                          add_special_tokens=False), size.turns, 1, 0.0)
    grpo.parse_response = forced
    width = answer_len = None
    rows = [{"prompt": [{"role": "user", "content": "".join(
        chr(33 + (i * 7 + j) % 90) for j in range(size.prompt_len))}]}
        for i in range(size.prompts)]
    steps = 1 + spec["repeats"]
    report: Dict[str, dict] = {}
    for mode in TRL_MODES:
        length = size.turn_tokens if mode != "single" else \
            size.turns * size.turn_tokens + size.tool_turns * answer_len
        args = GRPOConfig(
            output_dir=str(Path(spec["dir"]) / f"trl_{mode}"), use_cpu=True, bf16=False,
            seed=0, per_device_train_batch_size=size.episodes, gradient_accumulation_steps=1,
            num_generations=size.n, max_completion_length=4 * size.response_tokens,
            generation_kwargs={"min_new_tokens": length, "max_new_tokens": length},
            temperature=1.0, top_p=1.0, top_k=0, beta=0.0, learning_rate=1e-5,
            max_steps=steps, gradient_checkpointing=False, logging_steps=1, report_to="none",
            save_strategy="no", remove_unused_columns=False, dataloader_num_workers=0,
            disable_tqdm=True, max_tool_calling_iterations=size.tool_turns)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        trainer = GRPOTrainer(
            model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions),
            args=args, train_dataset=Dataset.from_list(rows * (steps + 1)),
            processing_class=tokenizer, tools=[] if mode == "single" else [sleepy_answer])
        if width is None:   # each answer's width: its insertion as long as MindRL's, I ids
            frame = len(trainer._get_tool_suffix_ids(
                [{"role": "tool", "name": TOOL_NAME, "content": ""}]))
            width = max(1, size.insert_tokens - frame)
            answer_len = frame + width
        forced.width, forced.sleep_s = width, spec["sleep"] if mode == "tool_sleep" else 0.0
        timed: List[dict] = []
        generate = trainer._generate

        def timed_generate(prompts, generate=generate, timed=timed):
            forced.seen.clear()
            start = time.perf_counter()
            result = generate(prompts)
            seconds = time.perf_counter() - start
            completion_ids, tool_mask = result[1], result[2]
            total = sum(map(len, completion_ids))
            sampled = total if tool_mask is None else sum(map(sum, tool_mask))
            timed.append({"seconds": seconds, "sampled_tokens": int(sampled),
                          "inserted_tokens": int(total - sampled),
                          "episodes": len(completion_ids)})
            return result

        trainer._generate = timed_generate
        trainer.train()
        want = (size.episodes * length, 0) if mode == "single" else (
            size.sampled_tokens(mode), size.episodes * size.tool_turns * answer_len)
        for step in timed:
            if (step["sampled_tokens"], step["inserted_tokens"]) != want:
                raise RuntimeError(f"TRL {mode}: {step['sampled_tokens']} sampled and "
                                   f"{step['inserted_tokens']} inserted tokens, not {want}")
        report["trl_" + mode] = {**summarize(timed[1:] or timed), "steps": timed,
                                 "answer_width": width}
        del trainer, model
    out.write_text(json.dumps(report))


def run_trl(size: Size, args) -> Dict[str, dict]:
    """trl_worker in a fresh process (its own threads and imports); its summaries by mode."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "trl.json"
        spec = {**dataclasses.asdict(size), "model": args.model, "repeats": args.trl_repeats,
                "sleep": args.sleep, "threads": args.threads, "dir": tmp}
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
               "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run([sys.executable, __file__, "--trl-worker", json.dumps(spec),
                               "--trl-out", str(out)], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"the TRL run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text())


def trl_figures(results: Dict[str, dict], sleep_s: float) -> dict:
    """TRL's ratios, named as MindRL's with a trl_ prefix."""
    if "trl_single" not in results:
        return {}
    fast, single, sleep = (results["trl_" + m] for m in ("tool_fast", "single", "tool_sleep"))
    growth = sleep["seconds"] - fast["seconds"]
    return {"trl_multi_over_single": round(fast["sampled_tokens_per_s"]
                                           / single["sampled_tokens_per_s"], 3),
            "trl_sleep_growth_s": round(growth, 3),
            "trl_sleep_growth_sleeps": round(growth / sleep_s, 3)}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-qwen2")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--turn-tokens", type=int, default=32, help="T, sampled per turn")
    ap.add_argument("--insert-tokens", type=int, default=16, help="I, each tool answer")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (medians count)")
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds an odd call sleeps")
    ap.add_argument("--threads", type=int, default=1, help="the engine's torch threads")
    ap.add_argument("--tool-workers", type=int, default=1, help="the tool pool's processes "
                                                                "(agent_config.tool_workers)")
    ap.add_argument("--no-prefix-on", action="store_true",
                    help="leave out the engine with prefix caching on")
    ap.add_argument("--sequential", action="store_true",
                    help="add tool_sleep_sequential (it costs sleeping_calls x sleep)")
    ap.add_argument("--trl-repeats", type=int, default=2,
                    help="TRL's timed steps per mode (its tool_sleep step costs every "
                         "sleeping call's sleep: 32 s at the default size)")
    ap.add_argument("--no-trl", action="store_true",
                    help="leave out TRL's GRPOTrainer with tools (trl_* figures)")
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--trl-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--trl-out", type=Path, default=None, help=argparse.SUPPRESS)
    add_results_argument(ap)
    args = ap.parse_args(argv)
    if min(args.prompts, args.n, args.prompt_len, args.turn_tokens, args.insert_tokens,
           args.repeats, args.trl_repeats) < 1 or args.sleep <= 0:
        ap.error("sizes, --repeats and --sleep must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.trl_worker:
        trl_worker(json.loads(args.trl_worker), args.trl_out)
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from bench.common.machine import machine_facts
    from mindrl.models.tiny import make_tiny_model
    from mindrl.tools import ToolLimits, ToolRunner

    size = Size(args.prompts, args.n, args.prompt_len, args.turn_tokens, args.insert_tokens)
    load_before = round(os.getloadavg()[0], 2)
    limits = ToolLimits(timeout_s=max(5.0, 2 * args.sleep + 1))
    results: Dict[str, dict] = {}
    loads: List[float] = []
    print(f"{size.episodes} episodes of {TURNS} turns x {size.turn_tokens} sampled + "
          f"{size.tool_turns} x {size.insert_tokens} inserted = {size.response_tokens} tokens; "
          f"single: {size.response_tokens} sampled", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model(args.model, "char", Path(tmp) / "model")
        engines: Dict[str, object] = {}
        cluster = start_ray()
        try:
            # each engine a Ray actor, as the trainer's are; one works at a time
            for suffix, on in ([("", False)] + ([] if args.no_prefix_on
                                                else [("_prefix_on", True)])):
                engines[suffix] = engine_group(
                    model_dir, engine_config(size, on, args.threads, args.model), cluster,
                    len(engines))
            with ToolRunner([TOOL], limits, num_workers=args.tool_workers) as tools:
                rows = measure(engines, plan(not args.no_prefix_on), size, args.repeats, tools,
                               args.sleep)
            loads.append(round(os.getloadavg()[0], 2))
            if args.sequential:
                with ToolRunner([TOOL], limits, num_workers=args.tool_workers,
                                calls_per_worker=1) as tools:
                    tools.call(TOOL_NAME, call_arguments(0, 0, size.insert_tokens, 0))
                    row = run_mode(engines[""], "tool_sleep_sequential", size, seed=1000,
                                   tools=tools, sleep_s=args.sleep)
                rows["tool_sleep_sequential"] = [row]
                print(f"  tool_sleep_sequential    : {row['seconds']:.3f} s", flush=True)
                loads.append(round(os.getloadavg()[0], 2))
        finally:
            for engine in engines.values():
                engine.shutdown()
            stop_ray()
        results.update({key: summarize(r) for key, r in rows.items()})
    trl = trl_tool_calling()
    if not args.no_trl and trl["tools_argument"]:
        print(f"[TRL {trl['version']} GRPOTrainer, tools=[sleepy_answer]]", flush=True)
        results.update(run_trl(size, args))
        loads.append(round(os.getloadavg()[0], 2))
    print(f"{'mode':28s} {'seconds':>8s} {'sampled':>8s} {'tokens/s':>9s}")
    for mode, r in results.items():
        print(f"{mode:28s} {r['seconds']:8.3f} {r['sampled_tokens']:8d} "
              f"{r['sampled_tokens_per_s']:9.1f}")
    head = {**figures(results, size, args.sleep), **trl_figures(results, args.sleep)}
    emit({"bench": "agentic", **head, "model": args.model, **dataclasses.asdict(size),
          "episodes": size.episodes, "response_tokens": size.response_tokens,
          "repeats": args.repeats, "threads": args.threads, "tool_workers": args.tool_workers,
          "load_avg_1m_before": load_before, "load_avg_1m_during": loads,
          "load_avg_1m_after": round(os.getloadavg()[0], 2), "commit": git_commit(),
          "machine": machine_facts(), "trl": trl, "modes": results},
         args.json_out, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
