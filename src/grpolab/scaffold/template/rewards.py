"""Your own reward components. This file is a plugin: config.toml names it, and grpolab imports it first.

A component is a function of either shape:
- TRL's: `fn(prompts, completions, **kwargs) -> list[float | None]`, one value per completion (None: does not
  apply). kwargs carry each task's fields as columns: `answer`, `truth`, `kind`, `task_id` and every key of the
  row's `meta` (here `to_unit`).
- grpolab's: `fn(replay, task, env, ctx) -> (value, reason)`, one transcript at a time (docs/plugins.md).
`register_reward` adds it to every environment's rubric; give it a weight in config.toml's [reward.weights].
`grpolab check --config config.toml` then probes whether it can be gamed, as it does the built-in rewards.
"""

from grpolab import register_reward

UNIT_WORDS = {
    "km": ("km", "kilometre", "kilometer"),
    "mi": ("mi", "mile"),
    "m": ("m", "metre", "meter"),
    "ft": ("ft", "feet", "foot"),
    "kg": ("kg", "kilogram"),
    "lb": ("lb", "pound"),
    "g": ("g", "gram"),
    "oz": ("oz", "ounce"),
    "C": ("°c", "celsius"),
    "F": ("°f", "fahrenheit"),
}


def names_the_unit(prompts: list, completions: list, to_unit: list, **kwargs) -> list:
    """1 when the last line of the answer names the unit the task asks for, else 0."""
    scores = []
    for completion, unit in zip(completions, to_unit):
        if unit is None:
            scores.append(None)
            continue
        last = completion.strip().splitlines()[-1].lower() if completion.strip() else ""
        words = last.replace(".", " ").replace(",", " ").split()
        scores.append(1.0 if any(w.startswith(u) for w in words for u in UNIT_WORDS[unit]) else 0.0)
    return scores


register_reward("names_unit", names_the_unit, letter="U", description="the answer names the unit asked for")
