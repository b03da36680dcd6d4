"""`calculator(expression)`: arithmetic evaluated from the AST, in process, with bounded sizes.

Only numbers (int and float literals), + - * / // % ** and unary +/- are accepted: a name, an
attribute, a call, a subscript, a string or any other syntax is refused before anything is
evaluated. Sizes are bounded before each operation, so no expression can take long or much
memory: `2**10**10` is refused, not computed.
"""

from __future__ import annotations

import ast
import math
import operator

from .errors import ToolError

MAX_EXPRESSION_CHARS = 1000
MAX_INT_BITS = 4096          # about 1233 decimal digits, in any intermediate result
MAX_NODES = 500

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**"}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and answer its value.

    Numbers, + - * / // % ** (^ is read as **) and parentheses only, no names or functions.

    Args:
        expression: the expression, e.g. "(3 + 4) * 2 ** 5 / 7".
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.strip().replace("^", "**")   # models write 2^10 for a power
    if not text:
        raise ToolError("empty expression")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise ToolError(f"not an arithmetic expression: {getattr(e, 'msg', None) or e}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ToolError(f"expression has more than {MAX_NODES} parts")
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("number too large") from None
    except RecursionError:
        raise ToolError("expression nested too deeply") from None
    return _format(value)


def _eval(node: ast.AST):
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ToolError(f"only numbers are allowed, not {node.value!r}")
        _check_size(node.value)
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        _check_operation(type(node.op), left, right)
        value = _BINARY[type(node.op)](left, right)
        if isinstance(value, complex):
            raise ToolError("the result is not a real number")
        _check_size(value)
        return value
    if isinstance(node, (ast.Name, ast.Attribute)):
        raise ToolError(f"names and attributes are not allowed "
                        f"({ast.unparse(node)!r}): numbers and operators only")
    if isinstance(node, ast.Call):
        raise ToolError("function calls are not allowed: numbers and operators only")
    raise ToolError(f"{type(node).__name__} is not allowed: numbers and + - * / // % ** only")


def _bits(x) -> float:
    """About how many bits |x| needs (floats count as small: they overflow on their own)."""
    return float(abs(x).bit_length()) if isinstance(x, int) else 0.0


def _check_operation(op, left, right) -> None:
    if op is ast.Pow and isinstance(left, int) and isinstance(right, int):
        if right < 0:
            return   # a float (or ZeroDivisionError), bounded
        if abs(left) > 1 and right * math.log2(abs(left)) > MAX_INT_BITS:
            raise ToolError(f"result too large: {_short(left)} {_SYMBOL[op]} {_short(right)} "
                            f"has more than {MAX_INT_BITS} bits")
    elif op is ast.Mult and _bits(left) + _bits(right) > MAX_INT_BITS:
        raise ToolError(f"result too large: more than {MAX_INT_BITS} bits")


def _check_size(value) -> None:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(f"number too large: more than {MAX_INT_BITS} bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite number")


def _short(x) -> str:
    text = str(x) if _bits(x) < 200 else f"<{len(str(abs(x)))}-digit number>"
    return text


def _format(value) -> str:
    return str(value) if isinstance(value, int) else repr(value)
