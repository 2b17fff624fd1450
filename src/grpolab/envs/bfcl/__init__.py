"""The `bfcl` environment: BFCL data, schema dialect, AST checker."""

from grpolab.envs.bfcl.env import BFCLEnv

__all__ = ["BFCLEnv"]
