"""`grpolab lab`: the web lab, on localhost unless told otherwise."""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Annotated

import typer

from grpolab.cli.options import PluginOpt, err_console, load_plugin_options, resolve_config
from grpolab.errors import UserError
from grpolab.lab.guard import LOOPBACK_NAMES, accepted_names
from grpolab.lab.limits import LabLimits

DEFAULT_HOST = "127.0.0.1"


def register(app: typer.Typer) -> None:
    app.command()(lab)


def check_listen(host: str, port: int) -> None:
    """A UserError naming --host or --port when the lab could not listen there: a name that does not resolve
    (256.1.1.1), an address of another machine, a port already in use. Tried by binding, then released; without
    it the web server's OSError came out as a traceback."""
    fix = f"pass an address of this machine, e.g. --host {DEFAULT_HOST} (or 0.0.0.0 for every interface)"
    if ":" in host:  # Gradio builds http://HOST:PORT/ without brackets and fails on its own URL
        raise UserError(f"--host {host}: the web lab cannot serve on an IPv6 address", fix)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise UserError(f"--host {host} is not an address to listen on ({exc})", fix) from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server sets it
        try:
            probe.bind(address)
        except PermissionError as exc:
            raise UserError(f"--port {port} on {host}: {exc.strerror}", "pick a port above 1023") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"--port {port} is in use on {host}", "pick another --port, e.g. 7861") from None
            raise UserError(f"--host {host}: cannot listen there ({exc.strerror or exc})", fix) from None


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
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="TOML config the form starts from (your environment, its reward components' weights, your model); "
            "the demo's when not given.",
        ),
    ] = None,
    plugin: PluginOpt = None,
) -> None:
    """Open the web lab: config and simulator, live runs, rollouts, preflight, TRL export (Gradio)."""
    try:
        from grpolab.lab.app import launch  # gradio (the lab extra): only for this command
    except ImportError as exc:
        raise UserError(f"the web lab needs gradio ({exc})", "pip install 'grpolab[lab]'")
    from grpolab.lab.form import rubric_for

    load_plugin_options(plugin)  # each run's own plugins are imported when its config is read
    base = resolve_config(config, plugins=plugin) if config is not None else None
    if base is not None:
        rubric_for(base)  # its environment builds (tasks, tools, verifier), or exit 2 before the page is served
    if runs.exists() and not runs.is_dir():
        raise UserError(f"--runs {runs} is a file", "pass the folder that holds (or will hold) run directories")
    check_listen(host or DEFAULT_HOST, port)
    names = accepted_names(host or DEFAULT_HOST, allow_host or [])
    if host is not None and host not in LOOPBACK_NAMES:
        err_console.print(
            f"warning: --host {host}: the lab has no login. Anyone who can reach {host}:{port} can read the runs "
            f"in {runs.resolve()} and start training jobs on this machine. It answers to the Host names "
            f"{', '.join(sorted(names))} (add others with --allow-host NAME).",
            markup=False,
        )
    models = (*(allow_model or ()), *([base.model] if base is not None else []))  # the config's model is allowed
    limits = LabLimits(allowed_models=tuple(models), max_jobs=max_jobs)
    print(f"grpolab lab on http://{host or DEFAULT_HOST}:{port}  (runs: {runs.resolve()})", flush=True)
    launch(runs, host or DEFAULT_HOST, port, limits=limits, host_names=names, base=base)
