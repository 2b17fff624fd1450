"""The HTML report of a run, and the pieces the web lab shares with it (charts, trajectories side by side)."""
