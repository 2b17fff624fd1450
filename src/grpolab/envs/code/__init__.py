"""The `code` environment: tasks, sandboxed unit tests, probes."""

from grpolab.envs.code.env import CodeEnv

__all__ = ["CodeEnv"]
