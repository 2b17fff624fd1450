"""Reading what a command is handed (tool arguments, transcripts) within the limits of `grpolab.files.limits`.

Each function returns the parsed value or raises UserError naming the input, the limit and the fix, so commands
stay thin and no parser ever sees an input it could recurse or stall on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.files.limits import MAX_COMPLETION_BYTES, MAX_TOOL_ARGS_BYTES, size_text
from grpolab.files.nesting import check_nesting
from grpolab.files.user_input import read_user_file, read_user_stream

ARGS_EXAMPLE = 'pass an object like \'{"expression": "1+1"}\''


def tool_arguments(text: str) -> Any:
    """Tool arguments given as JSON on the command line: at most MAX_TOOL_ARGS_BYTES, nested at most MAX_NESTING
    deep (jsonschema validation and the tools recurse into the value), then parsed."""
    if len(text.encode("utf-8", errors="replace")) > MAX_TOOL_ARGS_BYTES:
        raise UserError(f"tool arguments are over the {size_text(MAX_TOOL_ARGS_BYTES)} limit", ARGS_EXAMPLE)
    check_nesting(text, "tool arguments", ARGS_EXAMPLE)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UserError(f"tool arguments are not valid JSON ({exc})", ARGS_EXAMPLE) from None


def completion_text(path: Path) -> str:
    """A transcript to score, from a file or stdin ('-'): a regular file of at most MAX_COMPLETION_BYTES."""
    fix = "pass an existing transcript file or '-' for stdin"
    if str(path) == "-":
        return read_user_stream(sys.stdin, "the completion on stdin", MAX_COMPLETION_BYTES, fix)
    return read_user_file(path, "completion file", MAX_COMPLETION_BYTES, fix, errors="replace")
