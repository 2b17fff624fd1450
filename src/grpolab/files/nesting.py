"""How deeply JSON or TOML text nests, counted without parsing it (linear time, no recursion), and the refusal of
text nested deeper than `limits.MAX_NESTING` before any parser recurses into it."""

from __future__ import annotations

import re

from grpolab.errors import UserError
from grpolab.files.limits import MAX_NESTING

# Tokenisers for counting nesting without parsing: each token costs O(1), so a scan is linear in the text (regexes
# that skip strings or match dotted keys backtrack quadratically on crafted input). Strings and comments hide
# brackets and dots; an escape is one token.
_JSON_TOKENS = re.compile(r'\\[\s\S]|"|[\[\]{}]|[^\\"\[\]{}]+')
_TOML_TOKENS = re.compile(r'"""|\'\'\'|\\[\s\S]|[A-Za-z0-9_-]+|[ \t]+|[\s\S]')
_TOML_CLOSE = {'"': {'"', "\n"}, "'": {"'", "\n"}, '"""': {'"""'}, "'''": {"'''"}, "#": {"\n"}}


def _json_depth(text: str) -> int:
    depth = deepest = 0
    in_string = False
    for m in _JSON_TOKENS.finditer(text):
        tok = m.group()
        if tok == '"':
            in_string = not in_string
        elif in_string or tok[0] == "\\":
            continue
        elif tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "]}":
            depth = max(depth - 1, 0)
    return deepest


def _toml_depth(text: str) -> int:
    """Bracket depth, or the most parts of one dotted key (`a.b."c".d` has 4), whichever is larger."""
    depth = deepest = parts = 0
    inside: str | None = None  # the opener of the string or comment we are in
    after_dot = last_was_part = False
    for m in _TOML_TOKENS.finditer(text):
        tok = m.group()
        if inside is not None:
            if tok in _TOML_CLOSE[inside]:
                part, inside = inside != "#", None
                if part:  # a quoted key part, like a bare one
                    parts = parts + 1 if after_dot else 1
                    deepest, after_dot, last_was_part = max(deepest, parts), False, True
                else:
                    after_dot = last_was_part = False
            continue
        if tok in _TOML_CLOSE:
            inside = tok
        elif tok[0].isalnum() or tok[0] in "_-":
            parts = parts + 1 if after_dot else 1
            deepest, after_dot, last_was_part = max(deepest, parts), False, True
        elif tok == "." and last_was_part:
            after_dot, last_was_part = True, False
        elif tok[0] in " \t":
            continue
        else:
            after_dot = last_was_part = False
            if tok in "[{":
                depth += 1
                deepest = max(deepest, depth)
            elif tok in "]}":
                depth = max(depth - 1, 0)
    return deepest


def nesting_depth(text: str, kind: str = "json") -> int:
    """How deeply `text` nests (brackets and braces; in TOML also dotted-key parts), counted without parsing it:
    linear time, no recursion. Unbalanced text is counted as far as it goes (the parser reports the syntax)."""
    return _toml_depth(text) if kind == "toml" else _json_depth(text)


def too_deep(text: str) -> bool:
    """Whether JSON `text` nests deeper than MAX_NESTING. Text with no more openers than that cannot: a C-speed
    count spares most lines the scan."""
    return text.count("[") + text.count("{") > MAX_NESTING and _json_depth(text) > MAX_NESTING


def check_nesting(text: str, what: str, fix: str, kind: str = "json") -> None:
    """A UserError when `text` nests deeper than MAX_NESTING (before any parser recurses into it)."""
    if kind == "json" and not too_deep(text):
        return
    depth = nesting_depth(text, kind)
    if depth > MAX_NESTING:
        raise UserError(f"{what} nests {depth} levels deep, over the limit of {MAX_NESTING}", fix)
