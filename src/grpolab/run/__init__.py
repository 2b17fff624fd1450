"""The run loop, one floor above engine, preflight, alarms, trl and report: a config in, a run directory and its
report out.

`loop.train` schedules everything a run does around the GRPO steps (probes, SFT warm start, held-out evaluations,
alarms, checkpoints, the report); `sources` says where the steps come from (the native engine or TRL); `progress`
displays it. The CLI and the web lab call it; nothing below imports it.
"""
