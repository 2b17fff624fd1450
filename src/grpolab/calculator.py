"""A safe arithmetic evaluator for model-written expressions: an AST whitelist, never `eval`.

Allowed: numbers, + - * / // % **, unary +/-, parentheses, and abs/round/min/max/sqrt. Limits keep a hostile
expression cheap, and every one is checked before the operation it bounds runs (an integer operation in C holds
the GIL, so a tool timeout cannot interrupt it: `round(5, -20000000)` once computed 10**20000000 for 27 s): length,
AST size, magnitude of every value, exponent size and the power's magnitude, and the digits of `round`. Every step
before them is linear in the text, so any expression costs milliseconds of CPU (tests/test_calculator.py fuzzes
1 KiB expressions against a 50 ms bound; the `%` rewrite once searched back with a regex per sign: 9 s on 300
characters).

`%` after a value is a percent sign when what follows cannot start an operand: the end, `)`, `,`, one of `* / %`
(and `**`), or a `+`/`-` followed by a space ("50% - 3" is 0.5 - 3). Everything else keeps Python's modulo: a
number, `(`, a name, or a sign written against its operand ("7 % -3" and "50%-3" are modulo, as in Python). The
percent applies to the number or parenthesised group right before it: "50%**2" is (50/100)**2.
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
MAX_ROUND_DIGITS = 15
"""`round(x, n)` needs |n| <= 15: values stay within 1e15, and a large negative n makes Python build 10**-n."""
_TOKEN = re.compile(
    r"(?P<space>\s+)|(?P<number>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)|(?P<name>[^\W\d]\w*)|.", re.DOTALL
)
"""Whitespace runs, numbers, names and single characters: every character of the text in exactly one token."""
_AFTER_PERCENT = frozenset(")*/%,")

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
    text = percent_signs(text)
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


def percent_signs(text: str) -> str:
    """Rewrite each percent sign (see the module docstring for the rule) as a division of its operand by 100.

    One pass over the tokens, linear in the text: each token's operand start (a number, or a parenthesised group
    with the name or number written against it) is known when the token is read, from a stack of open parentheses,
    so a `%` never searches back (a digit-run regex searched once per `%` cost 9 s of CPU on 300 characters)."""
    found = list(_TOKEN.finditer(text))
    tokens, kinds = [m.group() for m in found], [m.lastgroup for m in found]
    opens = [0] * len(tokens)  # parentheses opened before each token: one per percent whose operand starts there
    starts: list[int | None] = [None] * len(tokens)  # where the operand ending with each token starts, if one does
    stack: list[int] = []
    for k, token in enumerate(tokens):
        if kinds[k] == "number":
            starts[k] = k
        elif token == "(":
            stack.append(k)
        elif token == ")" and stack:
            start = stack.pop()
            if start and kinds[start - 1] in ("number", "name"):
                start -= 1  # a call, sqrt(16)%, or anything written against its parenthesis
            starts[k] = start
        elif token == "%":
            before = k - 2 if k and kinds[k - 1] == "space" else k - 1
            start = starts[before] if before >= 0 else None
            if start is not None and _percent_follows(tokens, kinds, k + 1):
                opens[start] += 1
                if before == k - 2:
                    tokens[k - 1] = ""  # "50 %" reads (50/100)
                tokens[k], starts[k] = "/100)", start
    return "".join("(" * opens[k] + token for k, token in enumerate(tokens))


def _percent_follows(tokens: list[str], kinds: list[str | None], k: int) -> bool:
    """Whether the tokens from `k` cannot start an operand: the end, `)`, `,`, `* / %`, or a sign and a space."""
    if k < len(tokens) and kinds[k] == "space":
        k += 1
    if k >= len(tokens):
        return True
    if tokens[k] in _AFTER_PERCENT:
        return True
    return tokens[k] in ("+", "-") and k + 1 < len(tokens) and kinds[k + 1] == "space"


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
            if abs(left) > 1 and right * math.log10(abs(left)) > math.log10(MAX_MAGNITUDE) + 1:
                raise CalculatorError(f"intermediate result outside ±{MAX_MAGNITUDE:g}")
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
        if fn is round and len(args) == 2 and isinstance(args[1], (int, float)) and abs(args[1]) > MAX_ROUND_DIGITS:
            raise CalculatorError(f"round: digits outside ±{MAX_ROUND_DIGITS}")
        try:
            return _check(fn(*args))
        except TypeError:
            raise CalculatorError(f"wrong arguments for {node.func.id}") from None
        except ValueError as exc:
            raise CalculatorError(f"{node.func.id}: {exc}") from None
    raise CalculatorError(f"{type(node).__name__} is not allowed in an arithmetic expression")
