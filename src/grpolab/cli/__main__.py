"""`python -m grpolab.cli`: the same entry point as the `grpolab` command."""

from grpolab.cli import main

main()
