"""`grpolab lab`: the web lab, on localhost unless told otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpolab.cli.options import err_console
from grpolab.errors import UserError

DEFAULT_HOST = "127.0.0.1"


def register(app: typer.Typer) -> None:
    app.command()(lab)


def lab(
    runs: Annotated[Path, typer.Option("--runs", help="Directory holding run dirs (runs/NAME).")] = Path("runs"),
    host: Annotated[
        str | None,
        typer.Option("--host", help=f"Interface to listen on ({DEFAULT_HOST} when not given; others get a warning)."),
    ] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port.")] = 7860,
    allow_host: Annotated[
        list[str] | None,
        typer.Option("--allow-host", help="Another Host name the lab answers to (what users type in the browser)."),
    ] = None,
    allow_model: Annotated[
        list[str] | None,
        typer.Option("--allow-model", help="A model name or path jobs started from the page may load."),
    ] = None,
    max_jobs: Annotated[int, typer.Option("--max-jobs", min=1, max=16, help="Training jobs running at once.")] = 2,
) -> None:
    """Open the web lab: config and simulator, live runs, rollouts, preflight, TRL export (Gradio)."""
    try:
        from grpolab.lab.app import launch
        from grpolab.lab.guard import LOOPBACK_NAMES, accepted_names
        from grpolab.lab.limits import LabLimits
    except ImportError as exc:
        raise UserError(f"the web lab needs gradio ({exc})", "pip install 'grpolab[lab]'")
    if runs.exists() and not runs.is_dir():
        raise UserError(f"--runs {runs} is a file", "pass the folder that holds (or will hold) run directories")
    names = accepted_names(host or DEFAULT_HOST, allow_host or [])
    if host is not None and host not in LOOPBACK_NAMES:
        err_console.print(
            f"warning: --host {host}: the lab has no login. Anyone who can reach {host}:{port} can read the runs "
            f"in {runs.resolve()} and start training jobs on this machine. It answers to the Host names "
            f"{', '.join(sorted(names))} (add others with --allow-host NAME).",
            markup=False,
        )
    limits = LabLimits(allowed_models=tuple(allow_model or ()), max_jobs=max_jobs)
    print(f"grpolab lab on http://{host or DEFAULT_HOST}:{port}  (runs: {runs.resolve()})", flush=True)
    launch(runs, host or DEFAULT_HOST, port, limits=limits, host_names=names)
