"""Rewards: `replay` (a transcript re-executed against real tools), `components` (the table), `score`."""
