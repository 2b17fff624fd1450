"""Trusting the reward and the result: gameability probes, preflight, alarms and the policy & reward simulator."""
