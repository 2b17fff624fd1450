"""User code that env `data` names in its config: a tools module and a verifier function.

A module is named by its file (`tools.py`, made absolute from the config's folder by `grpolab.config`) or by its
import name (`my_pkg.tools`, found on sys.path: the working directory under `python -m`, or PYTHONPATH). A file is
loaded under a name of its own (`grpolab.plugins.private_name`: `grpolab_user.<stem>`, as plugins are), so that a user's
`json.py` never shadows the standard one.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from grpolab.errors import UserError
from grpolab.plugins import private_name
from grpolab.tools import Tool


def load_module(spec: str, what: str) -> ModuleType:
    """The module `spec` names (a .py path or an import name); a UserError naming what was searched otherwise."""
    if spec.endswith(".py") or "/" in spec:
        path = Path(spec)
        if not path.is_file():
            raise UserError(f"{what} {spec} not found", "check the path (relative ones start at the config's folder)")
        name = private_name(path)
        if name in sys.modules:  # this very file, imported before (as a plugin too)
            return sys.modules[name]
        folder = str(path.resolve().parent)
        if folder not in sys.path:  # as a plugin's: it may import its siblings (last: never before the stdlib)
            sys.path.append(folder)
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise UserError(f"{what} {spec} is not a Python module", "name a .py file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # typing and dataclasses look a function's module up by name
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:  # whatever the module raises on import is a bad config, not a crash
            del sys.modules[name]
            raise UserError(f"{what} {spec} failed to import ({type(exc).__name__}: {exc})", "fix it") from None
        return module
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (spec == exc.name or spec.startswith(exc.name + ".")):  # not what it imports
            raise UserError(
                f"{what} {spec!r} not found on the Python path",
                "give the path of its .py file instead, or add its folder to PYTHONPATH",
            ) from None
        raise UserError(f"{what} {spec!r} failed to import ({exc})", "install what it imports") from None
    except Exception as exc:
        raise UserError(f"{what} {spec!r} failed to import ({type(exc).__name__}: {exc})", "fix that module") from None


def load_function(spec: str, what: str) -> Callable[..., Any]:
    """`module:function` (the module as `load_module` reads it) as a callable."""
    module_spec, _, name = spec.rpartition(":")
    function = getattr(load_module(module_spec, what), name, None)
    if not callable(function):
        raise UserError(f"{what} {spec}: the module has no function {name!r}", f"define {name} in {module_spec}")
    return function


def tools_from_module(spec: str) -> list[Tool]:
    """The tools of a module: its `TOOLS` list if it has one, else every public function defined in it, in order.
    Each becomes a Tool whose JSON schema comes from its type hints and docstring."""
    module = load_module(spec, "tools module")
    listed = getattr(module, "TOOLS", None)
    if listed is not None:
        if not isinstance(listed, (list, tuple)) or not all(callable(f) for f in listed):
            raise UserError(f"TOOLS in tools module {spec} is not a list of functions", "list the tool functions")
        functions = list(listed)
    else:
        functions = [
            f
            for name, f in vars(module).items()
            if inspect.isfunction(f) and f.__module__ == module.__name__ and not name.startswith("_")
        ]
    if not functions:
        raise UserError(
            f"tools module {spec} defines no public function",
            "define typed functions with docstrings there, or leave data_env.tools unset for tasks without tools",
        )
    tools = []
    for f in functions:
        try:
            tools.append(Tool(f))
        except Exception as exc:  # transformers' TypeHintParsingException, DocstringParsingException...
            raise UserError(
                f"tool {getattr(f, '__name__', f)!r} in {spec} has no JSON schema ({exc})",
                "give every argument a type hint and describe it under 'Args:' in the docstring",
            ) from None
    return tools
