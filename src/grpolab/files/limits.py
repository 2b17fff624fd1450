"""The limits on what users hand us (configs, completions, data files, tool arguments), in one place; every refusal
quotes the one it hit."""

from __future__ import annotations

KIB, MIB = 1024, 1024 * 1024
MAX_CONFIG_BYTES = 256 * KIB
"""A TOML config (the shipped ones are under 2 KiB; tomllib reads about 1 MB/s)."""
MAX_COMPLETION_BYTES = 1 * MIB
"""A transcript to score (a 160-token episode is under 1 KiB; scoring takes about 2 s per MiB)."""
MAX_DATA_BYTES = 32 * MIB
"""A data or task file (BFCL's files are under 400 KiB), a `check --save` report."""
MAX_TOOL_ARGS_BYTES = 64 * KIB
"""Tool arguments given as JSON on the command line."""
MAX_NESTING = 64
"""Brackets, braces or dotted-key parts nested deeper than this are refused before parsing (parsers recurse, and
tomllib's dotted keys take quadratic time)."""


def size_text(n: int) -> str:
    """A byte count as a refusal quotes it: `32 MiB`, `64 KiB`, `100 bytes`."""
    return f"{n // MIB} MiB" if n >= MIB and n % MIB == 0 else f"{n // KIB} KiB" if n >= KIB else f"{n} bytes"
