"""The native GRPO engine: rollout, log-probs, the GRPO math, trainer, SFT, evaluation and the run loop."""
