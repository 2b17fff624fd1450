"""Scaling out on Hugging Face TRL: the backend (rollout, rewards, settings), the run source and the script export."""
