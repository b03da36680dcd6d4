"""The calculator: arithmetic from the AST, bounded, everything else refused."""

import pytest

from mindrl.tools import ToolError
from mindrl.tools.calculator import calculator


@pytest.mark.parametrize("expression, value", [
    ("2+3*4", "14"), ("(2+3)*4", "20"), ("2**3**2", "512"), ("-2**2", "-4"), ("7/2", "3.5"),
    ("7//2", "3"), ("-7//2", "-4"), ("7 % 3", "1"), ("2^10", "1024"), ("2**-1", "0.5"),
    ("1e3 + 0.5", "1000.5"), ("+3 - -3", "6"), ("0.1 + 0.2", "0.30000000000000004"),
    ("10**400", "1" + "0" * 400), ("(3 + 4) * 2 ** 5 / 7", "32.0"),
])
def test_arithmetic_and_precedence(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize("expression, words", [
    ("2**10**10", "result too large"),
    ("9**9**9", "result too large"),
    ("10**1000 * 10**1000", "result too large"),
    ("1/0", "division by zero"), ("1 // 0", "division by zero"), ("5 % 0", "division by zero"),
    ("1e308 * 10", "not a finite number"),
    ("10**400 * 1.5", "number too large"),
    ("(-8) ** 0.5", "not a real number"),
    ("x + 1", "names and attributes are not allowed"),
    ("().__class__", "names and attributes are not allowed"),
    ("(1).real", "names and attributes are not allowed"),
    ("abs(-1)", "function calls are not allowed"),
    ("__import__('os').system('true')", "function calls are not allowed"),
    ("'a' * 3", "only numbers are allowed"),
    ("True + 1", "only numbers are allowed"),
    ("[1, 2]", "List is not allowed"),
    ("1 if 1 else 2", "IfExp is not allowed"),
    ("1 << 9999", "not allowed"),
    ("lambda: 1", "not allowed"),
    ("2 +", "not an arithmetic expression"),
    ("", "empty expression"),
    ("1+" * 600 + "1", "longer than 1000 characters"),
    ("(" * 300 + "1" + ")" * 300, "not an arithmetic expression"),
    ("9" * 5000, "longer than 1000 characters"),
])
def test_refused_and_failing_expressions_are_errors(expression, words):
    with pytest.raises(ToolError) as e:
        calculator(expression)
    assert words in str(e.value), str(e.value)
