"""The user tools bench/bench_agentic.py names (`bench.agentic_tools:NAME`, as a recipe's
agent_config.tools would): plain functions with typed arguments and a docstring, run in the
tool pool's workers. Trusted bench code, never model-written."""

import time


def answer(k: int, width: int = 16) -> str:
    """Answer a text of exactly `width` characters made from k.

    Args:
        k: the number to write.
        width: how many characters the answer has.
    """
    return f"{k:0{width}d}"[-width:]


def sleepy_answer(k: int, width: int = 16, sleep_s: float = 1.0) -> str:
    """Sleep sleep_s seconds when k is odd (half of the calls of consecutive k), then answer as
    `answer` does.

    Args:
        k: the number to write; odd ones sleep first.
        width: how many characters the answer has.
        sleep_s: how long an odd call sleeps.
    """
    if k % 2:
        time.sleep(sleep_s)
    return answer(k, width)
