"""bench/bench_agentic.py: its sizes and figures by hand, its episode and turn wrapper driven
through the trainer's rollout handles (interleaved and chunked) by a pure-Python engine, and one run of the script
end to end at the smallest size (vLLM on the tiny model, the tool pool, the JSON line; TRL's
part is left out there: its template and forced calls are tested by hand)."""

import json
import subprocess
import time
from pathlib import Path

import pytest
from support import run_env
from support.future_ref import FutureRef

from bench import agentic_tools, bench_agentic as ba
from mindrl.engines.rollout_output import RolloutOutput
from mindrl.rollout.episode import INSERTED, SAMPLED, TurnEnd

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_agentic.py"
SIZE = ba.Size(prompts=2, n=2, prompt_len=4, turn_tokens=5, insert_tokens=3)


def test_the_sizes_count_what_each_mode_samples_and_inserts():
    assert SIZE.episodes == 4 and SIZE.tool_turns == 2
    assert SIZE.response_tokens == 3 * 5 + 2 * 3 == 21
    assert SIZE.sampled_tokens("single") == 4 * 21          # all of the length, sampled
    assert SIZE.sampled_tokens("multi") == SIZE.sampled_tokens("tool_sleep") == 4 * 15
    assert SIZE.inserted_tokens("single") == 0 and SIZE.inserted_tokens("multi") == 4 * 6


def test_half_the_calls_of_every_turn_sleep_and_each_episode_sleeps_once():
    episodes, turns = 8, 2
    odd = {(e, t): ba.call_arguments(e, t, 16, 1.0)["k"] % 2
           for e in range(episodes) for t in range(turns)}
    assert all(sum(odd[e, t] for e in range(episodes)) == episodes // 2 for t in range(turns))
    assert all(sum(odd[e, t] for t in range(turns)) == 1 for e in range(episodes))
    assert ba.Size(4, 2, 1, 1, 1).sleeping_calls() == 8 == (4 * 2 * 2) // 2


def test_the_bench_tool_answers_a_fixed_width_and_sleeps_on_odd_calls():
    assert agentic_tools.answer(7, 5) == "00007" and agentic_tools.answer(123456, 3) == "456"
    start = time.monotonic()
    assert agentic_tools.sleepy_answer(2, 4, sleep_s=0.3) == "0002"
    assert time.monotonic() - start < 0.2
    assert agentic_tools.sleepy_answer(3, 4, sleep_s=0.3) == "0003"
    assert time.monotonic() - start >= 0.3
    assert ba.answer_ids("0123", 4) == [19, 20, 21, 22]
    with pytest.raises(ValueError, match="not 5"):
        ba.answer_ids("0123", 5)


def test_only_calls_that_sampled_a_whole_turn_become_turn_ends():
    out = RolloutOutput([[1]] * 3, [[5] * 4, [5] * 2, [5] * 4], [[0.0] * 4, [0.0] * 2,
                                                                  [0.0] * 4],
                        ["length", "length", "stop"], [0, 1, 2])
    assert ba.as_turn_ends(out, 4).finish_reasons == ["stop", "length", "stop"]
    assert out.finish_reasons == ["length", "length", "stop"]      # a copy


class FakeEngine:
    """Samples exactly max_tokens ids per sample (ignore_eos), finish "length"."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, n, max_tokens, min_tokens=0, seed=None):
        budgets = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
        self.calls.append((len(prompts), n, budgets))
        rows = [(p, b) for p, b in zip(prompts, budgets) for _ in range(n)]
        return RolloutOutput([list(p) for p, _ in rows], [[7] * b for _, b in rows],
                             [[-0.5] * b for _, b in rows], ["length"] * len(rows),
                             [i for i, _ in enumerate(prompts) for _ in range(n)])


class FakeTools:
    def __init__(self, status="ok"):
        self.batches, self.status = [], status

    def call_many(self, calls):
        self.batches.append(calls)

        class R:
            pass
        out = []
        for name, args in calls:
            r = R()
            r.status, r.text = self.status, agentic_tools.answer(args["k"], args["width"])
            out.append(r)
        return out


class FakeGroup:
    """One engine as the rollout handles see a RolloutGroup: FakeEngine's answers, each call
    answered in a thread of its own (as the engine's TURNS group runs them)."""

    phase_timeout_s = None

    def __init__(self):
        import concurrent.futures as cf
        import itertools
        from types import SimpleNamespace

        from mindrl.config.schema import GenerateConfig, SamplingConfig

        self.engine, self.threads = FakeEngine(), cf.ThreadPoolExecutor(8)
        self.config = GenerateConfig(sampling_config=SamplingConfig(seed=0))
        self.policy_version, self._pending, self._ids = 0, [], itertools.count(1)
        remote = SimpleNamespace(remote=self._remote)
        self.engines = [SimpleNamespace(generate=SimpleNamespace(
            remote=self._remote, options=lambda **_: remote))]

    def _remote(self, prompts, n, max_tokens, min_tokens=0, seed=None, stop_id=None,
                weights_version=None, beside_others=False):
        return FutureRef(self.threads.submit(self.engine.generate, prompts, n, max_tokens,
                                        min_tokens, seed))

    def next_stop_id(self):
        return next(self._ids)

    def _wait(self, refs, what, timeout_s=None):
        return {i: ref.future().result(10) for ref, i in refs.items()}


@pytest.mark.parametrize("with_tools", [False, True])
@pytest.mark.parametrize("mode", ["multi", "tool_sleep_barrier"])
def test_every_episode_runs_three_turns_of_exact_length(with_tools, mode):
    from mindrl.data.batch import Batch
    from mindrl.rollout.interleaved import submit_interleaved
    from mindrl.rollout.partial_handle import submit_in_chunks

    group, tools = FakeGroup(), FakeTools() if with_tools else None
    episode = ba.FixedTurns(3, SIZE.insert_tokens, tools, sleep_s=0.0)
    submit = submit_in_chunks if mode.endswith("_barrier") else submit_interleaved
    out = submit(ba.ExactTurns(group, SIZE.turn_tokens),
                 Batch.from_prompts(ba.prompt_ids(SIZE), SIZE.n, pad_id=0), SIZE.turn_tokens,
                 episode=episode, seed=1, max_tokens=SIZE.response_tokens).wait()
    calls = group.engine.calls
    assert (calls[0][0], calls[0][1]) == (2, 2)           # the batch's: n samples per prompt
    assert all(c[2] == [SIZE.turn_tokens] * c[0] * c[1] or c[2] == [SIZE.turn_tokens] * c[0]
               for c in calls)
    if mode.endswith("_barrier"):                          # then one call per turn
        assert [(c[0], c[1]) for c in calls] == [(2, 2), (4, 1), (4, 1)]
    else:                                                  # each sample on its own
        assert sum(c[0] for c in calls[1:]) == 4 * 2 and all(c[1] == 1 for c in calls[1:])
    T, I = SIZE.turn_tokens, SIZE.insert_tokens
    loss = out["loss_mask"].tolist()
    assert sum(map(sum, loss)) == SIZE.sampled_tokens("multi")
    assert out["finish_reason"] == ["stop"] * 4 and episode.calls == 8
    for kinds, turns in zip(loss, out["token_turn"].tolist()):
        assert kinds == ([SAMPLED] * T + [INSERTED] * I) * 2 + [SAMPLED] * T
        assert turns == [0] * (T + I) + [1] * (T + I) + [2] * T
    # episode e's inserted answers: k = e + turn, 3 characters
    ids = out.response_lists()
    assert ids[3][5:8] == ba.answer_ids("003", 3)
    assert ids[3][13:16] == ba.answer_ids("004", 3)
    if tools is not None:
        asked = sorted(a["k"] for b in tools.batches for _, a in b)
        assert asked == sorted([e for e in range(4)] + [e + 1 for e in range(4)])
        if mode.endswith("_barrier"):    # one batch of every episode's call per tool turn
            assert [len(b) for b in tools.batches] == [4, 4]
        else:                            # one call per ended turn
            assert [len(b) for b in tools.batches] == [1] * 8


def test_a_failed_tool_call_stops_the_bench():
    episode = ba.FixedTurns(3, 3, FakeTools(status="timeout"))
    with pytest.raises(RuntimeError, match="tool calls failed"):
        episode.between([TurnEnd([1], [7] * 5, [SAMPLED] * 5, 0)])


def _results(single=1.0, multi=1.0, fast=2.0, sleep=4.1, seq=None, on=(1.0, 0.5),
             barrier=4.2):
    rows = {"single": (single, 100), "multi": (multi, 60), "tool_fast": (fast, 60),
            "tool_sleep": (sleep, 60), "tool_sleep_barrier": (barrier, 60),
            "single_prefix_on": (on[0], 100),
            "multi_prefix_on": (on[1], 60)}
    if seq is not None:
        rows["tool_sleep_sequential"] = (seq, 60)
    return {k: {"seconds": s, "sampled_tokens": t, "sampled_tokens_per_s": t / s}
            for k, (s, t) in rows.items()}


def test_the_figures_from_hand_made_timings():
    size = ba.Size(2, 2, 4, 5, 3)
    f = ba.figures(_results(seq=10.0), size, sleep_s=1.0)
    assert f["multi_over_single"] == 0.6                  # 60/s against 100/s
    assert f["multi_over_single_prefix_on"] == 1.2        # 120/s against 100/s
    assert f["prefix_caching_speedup_multi"] == 2.0 and f["prefix_caching_speedup_single"] == 1.0
    assert f["multi_goal_met"] is False and f["multi_goal_met_prefix_on"] is True
    assert f["sleep_growth_s"] == 2.1 and f["sleep_growth_sleeps"] == 2.1
    assert f["sleep_goal_met"] is False and f["tool_turns"] == 2
    assert (f["sleeping_calls"], f["tool_calls"]) == (4, 8)
    assert f["sleep_growth_s_one_call_at_a_time"] == 8.0
    assert f["sleep_growth_s_barrier"] == 2.2 and f["sleep_growth_sleeps_barrier"] == 2.2
    assert f["tool_fast_over_multi_seconds"] == 2.0
    met = ba.figures(_results(sleep=3.2, on=(1.0, 1.3)), size, sleep_s=1.0)
    assert met["sleep_goal_met"] is True and met["multi_goal_met_prefix_on"] is False
    assert "sleep_growth_s_one_call_at_a_time" not in met


def test_the_figures_without_the_prefix_on_engine():
    results = {k: v for k, v in _results().items() if not k.endswith("_prefix_on")}
    f = ba.figures(results, ba.Size(2, 2, 4, 5, 3), 1.0)
    assert f["multi_over_single_prefix_on"] is None and f["prefix_caching_speedup_multi"] is None
    assert f["multi_goal_met"] is False and f["multi_goal_met_prefix_on"] is None


def test_summaries_take_the_median():
    rows = [{"seconds": s, "sampled_tokens": 60} for s in (3.0, 1.0, 2.0)]
    assert ba.summarize(rows)["seconds"] == 2.0
    assert ba.summarize(rows)["sampled_tokens_per_s"] == 30.0


@pytest.mark.slow     # imports TRL (about 10 s)
def test_the_installed_trl_is_described():
    trl = ba.trl_tool_calling()
    assert set(trl) >= {"version", "tools_argument"}


def test_arguments_are_checked():
    with pytest.raises(SystemExit):
        ba.parse_args(["--sleep", "0"])
    assert ba.parse_args([]).prompts == 8


@pytest.mark.slow
def test_the_script_runs_at_the_smallest_size(tmp_path):
    out = tmp_path / "agentic.json"
    proc = subprocess.run(
        [run_env.python(), str(SCRIPT), "--prompts", "1", "--n", "2", "--prompt-len", "4",
         "--turn-tokens", "4", "--insert-tokens", "2", "--repeats", "1", "--sleep", "0.2",
         "--no-trl", "--json-out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=run_env.for_a_run())
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["bench"] == "agentic" and r["episodes"] == 2 and r["response_tokens"] == 16
    modes = r["modes"]
    assert set(modes) == {"single", "multi", "tool_fast", "tool_sleep", "tool_sleep_barrier",
                          "single_prefix_on", "multi_prefix_on"}
    assert modes["single"]["sampled_tokens"] == 2 * 16 and modes["multi"]["sampled_tokens"] == 24
    # one call of the two sleeps in each tool turn: each turn's batch lasts one sleep
    assert all(s >= 0.2 for s in modes["tool_sleep_barrier"]["tool_batches_s"])
    assert r["sleep_growth_s_barrier"] >= 0.2 * 2 * 0.9
    assert r["sleep_growth_s"] >= 0.2 * 0.9          # each episode sleeps once
    assert r["multi_over_single"] > 0 and r["prefix_caching_speedup_multi"] > 0
    assert r["trl"]["version"] is None or "trl_multi_over_single" not in r     # --no-trl


class Decoder:
    def decode(self, ids, skip_special_tokens=True):
        return "x" * len(ids)


def test_trl_completions_are_read_as_calls_until_the_last_turn():
    forced = ba.ForcedCalls(answer_end=[102, 1], turns=3, width=4, sleep_s=0.5)
    tools = [agentic_tools.sleepy_answer]
    calls = [forced(Decoder(), [5, 6], prefix=[1, 2], tools=tools) for _ in range(2)]
    assert [c["tool_calls"][0]["function"]["arguments"]["k"] for c in calls] == [0, 1]
    assert calls[0]["tool_calls"][0]["function"] == {
        "name": "sleepy_answer", "arguments": {"k": 0, "width": 4, "sleep_s": 0.5}}
    # turn 1, place 0 (a lone 102 or 1 sampled in turn 0 is no answer's end)
    second = forced(Decoder(), [5], prefix=[1, 102, 7, 1, 102, 1, 8], tools=tools)
    assert second["tool_calls"][0]["function"]["arguments"]["k"] == 1
    assert forced(Decoder(), [5, 6], prefix=[102, 1, 9, 102, 1], tools=tools) == {
        "role": "assistant", "content": "xx"}                            # the last turn
    assert "tool_calls" not in forced(Decoder(), [5], prefix=[], tools=[])   # single turn


@pytest.mark.slow     # imports TRL (about 10 s)
def test_the_trl_template_renders_tool_calls_and_keeps_prefixes(tmp_path):
    pytest.importorskip("trl")
    from trl.chat_template_utils import (is_chat_template_prefix_preserving,
                                         supports_tool_calling)

    from mindrl.models.tokenizers import build_tokenizer

    tok = build_tokenizer("char_tools")
    tok.chat_template = ba.TRL_TEMPLATE
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
