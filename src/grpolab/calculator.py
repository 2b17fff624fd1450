"""A safe arithmetic evaluator for model-written expressions: an AST whitelist, never `eval`.

Allowed: numbers, + - * / // % **, unary +/-, parentheses, and abs/round/min/max/sqrt. Limits keep a hostile
expression cheap: length, AST size, exponent size and result magnitude.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

MAX_EXPRESSION_CHARS = 300
MAX_NODES = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e15

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
}


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be evaluated; the message says why."""


def calculate(expression: str) -> float:
    """Evaluate an arithmetic expression safely. Raises CalculatorError (only) on bad input."""
    if not isinstance(expression, str):
        raise CalculatorError("expression must be a string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.replace("^", "**").replace("$", "").strip()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # thousands separators: 1,200 -> 1200
    text = re.sub(r"%(?!\s*[\d(.])", "/100", text)  # 50% -> 50/100, but 7 % 2 stays modulo
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalculatorError(f"cannot parse expression {expression[:60]!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculatorError(f"expression has more than {MAX_NODES} parts")
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except (OverflowError, RecursionError):
        raise CalculatorError("result too large") from None
    if isinstance(value, complex) or math.isnan(value) or math.isinf(value):
        raise CalculatorError("result is not a finite real number")
    return value


def _check(value: float) -> float:
    if isinstance(value, complex):
        raise CalculatorError("result is not a finite real number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"intermediate result outside ±{MAX_MAGNITUDE:g}")
    return value


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalculatorError(f"exponent larger than {MAX_EXPONENT}")
            if left == 0 and right < 0:
                raise ZeroDivisionError
            return _check(left**right)
        op = _BINARY.get(type(node.op))
        if op is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        return _check(op(left, right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = _FUNCTIONS.get(node.func.id)
        if fn is None:
            raise CalculatorError(f"function {node.func.id!r} is not allowed")
        args = [_eval(a) for a in node.args]
        try:
            return _check(fn(*args))
        except TypeError:
            raise CalculatorError(f"wrong arguments for {node.func.id}") from None
        except ValueError as exc:
            raise CalculatorError(f"{node.func.id}: {exc}") from None
    raise CalculatorError(f"{type(node).__name__} is not allowed in an arithmetic expression")
