"""During training: the alarms a run raises (`rules`: reward hacking, kl, entropy, length, sampler mismatch, and the
watch that gathers them all), behaviour drift (`drift`), reward attribution (`attribution`), the greedy probe
(`greedy_probe`) and what each alarm costs in false alarms (`calibration`). Thresholds: the config's `[alarms]`."""
