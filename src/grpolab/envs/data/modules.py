"""User code that env `data` names in its config: a tools module and a verifier function.

A module is named by its file (`tools.py`, made absolute from the config's folder by `grpolab.config`) or by its
import name (`my_pkg.tools`, found on sys.path: the working directory under `python -m`, or PYTHONPATH), and loaded
by the one loader of user code (`grpolab.plugins.load_module`: a file under its private name `grpolab_user.<stem>`,
so that a user's `json.py` never shadows the standard one).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from grpolab.errors import UserError
from grpolab.plugins import load_module
from grpolab.tools import Tool


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
