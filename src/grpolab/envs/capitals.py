"""`capitals`: a capability check for what training keeps, not a training task.

A person asks for a country's capital in a plain chat turn: no system prompt of the lab's, no tools, no protocol.
The base SmolLM2-135M-Instruct answers 28 of the 40 held-out questions (70%; `grpolab eval --env capitals --model
smollm2 --limit 40`, greedy, 2026-12-01), so it is a skill the model has before any training, and one that
training on tool use can erode (answering in the protocol, calling a tool that does not exist, or losing the fact).
The learning benchmark measures it before and after every arm (`benchmarks/learning_transfer.py`, issue 26's
retention setting); `grpolab eval --run R --env capitals` measures it for any run. The facts are written here (no
download); the held-out questions are the 40 the figure above was measured on, the train split 20 others (nothing
should train on them).
"""

from __future__ import annotations

import re
import unicodedata

from grpolab.envs.base import Environment, Evidence, Split, Task, Verdict
from grpolab.tools import ToolBox

HELDOUT = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Japan": "Tokyo",
    "China": "Beijing",
    "Russia": "Moscow",
    "Egypt": "Cairo",
    "Canada": "Ottawa",
    "Australia": "Canberra",
    "Brazil": "Brasilia",
    "Mexico": "Mexico City",
    "India": "New Delhi",
    "Kenya": "Nairobi",
    "Greece": "Athens",
    "Portugal": "Lisbon",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Finland": "Helsinki",
    "Poland": "Warsaw",
    "Austria": "Vienna",
    "Ireland": "Dublin",
    "Argentina": "Buenos Aires",
    "Peru": "Lima",
    "Chile": "Santiago",
    "Turkey": "Ankara",
    "Iran": "Tehran",
    "Thailand": "Bangkok",
    "Vietnam": "Hanoi",
    "Indonesia": "Jakarta",
    "South Korea": "Seoul",
    "Netherlands": "Amsterdam",
    "Belgium": "Brussels",
    "Denmark": "Copenhagen",
    "Hungary": "Budapest",
    "Cuba": "Havana",
    "Colombia": "Bogota",
    "Nigeria": "Abuja",
    "Morocco": "Rabat",
    "Switzerland": "Bern",
}
TRAIN = {
    "United Kingdom": "London",
    "Ukraine": "Kyiv",
    "Czech Republic": "Prague",
    "Romania": "Bucharest",
    "Bulgaria": "Sofia",
    "Serbia": "Belgrade",
    "Croatia": "Zagreb",
    "Iceland": "Reykjavik",
    "Philippines": "Manila",
    "Malaysia": "Kuala Lumpur",
    "Pakistan": "Islamabad",
    "Bangladesh": "Dhaka",
    "Saudi Arabia": "Riyadh",
    "Iraq": "Baghdad",
    "Ethiopia": "Addis Ababa",
    "Ghana": "Accra",
    "Venezuela": "Caracas",
    "Ecuador": "Quito",
    "New Zealand": "Wellington",
    "Syria": "Damascus",
}
_CITIES = {c for table in (HELDOUT, TRAIN) for c in table.values()}


def _plain(text: str) -> str:
    """Lower case without accents ("Brasília" -> "brasilia")."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch)).lower()


def _names(plain_text: str, city: str) -> bool:
    """The city is named as a word ("Lima" is not named by "climate")."""
    return re.search(rf"\b{re.escape(_plain(city))}\b", plain_text) is not None


class CapitalsEnv(Environment):
    name = "capitals"
    description = "Capital cities asked in a plain chat turn, no tools: a retention check, not a training task"
    instructions = ""
    thought_required = False

    def __init__(self) -> None:
        self.toolbox = ToolBox([])

    def tasks(self, split: Split) -> list[Task]:
        table = HELDOUT if split == "heldout" else TRAIN
        return [
            Task(
                id=f"capital-{country.lower().replace(' ', '_')}",
                prompt=f"What is the capital of {country}?",
                answer=city,
                truth=city,
                kind="capital",
                needs_tools=False,
                reference_answer=f"The capital of {country} is {city}.",
            )
            for country, city in table.items()
        ]

    def messages(self, task: Task) -> list[dict[str, str]]:
        """The question alone, as a person would ask it (the chat template adds the model's own default system)."""
        return [{"role": "user", "content": task.prompt}]

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        """The capital is named and no other capital of the list is (a list of guesses is not an answer)."""
        said = _plain(final_answer)
        others = sorted(c for c in _CITIES if c != task.truth and _names(said, c))
        if not _names(said, task.truth):
            return Verdict(False, f"{task.truth} is not named" + (f" ({others[0]} is)" if others else ""))
        if others:
            return Verdict(False, f"hedged: {task.truth} and {others[0]} are both named")
        return Verdict(True, f"correct: {task.truth}")
