"""Plugins: user modules imported before a config is validated, so that their environments and rewards exist.

A plugin is named by the config's `plugins` list or by `--plugin`, as a module name or as a path to a `.py` file or
a package folder. Paths are relative to the config file's folder (to the working directory for `--plugin`); a
module name is looked up first as NAME.py or NAME/ in that folder, then on `sys.path`. `resolve_plugins` turns
each into what a run records in its config.json: an absolute path for anything found as a file, the module name
for an installed module.

Importing a plugin runs its code, as `--env module:Class` does: plugins are code the user chose to run, so they are
imported in one explicit step and never while a config is read or validated. `load_config` imports the plugins of
a config file or `--plugin` the user names; a run's recorded plugins are imported only by the commands that run
the run (`train --resume`, `eval`, `compare`, `chat`, `export-model`, `simulate --real`: `RunDir.config_to_run`,
which says so), never by one that reads it (the lab's views, `report`): a run folder someone shares is data.

A config's `rewards` (TRL reward functions, `file.py:function` or `file.py:*`) are imported the same way and in the
same step, and registered as reward components (`grpolab.rewards.functions.import_rewards`).

A plugin file is imported under a private name (`grpolab_user.<stem>`, `private_name`), so a user's `datasets.py`
never takes the place of the `datasets` package in `sys.modules`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from grpolab.errors import UserError

_LOADED: dict[str, ModuleType] = {}
"""Plugins imported in this process, by their resolved name: each is imported once."""


def is_path(spec: str) -> bool:
    """Whether a plugin is named by a path (`my_rewards.py`, `plugins/tasks`) rather than a module name."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def resolve_plugin(spec: str, base: Path) -> str:
    """The plugin as a run records it: an absolute path (a file or package folder), or an installed module's name.

    `base` is the folder relative paths and local module names are read from (the config file's folder)."""
    spec = spec.strip()
    if not spec:
        raise UserError("an empty plugin name", 'name a module or a .py file, e.g. plugins = ["my_rewards"]')
    if is_path(spec):
        path = (base / spec).resolve()
        if not (path.is_file() or (path / "__init__.py").is_file()):
            raise UserError(
                f"plugin {spec!r} not found: {path} is not a .py file or a package folder",
                f"fix the path (relative to {base})",
            )
        return str(path)
    if not all(part.isidentifier() for part in spec.split(".")):
        raise UserError(f"plugin {spec!r} is not a module name", "name a module (my_rewards) or a .py file")
    local = base / Path(*spec.split("."))
    for candidate in (local.with_suffix(".py"), local / "__init__.py"):
        if candidate.is_file():
            return str(candidate.parent.resolve() if candidate.name == "__init__.py" else candidate.resolve())
    return spec


def resolve_plugins(specs: Iterable[str], base: Path) -> list[str]:
    """`resolve_plugin` for each, in order, each once."""
    resolved: list[str] = []
    for spec in specs:
        r = resolve_plugin(spec, base)
        if r not in resolved:
            resolved.append(r)
    return resolved


def resolve_reward(spec: str, base: Path) -> str:
    """A `rewards` entry (`module:function`, `file.py:function`, `file.py:*`) with its module resolved as a plugin is
    (`resolve_plugin`: an absolute path for a file, a local `NAME.py` found in `base`, else the module's name)."""
    module, _, function = spec.strip().rpartition(":")
    return f"{resolve_plugin(module, base)}:{function}" if module.strip() else spec


def import_plugins(specs: Iterable[str]) -> list[ModuleType]:
    """Import each resolved plugin (a path or a module name), once per process. A plugin that is not found or
    fails to import is a UserError naming it, what was searched and the fix."""
    return [import_plugin(spec) for spec in specs]


def plugin_module(name: str, specs: Iterable[str]) -> ModuleType | None:
    """The module a plugin file or package folder among `specs` (resolved) that is called `name` was imported as,
    or None where none is. Two `new-env --stateful` folders both hold shop.py: the later one is imported under a
    name of its own (`_import_path`), and its config's `env = "shop:ShopEnv"` must still mean its own file."""
    for spec in specs:
        if is_path(spec) and (Path(spec).stem if spec.endswith(".py") else Path(spec).name) == name:
            return import_plugin(spec)
    return None


def is_imported(spec: str) -> bool:
    """Whether this process has imported the plugin `spec` (resolved) already."""
    return spec in _LOADED


def import_plugin(spec: str) -> ModuleType:
    """One plugin: a module name on sys.path, or a path (relative ones from the working directory)."""
    if spec in _LOADED:
        return _LOADED[spec]
    stem = Path(spec).stem
    if is_path(spec) and not stem.isidentifier():  # `env = "stem:Class"` finds a plugin by it (`plugin_module`)
        raise UserError(f"plugin {spec}: {stem!r} is not a module name", "rename it (letters, digits, _)")
    module = load_module(spec, "plugin")
    _LOADED[spec] = module
    return module


def load_module(spec: str, what: str) -> ModuleType:
    """The one loader of a user's code (plugins, `env = "file.py:Class"`, env data's tools and verifier modules,
    TRL reward files): a `.py` file or package folder, imported under its private name (`private_name`), or a module
    name on sys.path. `what` names it in the error a missing or failing module gives (exit 2, never a traceback)."""
    return _import_path(Path(spec).resolve(), what) if is_path(spec) else _import_name(spec, what)


def _import_name(name: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            searched = ", ".join(p or "." for p in sys.path)
            raise UserError(
                f"{what} {name!r} not found on the Python path: no {name}.py or {name}/ in the config file's folder "
                f"(the working directory for --plugin), and no module {name!r} on sys.path ({searched})",
                f"name its file (path/to/{name.split('.')[-1]}.py, relative to the config file), put its folder on "
                "PYTHONPATH, or pip install it",
            ) from None
        raise _failed(what, name, exc) from None
    except Exception as exc:  # whatever the module raises on import is a bad config, not a crash
        raise _failed(what, name, exc) from None


USER_PREFIX = "grpolab_user."
"""The private namespace user files are imported under (plugins, env data's tools and verifier modules)."""


def private_name(path: Path) -> str:
    """The name a user's file (or package folder) is imported under: `grpolab_user.<stem>`, or, where another file
    of that stem came first (two `new-env` folders each hold rewards.py, and the lab reads both runs in one process),
    `grpolab_user.<stem>_<hash of its path>`, so that neither replaces the other and no user file ever takes the
    name of a real module (`plug/datasets.py` is `grpolab_user.datasets`, never `datasets`)."""
    stem = path.name if path.is_dir() else path.stem
    name = USER_PREFIX + stem
    loaded = sys.modules.get(name)
    if loaded is None or _same_file(loaded, path):
        return name
    return f"{name}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"


def _same_file(module: ModuleType, path: Path) -> bool:
    init = path / "__init__.py" if path.is_dir() else path
    return Path(getattr(module, "__file__", "") or "").resolve() == init.resolve()


def _import_path(path: Path, what: str) -> ModuleType:
    package = path.is_dir()
    init = path / "__init__.py" if package else path
    if not init.is_file():
        raise UserError(
            f"{what} {path} not found (no such file)", "fix the path (relative ones start at the config's folder)"
        )
    name = private_name(path)
    if name in sys.modules:
        return sys.modules[name]
    # its folder goes on sys.path (last: never before the standard library's) so that the plugin can import its
    # siblings (a tools module beside a rewards one)
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(path)] if package else None
    )
    if spec is None or spec.loader is None:
        raise UserError(f"{what} {path} cannot be imported", "name a .py file or a package folder")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered first: dataclasses, pickle and the module's own imports find it
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if not isinstance(exc, Exception):
            raise
        raise _failed(what, str(path), exc) from None
    return module


def _failed(what: str, name: str, exc: Exception) -> UserError:
    """User code that raised on import: what it is, the error and the line it came from."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return UserError(
        f"{what} {name!r} failed to import ({type(exc).__name__}: {exc}{where})",
        "fix it (python -c 'import it' shows the whole traceback)"
        + (", or remove it from plugins / --plugin" if what == "plugin" else ""),
    )
