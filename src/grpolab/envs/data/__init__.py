"""`data`: tasks from a JSONL file or a local `datasets` dataset, tools from a module of typed functions, and a
verifier chosen by name (see docs/data-env.md)."""

from grpolab.envs.data.env import DataEnv

__all__ = ["DataEnv"]
