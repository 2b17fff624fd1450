"""`python -m grpolab.cli`: the same entry point as the `grpolab` command (supervised: `grpolab.cli.supervise`)."""

from grpolab.cli import run

run()
