"""grpolab: an open-weight agent RL lab (GRPO for tool-calling models, with rewards you can trust)."""

__version__ = "0.1.0"
