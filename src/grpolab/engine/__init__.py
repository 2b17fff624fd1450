"""The native GRPO engine: rollout, log-probs, the GRPO math, trainer, SFT and evaluation (the run loop is `run`)."""
