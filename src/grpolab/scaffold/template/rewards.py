"""Your own reward: a plain function in TRL's reward_funcs shape, with no grpolab import. config.toml names it
(`rewards = ["rewards.py:names_unit"]`) and weights it in [reward.weights] under its function's name.

`fn(prompts, completions, **kwargs) -> list[float | None]`, one value per completion (None: does not apply), called
as TRL calls it: each completion is the episode's messages (assistant turns with their tool calls, the tool
responses, then the final answer), and kwargs carry each task's fields as columns: `answer`, `truth`, `kind`,
`task_id` and every key of the row's `meta` (here `to_unit`). `grpolab check --config config.toml` then probes
whether it can be gamed, as it does the built-in rewards.
"""

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


def names_unit(prompts: list, completions: list, to_unit: list, **kwargs) -> list:
    """1 when the last line of the answer names the unit the task asks for, else 0."""
    scores = []
    for completion, unit in zip(completions, to_unit):
        if unit is None:
            scores.append(None)
            continue
        answer = completion[-1]["content"] if completion and completion[-1]["role"] == "assistant" else ""
        last = answer.strip().splitlines()[-1].lower() if answer.strip() else ""
        words = last.replace(".", " ").replace(",", " ").split()
        scores.append(1.0 if any(w.startswith(u) for w in words for u in UNIT_WORDS[unit]) else 0.0)
    return scores
