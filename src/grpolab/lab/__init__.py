"""The web lab (`grpolab lab`): one Gradio page over the library and the run directories; no training logic."""
