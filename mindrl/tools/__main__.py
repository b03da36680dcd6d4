"""`python -m mindrl.tools`: see a tool's schema and check one call before a run.

    python -m mindrl.tools list [--tool module:function ...]
    python -m mindrl.tools call NAME 'JSON_ARGS' [--timeout-s 10] [--sandbox best_effort] ...

`call` runs the call exactly as a run does: through a ToolRunner (the same worker pool,
sandbox, limits, response cut) and prints one JSON line
{"status": "ok" | "error" | "timeout", "text": ..., "seconds": ...}; the exit code is 0 for
ok, 1 for an error or timeout answer, 2 when the runner cannot start (an unknown tool entry,
strict sandbox refused: the message on stderr). The sandbox's layer report goes to stderr.
(`--config-name`, a recipe's agent_config, comes with that config section.)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from .errors import SandboxUnavailable
from .limits import SANDBOX_MODES, ToolLimits
from .registry import BUILTIN, is_spec, resolve_all


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mindrl.tools", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    lister = sub.add_parser("list", help="print each tool's schema, one JSON line per tool")
    caller = sub.add_parser("call", help="run one call as a run would; print one JSON line")
    for q in (lister, caller):
        q.add_argument("--tool", action="append", default=[], metavar="MODULE:FUNCTION",
                       help="a tool of your own (module:function or file.py:function); "
                            "repeatable. The shipped tools are always there.")
    caller.add_argument("name", help="the tool's name (or a module:function entry)")
    caller.add_argument("arguments", nargs="?", default="{}",
                        help="the call's arguments, a JSON object (default {})")
    d = ToolLimits()
    caller.add_argument("--timeout-s", type=float, default=d.timeout_s)
    caller.add_argument("--max-response-chars", type=int, default=d.max_response_chars)
    caller.add_argument("--sandbox", choices=SANDBOX_MODES, default=d.sandbox)
    caller.add_argument("--memory-mb", type=int, default=d.memory_mb)
    caller.add_argument("--cpu-s", type=int, default=d.cpu_s)
    caller.add_argument("--file-size-mb", type=int, default=d.file_size_mb)
    caller.add_argument("--open-files", type=int, default=d.open_files)
    caller.add_argument("--max-output-bytes", type=int, default=d.max_output_bytes)
    caller.add_argument("--search-corpus", default=d.search_corpus,
                        help="jsonl of {\"id\", \"text\"} for the search tool")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    entries = list(BUILTIN) + [t for t in args.tool if t not in BUILTIN]
    if args.command == "list":
        try:
            tools = resolve_all(entries)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        for tool in tools.values():
            print(json.dumps(tool.schema))
        return 0

    # Only the tool called is enabled (and those --tool names, so NAME may be one of them):
    # checking the calculator does not need the python tool's sandbox.
    name = args.name
    entries = list(dict.fromkeys(([name] if name in BUILTIN or is_spec(name) else [])
                                 + list(args.tool)))
    if is_spec(name):   # `call pkg.mod:fn ...`: the tool is that entry, called by its name
        name = name.rpartition(":")[2]
    if name not in BUILTIN and not is_spec(args.name) and not any(
            t.rpartition(":")[2] == name for t in args.tool):
        entries = list(BUILTIN) + list(args.tool)   # unknown: answered as a run answers it
    from .runner import ToolRunner

    try:
        limits = ToolLimits(timeout_s=args.timeout_s, max_response_chars=args.max_response_chars,
                            sandbox=args.sandbox, memory_mb=args.memory_mb, cpu_s=args.cpu_s,
                            file_size_mb=args.file_size_mb, open_files=args.open_files,
                            max_output_bytes=args.max_output_bytes,
                            search_corpus=args.search_corpus)
        runner = ToolRunner(entries, limits, num_workers=1,
                            announce=lambda line: print(line, file=sys.stderr))
    except (ValueError, SandboxUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with runner:
        result = runner.call(name, args.arguments)
    print(json.dumps(result.as_json()))
    if result.sandbox:
        print(result.sandbox, file=sys.stderr)
    return 0 if result.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
