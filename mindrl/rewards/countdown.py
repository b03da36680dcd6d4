"""Countdown: combine the given numbers with + - * / into an expression equal to the target.

The answer expression is parsed with `ast` and evaluated by walking a whitelist of node types
(integer literals, binary + - * /; parentheses are just grouping) with exact fractions; it is
never passed to eval/exec. Unary operators are rejected too: the game uses each number once,
as given. Size limits bound parsing and arithmetic cost on adversarial input.
"""

from __future__ import annotations

import ast
import json
import warnings
from collections import Counter
from fractions import Fraction
from typing import List, Mapping, Optional, Tuple

from .extract import answer_block, last_boxed, last_nonempty_line
from .registry import register_verifier

MAX_EXPR_CHARS = 256
MAX_NODES = 64
MAX_LITERAL = 10**6
MAX_BITS = 1024  # numerator / denominator size of any intermediate value
MAX_NUMBERS = 16

_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
_ALLOWED_CHARS = frozenset("0123456789+-*/() \t")
_SYMBOLS = {"×": "*", "\\times": "*", "\\cdot": "*", "÷": "/", "\\div": "/", "−": "-"}


class _Rejected(Exception):
    pass


def parse_task(label: object, extra: Mapping) -> Tuple[List[int], Fraction]:
    """(numbers, target) from a JSON string / dict label, or from `extra` when label is empty."""
    if isinstance(label, str) and label.strip():
        task = json.loads(label)
    elif isinstance(label, Mapping):
        task = label
    else:
        task = extra
    numbers = [_as_int(x) for x in task["numbers"]]
    if not numbers or len(numbers) > MAX_NUMBERS:
        raise ValueError(f"countdown task needs 1..{MAX_NUMBERS} numbers, got {len(numbers)}")
    return numbers, Fraction(_as_int(task["target"]))


def _as_int(x: object) -> int:
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, str) and x.strip().lstrip("-").isdigit() and len(x) < 32:
        return int(x)
    raise ValueError(f"countdown numbers and target must be integers, got {x!r}")


def extract_expression(completion: str) -> str:
    """The final answer expression: `<answer>` content (else the last line), boxed content if
    boxed, with LaTeX/unicode operators normalised and any `= result` suffix dropped."""
    text = answer_block(completion)
    if text is None:
        text = last_nonempty_line(completion)
    boxed = last_boxed(text)
    if boxed is not None:
        text = boxed
    text = text.replace("$", "")
    for symbol, op in _SYMBOLS.items():
        text = text.replace(symbol, op)
    return text.split("=", 1)[0].strip()


def evaluate(expr: str) -> Optional[Tuple[Fraction, Counter]]:
    """(value, multiset of literals) of a whitelisted expression; None if rejected."""
    # Character whitelist first: decimal integers only (no 0x.., 1e3, 1_0), no names at all.
    if not expr or len(expr) > MAX_EXPR_CHARS or not set(expr) <= _ALLOWED_CHARS:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        return None
    used: Counter = Counter()
    try:
        value = _eval(tree.body, used)
    except (_Rejected, ZeroDivisionError):
        return None
    return value, used


def _eval(node: ast.AST, used: Counter) -> Fraction:
    if isinstance(node, ast.Constant):
        v = node.value
        if type(v) is not int or v > MAX_LITERAL:
            raise _Rejected
        used[v] += 1
        return Fraction(v)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        value = _OPS[type(node.op)](_eval(node.left, used), _eval(node.right, used))
        if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
            raise _Rejected
        return value
    raise _Rejected  # names, calls, **, unary ops, comparisons, ...


@register_verifier("countdown")
def countdown(completion: str, label: object, **extra) -> float:
    """1.0 iff the answer uses exactly the given numbers (as a multiset) and equals the target."""
    numbers, target = parse_task(label, extra)
    result = evaluate(extract_expression(completion))
    if result is None:
        return 0.0
    value, used = result
    return 1.0 if value == target and used == Counter(numbers) else 0.0
