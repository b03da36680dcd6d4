"""ToolRunner's calls run at once on one worker (calls_per_worker, in threads): a batch of
calls that wait costs about its longest call; a call past its deadline still times out while
the others of its batch answer; sandbox children are held to one per core per worker. The
in-process test tools are tests/tools/tool_helpers.py (trusted test code)."""

import time
from pathlib import Path

import pytest

from mindrl.tools import BEST_EFFORT, STRICT, ToolLimits, ToolRunner
from mindrl.tools import sandbox
from mindrl.tools.worker import sandbox_slots

HELPERS = str(Path(__file__).with_name("tool_helpers.py"))
LAYERS = sandbox.probe()
MODE = STRICT if not sandbox.missing_layers(LAYERS) else BEST_EFFORT


def helper(name):
    return f"{HELPERS}:{name}"


@pytest.fixture(scope="module")
def runner():
    tools = [helper("nap"), helper("sleep_forever"), "calculator", "python"]
    with ToolRunner(tools, ToolLimits(timeout_s=1.0, sandbox=MODE), num_workers=1) as r:
        r.call("calculator", {"expression": "1"})          # the worker is up
        yield r


def test_eight_calls_that_sleep_half_a_second_take_well_under_four(runner):
    start = time.monotonic()
    results = runner.call_many([("nap", {"seconds": 0.5, "tag": i}) for i in range(8)])
    took = time.monotonic() - start
    assert [r.text for r in results] == [str(i) for i in range(8)]
    assert took < 2.0, took                     # one after another: 4 s


def test_a_call_past_its_deadline_times_out_and_the_others_answer(runner, tmp_path):
    restarts = runner.pool.restarts
    calls = [("nap", {"seconds": 0.2, "tag": 1}),
             ("sleep_forever", {"pid_file": str(tmp_path / "pid")}),
             ("calculator", {"expression": "6*7"}), ("nap", {"seconds": 0.4, "tag": 3})]
    start = time.monotonic()
    results = runner.call_many(calls)
    took = time.monotonic() - start
    assert [r.status for r in results] == ["ok", "timeout", "ok", "ok"]
    assert [results[i].text for i in (0, 2, 3)] == ["1", "42", "3"]
    assert results[1].text == "timeout after 1 s"
    assert runner.pool.restarts == restarts + 1
    assert took < 1.0 + 1.0 + 3.0, took         # the deadline, the grace, the slack of a box


def test_one_call_per_worker_is_one_after_another():
    with ToolRunner([helper("nap")], ToolLimits(timeout_s=2.0), num_workers=1,
                    calls_per_worker=1) as r:
        r.call("nap", {"seconds": 0.0})
        start = time.monotonic()
        results = r.call_many([("nap", {"seconds": 0.3, "tag": i}) for i in range(4)])
        took = time.monotonic() - start
    assert [x.text for x in results] == ["0", "1", "2", "3"]
    assert took >= 1.2, took


def test_python_calls_run_at_once_at_most_one_per_core(runner):
    code = ("import time\nstart = time.monotonic()\ntime.sleep(0.3)\n"
            "print(start, time.monotonic())")
    count = min(2 * sandbox_slots() + 1, 9)
    results = runner.call_many([("python", {"code": code})] * count)
    assert [r.status for r in results] == ["ok"] * count, [r.text for r in results]
    spans = [tuple(map(float, r.text.split())) for r in results]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most <= sandbox_slots()
    if sandbox_slots() > 1:
        assert most > 1                          # they did overlap


def test_searches_at_once_on_a_fresh_worker_share_one_index(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(f'{{"id": "d{i}", "text": "document {i} about topic {i % 7}"}}\n'
                              for i in range(2000)))
    with ToolRunner(["search"], ToolLimits(timeout_s=10.0, search_corpus=str(corpus)),
                    num_workers=1) as r:
        results = r.call_many([("search", {"query": f"topic {i % 7}", "top_k": 1})
                               for i in range(16)])
    assert [x.status for x in results] == ["ok"] * 16, [x.text for x in results]
    assert all("topic" in x.text for x in results)


def test_batches_from_two_threads_run_at_once_on_the_pool():
    """An interleaved rollout answers each episode's turn from a thread of its own: a batch
    called while another waits on a slow call answers without waiting for it."""
    import threading

    with ToolRunner([helper("nap"), "calculator"], ToolLimits(timeout_s=5.0),
                    num_workers=1) as r:
        r.call("calculator", {"expression": "1"})
        slow = {}
        napper = threading.Thread(target=lambda: slow.update(
            r=r.call_many([("nap", {"seconds": 3.0, "tag": 7})])))
        napper.start()
        time.sleep(0.3)                              # the nap is on the worker
        fast = r.call_many([("calculator", {"expression": "6*7"}), ("nap", {"seconds": 0.0,
                                                                            "tag": 2})])
        assert napper.is_alive(), "the second batch waited for the first one's nap"
        assert [x.text for x in fast] == ["42", "2"]
        napper.join(10)
        assert slow["r"][0].text == "7"
        assert r.metrics()["tools/calls"] == 4.0
