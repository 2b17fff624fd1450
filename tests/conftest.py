import os
import tempfile

import pytest

# Keep test caches out of the user's cache unless one is configured (the embedded tokenizer is cached there).
os.environ.setdefault("GRPOLAB_CACHE", os.path.join(tempfile.gettempdir(), "grpolab-test-cache"))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def finance():
    from grpolab.envs import get_env

    return get_env("finance")


@pytest.fixture(scope="session")
def arithmetic():
    from grpolab.envs import get_env

    return get_env("arithmetic")
