"""`python -m mindrl.tools`: list the tools, run one call as a run would (subprocesses)."""

import json
import subprocess
import sys
from pathlib import Path

HELPERS = str(Path(__file__).with_name("tool_helpers.py"))


def tools_cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "mindrl.tools", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_list_prints_each_tool_with_its_schema():
    out = tools_cli("list", "--tool", f"{HELPERS}:big")
    assert out.returncode == 0, out.stderr
    schemas = [json.loads(line) for line in out.stdout.splitlines()]
    assert [s["function"]["name"] for s in schemas] == ["calculator", "python", "search", "big"]
    assert schemas[0]["function"]["parameters"]["properties"]["expression"]["type"] == "string"


def test_call_prints_one_json_line():
    out = tools_cli("call", "calculator", '{"expression": "2+3*4"}')
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1
    answer = json.loads(lines[0])
    assert answer["status"] == "ok" and answer["text"] == "14"
    assert set(answer) == {"status", "text", "seconds"} and answer["seconds"] >= 0


def test_call_answers_errors_and_timeouts_as_a_run_would():
    bad = tools_cli("call", "calculator", '{"expression": "1/0"}')
    assert bad.returncode == 1
    assert json.loads(bad.stdout) == {"status": "error", "text": "error: division by zero",
                                      "seconds": json.loads(bad.stdout)["seconds"]}
    slow = tools_cli("call", f"{HELPERS}:sleep_forever", '{"pid_file": "/dev/null"}',
                     "--timeout-s", "1")
    assert slow.returncode == 1 and json.loads(slow.stdout)["text"] == "timeout after 1 s"
    unknown = tools_cli("call", "nosuch", "{}")
    assert json.loads(unknown.stdout)["text"].startswith("error: unknown tool 'nosuch'")
    usage = tools_cli("call", f"{HELPERS}:no_hint")
    assert usage.returncode == 2 and "no type hint" in usage.stderr
