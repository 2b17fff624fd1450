"""`grpolab lab`: the web lab on localhost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpolab.errors import UserError


def register(app: typer.Typer) -> None:
    app.command()(lab)


def lab(
    runs: Annotated[Path, typer.Option("--runs", help="Directory holding run dirs (runs/NAME).")] = Path("runs"),
    host: Annotated[str, typer.Option("--host", help="Interface to listen on (localhost by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port.")] = 7860,
) -> None:
    """Open the web lab: config and simulator, live runs, rollouts, preflight, TRL export (Gradio)."""
    try:
        from grpolab.lab.app import launch
    except ImportError as exc:
        raise UserError(f"the web lab needs gradio ({exc})", "pip install 'grpolab[lab]'")
    print(f"grpolab lab on http://{host}:{port}  (runs: {runs.resolve()})", flush=True)
    launch(runs, host, port)
