"""ToolRunner through the shared worker pool: deadlines with kill-and-replace, errors, bad
calls, the response cut, metrics, and the python tool's hostile calls not reaching the worker
or this process. The in-process test tools are tests/tools/tool_helpers.py (trusted test code).
"""

import os
import time
from pathlib import Path

import pytest

from mindrl.tools import BEST_EFFORT, STRICT, SandboxUnavailable, ToolLimits, ToolRunner
from mindrl.tools import sandbox

HELPERS = str(Path(__file__).with_name("tool_helpers.py"))
TIMEOUT_S = 1.0
LAYERS = sandbox.probe()
MODE = STRICT if not sandbox.missing_layers(LAYERS) else BEST_EFFORT


def helper(name):
    return f"{HELPERS}:{name}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text('{"id": "a", "text": "The capital of France is Paris."}\n'
                    '{"id": "b", "text": "Bananas are yellow."}\n')
    return str(path)


@pytest.fixture(scope="module")
def runner(corpus):
    limits = ToolLimits(timeout_s=TIMEOUT_S, max_response_chars=200, sandbox=MODE,
                        search_corpus=corpus)
    tools = ["calculator", "search", "python"] + [helper(n) for n in (
        "sleep_forever", "boom", "exit_worker", "big", "typed")]
    with ToolRunner(tools, limits, num_workers=2) as r:
        yield r


def test_ok_answers_in_order_across_workers(runner):
    results = runner.call_many([("calculator", '{"expression": "2+3*4"}'),
                                ("search", {"query": "capital of France", "top_k": 1}),
                                ("python", {"code": "print(6 * 7)"}),
                                ("typed", {"count": 3, "ratio": 2, "tags": ["x"]})])
    assert [r.status for r in results] == ["ok"] * 4
    assert [r.text for r in results] == ["14", "[1] (a) The capital of France is Paris.",
                                         "42\n", "3 2 False ['x'] fast"]
    assert results[2].sandbox == runner.sandbox_note and results[0].sandbox == ""


def test_a_tool_past_its_deadline_times_out_and_its_worker_is_replaced(runner, tmp_path):
    pid_file = tmp_path / "pid"
    restarts = runner.pool.restarts
    start = time.monotonic()
    result = runner.call("sleep_forever", {"pid_file": str(pid_file)})
    assert time.monotonic() - start < TIMEOUT_S + 6
    assert (result.status, result.text, result.error) == ("timeout", "timeout after 1 s",
                                                          "timeout")
    assert runner.pool.restarts == restarts + 1
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)   # killed and reaped
    assert runner.call("calculator", {"expression": "1+1"}).text == "2"


def test_an_exception_and_a_dying_worker_are_error_answers(runner):
    boom, died = runner.call_many([("boom", {"message": "tool bug"}), ("exit_worker", {})])
    assert (boom.status, boom.text, boom.error) == ("error", "error: RuntimeError: tool bug",
                                                    "tool_error")
    assert died.status == "error" and died.error == "worker_died"
    assert died.text.startswith("error: worker process died")
    assert runner.call("calculator", {"expression": "1/0"}).text == "error: division by zero"


@pytest.mark.parametrize("call, kind, words", [
    (("nosuch", {}), "unknown_tool", "unknown tool 'nosuch'; tools: calculator, search"),
    (("calculator", '{"expression": 5}'), "bad_arguments",
     "argument 'expression' must be a string, got an integer"),
    (("calculator", {"expr": "1"}), "bad_arguments", "unknown argument(s) 'expr'"),
    (("calculator", {}), "bad_arguments", "missing argument(s) 'expression'"),
    (("typed", {"count": True, "ratio": 1.0}), "bad_arguments", "'count' must be an integer"),
    (("typed", {"count": 1, "ratio": 1.0, "mode": "warp"}), "bad_arguments",
     "'mode' must be one of 'fast', 'slow'"),
    (("calculator", '{"expression": "1"'), "malformed", "not valid JSON"),
    (("calculator", "[1, 2]"), "bad_arguments", "must be a JSON object, got a list"),
    (("calculator", "[" * 100000), "malformed", "not valid JSON"),
    ((None, {}), "malformed", "no tool name"),
    ("just a string", "malformed", "a name and its arguments"),
])
def test_bad_calls_are_error_answers_before_any_worker(runner, call, kind, words):
    restarts = runner.pool.restarts
    result = runner.call_many([call])[0]
    assert result.status == "error" and result.error == kind
    assert result.text.startswith("error: ") and words in result.text, result.text
    assert runner.pool.restarts == restarts


def test_answers_are_cut_with_a_marker(runner):
    result = runner.call("big", {"n": 1000})
    assert result.status == "ok" and result.cut
    assert result.text == "z" * 200 + "\n[cut: 800 more characters]"
    out = runner.call("python", {"code": "print('q' * 5000)"})
    assert out.cut and out.text.startswith("q" * 200) and "[cut: 4801 more characters]" in out.text


def test_cut_in_tokens_with_a_tokenizer():
    from mindrl.tools import cut_response

    class Chars:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(map(chr, ids))

    limits = ToolLimits(max_response_tokens=5)
    assert cut_response("abcdefgh", limits, Chars()) == ("abcde\n[cut: 3 more tokens]", True)
    assert cut_response("abc", limits, Chars()) == ("abc", False)


def test_metrics_count_calls_by_outcome():
    with ToolRunner(["calculator"], ToolLimits(timeout_s=2), num_workers=1) as r:
        r.call_many([("calculator", {"expression": "1+1"}), ("calculator", {"expression": "1/0"}),
                     ("nosuch", {}), ("calculator", "{")])
        m = r.metrics()
    assert m["tools/calls"] == 4 and m["tools/ok"] == 1 and m["tools/errors"] == 3
    assert m["tools/error/tool_error"] == 1 and m["tools/error/unknown_tool"] == 1
    assert m["tools/error/malformed"] == 1 and m["tools/calls/calculator"] == 3
    assert m["tools/worker_restarts"] == 0


def test_python_cannot_kill_the_worker_or_this_process(runner):
    """The real SIGKILL: the sandbox child's parent is a pool worker, the runner's process
    above it; neither dies, no worker is replaced."""
    pids, restarts = runner.pool.pids(), runner.pool.restarts
    result = runner.call("python", {"code": "import os, signal\n"
                                            "os.kill(os.getppid(), signal.SIGKILL)\n"
                                            "print('still here')"})
    if sandbox.missing_layers(LAYERS).keys() >= {"seccomp", "audit_hook", "landlock"}:
        pytest.skip("no layer that stops signals holds here")
    assert result.status == "error" and "PermissionError" in result.text
    assert runner.pool.pids() == pids and runner.pool.restarts == restarts
    os.kill(os.getpid(), 0)


def test_python_loop_times_out_in_the_sandbox_without_replacing_the_worker(runner):
    pids, restarts = runner.pool.pids(), runner.pool.restarts
    result = runner.call("python", {"code": "while True:\n    pass"})
    assert (result.status, result.text) == ("timeout", "timeout after 1 s")
    assert runner.pool.pids() == pids and runner.pool.restarts == restarts


def test_strict_refuses_to_start_naming_the_layer_best_effort_says_so_in_every_result():
    missing = dict(LAYERS, network_namespace="unshare(CLONE_NEWNET): EPERM (simulated)")
    with pytest.raises(SandboxUnavailable, match="network_namespace.*simulated"):
        ToolRunner(["python"], ToolLimits(sandbox=STRICT), layers=missing)
    ToolRunner(["calculator"], ToolLimits(sandbox=STRICT), layers=missing).close()  # no sandbox
    lines = []
    with ToolRunner(["python"], ToolLimits(sandbox=BEST_EFFORT, timeout_s=5), num_workers=1,
                    layers=missing, announce=lines.append) as r:
        result = r.call("python", {"code": "print('ran')"})
    assert "sandbox layer network_namespace: unavailable (unshare(CLONE_NEWNET): EPERM " \
           "(simulated))" in lines
    assert result.text == "ran\n" and "network_namespace" in result.sandbox


def test_unknown_tool_entries_fail_at_start():
    with pytest.raises(ValueError, match="unknown tool 'calc'; shipped tools: calculator"):
        ToolRunner(["calc"])
    with pytest.raises(ValueError, match="no_hint.*parameter 'x' has no type hint"):
        ToolRunner([helper("no_hint")])
