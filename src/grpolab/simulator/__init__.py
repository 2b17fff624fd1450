"""What GRPO will do: the policy & reward simulator on episode classes (`simulate`) and the forecast from a pilot of
the user's own episodes (`forecast`)."""
