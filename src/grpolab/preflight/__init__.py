"""Before training: is the reward sound and the task learnable? Gameability probes (hacks written from scratch,
`probes`), shortcut probes (small edits of honest work, `shortcuts`) and `grpolab check` (`check`)."""
