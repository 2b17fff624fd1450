"""`finance`: quarterly reports of fictional companies, a search tool and a calculator.

The facts are generated (fixed corpus seed), so a model cannot answer from memory: it has to look the report up
and compute. Train and held-out splits are disjoint by company (10 of 48 companies held out).

`finance_shifted` (`FinanceEnv(shifted=True)`) asks the same tasks through tools a policy trained on `finance` never
saw: `lookup_filing(company_and_period)` answers a JSON object of named fields instead of a prose line, and
`evaluate_math(formula)` answers `{"value": ...}` instead of `{"result": ...}`; the descriptions are reworded and
the system prompt lists these tools only. Task ids, splits, ground truth, the 404/300 rules of the search and the
verifier are the same; the reference solutions call the new tools.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from rank_bm25 import BM25Okapi

from grpolab.envs.base import Environment, Evidence, Split, Task, Verdict
from grpolab.envs.numeric import numbers_in, numeric_verdict, result_sentence_end
from grpolab.tools import Tool, ToolBox, calculator

CORPUS_SEED = 20251
YEAR = 2025
HELDOUT_COMPANIES = 10
_FIRST = [
    "Acme",
    "Borealis",
    "Cobalt",
    "Dunmore",
    "Evergreen",
    "Falcon",
    "Granite",
    "Harbor",
    "Ironwood",
    "Juniper",
    "Keystone",
    "Lumen",
    "Meridian",
    "Northwind",
    "Obsidian",
    "Pinnacle",
    "Quarry",
    "Redwood",
    "Summit",
    "Tidewater",
    "Umbra",
    "Vantage",
    "Willow",
    "Xylo",
    "Yardley",
    "Zephyr",
    "Aurora",
    "Beacon",
    "Cascade",
    "Driftwood",
    "Ember",
    "Fjord",
    "Glacier",
    "Helix",
    "Indigo",
    "Jasper",
    "Kestrel",
    "Larkspur",
    "Mistral",
    "Nimbus",
    "Orchid",
    "Prairie",
    "Quasar",
    "Ridgeline",
    "Saffron",
    "Thistle",
    "Upland",
    "Verdant",
]
_SECOND = ["Corp", "Industries", "Systems", "Holdings", "Labs", "Dynamics", "Foods", "Energy", "Logistics", "Media"]


@dataclass(frozen=True)
class QuarterReport:
    ticker: str
    company: str
    quarter: int
    revenue_b: float
    eps: float
    eps_estimate: float
    baseline: float
    close: float

    @property
    def verdict(self) -> str:
        return "beat" if self.eps > self.eps_estimate else "miss"

    @property
    def text(self) -> str:
        beat = "beating" if self.verdict == "beat" else "missing"
        return (
            f"{self.ticker} ({self.company}) Q{self.quarter} {YEAR} report: revenue ${self.revenue_b:.1f}B; "
            f"EPS ${self.eps:.2f} vs estimate ${self.eps_estimate:.2f}, {beat} estimates. "
            f"Baseline price ${self.baseline:.2f}, close ${self.close:.2f}."
        )

    @property
    def filing(self) -> dict[str, Any]:
        """The report as `lookup_filing` (finance_shifted) answers it: the same facts as named fields."""
        return {
            "ticker": self.ticker,
            "company": self.company,
            "period": f"Q{self.quarter} {YEAR}",
            "revenue_usd_billions": self.revenue_b,
            "eps": self.eps,
            "eps_consensus": self.eps_estimate,
            "eps_vs_consensus": self.verdict,
            "baseline_price": self.baseline,
            "close_price": self.close,
        }


def build_corpus() -> list[QuarterReport]:
    """48 companies x 4 quarters; ACME Q3 is the fixed example the prompts and docs use ($120 -> $137, revenue
    $4.2B, a beat)."""
    rng = random.Random(CORPUS_SEED)
    reports = []
    seen: set[str] = set()
    for i, first in enumerate(_FIRST):
        company = f"{first} {_SECOND[i % len(_SECOND)]}"
        ticker = first[:4].upper()
        while ticker in seen:
            ticker = ticker[:3] + chr(ord("A") + rng.randrange(26))
        seen.add(ticker)
        revenue = round(rng.uniform(0.5, 9.0), 1)
        price = round(rng.uniform(20, 300), 2)
        for q in range(1, 5):
            revenue = round(max(0.2, revenue * rng.uniform(0.85, 1.2)), 1)
            estimate = round(rng.uniform(0.2, 3.5), 2)
            eps = round(estimate + rng.choice([-1, 1]) * rng.uniform(0.01, 0.4), 2)
            if eps == estimate:
                eps = round(eps + 0.03, 2)
            baseline = price
            close = round(baseline * rng.uniform(0.8, 1.25), 2)
            if ticker == "ACME" and q == 3:
                revenue, baseline, close, estimate, eps = 4.2, 120.0, 137.0, 1.18, 1.31
            reports.append(QuarterReport(ticker, company, q, revenue, eps, estimate, baseline, close))
            price = close
    return reports


def evaluate_math(formula: str) -> dict[str, Any]:
    """Compute the value of a numeric formula without rounding unless asked, e.g. a ratio as (a - b) / b * 100.

    Args:
        formula: Numbers joined by + - * / ** with brackets; round(x, 2) rounds, e.g. "round((9 - 6) / 6 * 100, 2)".
    """
    out = calculator(formula)  # the same maths and errors as finance's calculator, under another key
    return {"value": out["result"]} if "result" in out else out


@dataclass(frozen=True)
class _Surface:
    """What a policy sees of the finance tools: their names and argument names, and the instructions."""

    search: str
    search_arg: str
    calc: str
    calc_arg: str
    description: str
    instructions: str


_ORIGINAL = _Surface(
    "financial_search",
    "query",
    "calculator",
    "expression",
    "Fictional companies' quarterly reports: financial_search + calculator; % change, growth, EPS beat/miss",
    "You are a financial analyst agent. Facts about companies are only available through financial_search; "
    "compute every number with calculator, rounded to two decimals inside it: round(EXPRESSION, 2). Answer in "
    "one sentence with that result.",
)
_SHIFTED = _Surface(
    "lookup_filing",
    "company_and_period",
    "evaluate_math",
    "formula",
    "The finance tasks behind renamed tools (lookup_filing + evaluate_math) with JSON filings: a tool-shift test",
    "You answer questions about company filings. Get every fact with lookup_filing (one company and quarter per "
    "lookup) and work out every number with evaluate_math, rounding to two decimals inside the formula: "
    "round(FORMULA, 2). Reply with one sentence that states the result.",
)


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class FinanceEnv(Environment):
    """The finance environment; `shifted=True` is `finance_shifted` (see the module's docstring)."""

    name = "finance"
    description = _ORIGINAL.description
    instructions = _ORIGINAL.instructions

    def __init__(self, task_kinds: list[str] | None = None, shifted: bool = False):
        self.shifted = shifted
        self._surface = _SHIFTED if shifted else _ORIGINAL
        if shifted:
            self.name = "finance_shifted"
        self.description, self.instructions = self._surface.description, self._surface.instructions
        self.corpus = build_corpus()
        self._bm25 = BM25Okapi([_tokens(r.text) for r in self.corpus])
        self._company_words = {
            w: r.ticker for r in self.corpus for w in (r.ticker.lower(), r.company.split()[0].lower())
        }
        """Words that name a company (its ticker, its first name) -> its ticker; the search answers only those."""
        if shifted:
            self.toolbox = ToolBox([Tool(self.lookup_filing), Tool(evaluate_math)])
        else:
            self.toolbox = ToolBox([Tool(self.financial_search), Tool(calculator)])
        self.task_kinds = task_kinds or ["pct_change", "revenue_growth", "eps_surprise"]
        acme = self.report("ACME", 3)
        self.example = "User: By what percent did ACME stock change in Q3?\n" + self.reference_transcript(
            self._pct_change(acme)
        ).replace("ACME's stock", "ACME stock")

    def financial_search(self, query: str) -> dict[str, Any]:
        """Search the quarterly-report database and return the best-matching report of the company the query names.

        Args:
            query: Keywords such as a ticker and a quarter, e.g. "ACME Q3".
        """
        found = self._find(query)
        if isinstance(found, QuarterReport):
            return {"status": 200, "result": found.text}
        status, problem = found
        if status == 300:
            problem += "; search one at a time"
        return {"status": status, "result": problem}

    def lookup_filing(self, company_and_period: str) -> dict[str, Any]:
        """Fetch one company's quarterly filing as named fields (revenue, EPS against consensus, prices).

        Args:
            company_and_period: The company's ticker or name and the quarter, e.g. "FALC Q2".
        """
        found = self._find(company_and_period)
        if isinstance(found, QuarterReport):
            return {"status": 200, "filing": found.filing}
        status, problem = found
        if status == 300:
            problem += "; look up one company at a time"
        return {"status": status, "message": problem.replace("no report", "no filing")}

    def _find(self, query: str) -> QuarterReport | tuple[int, str]:
        """The best-ranked report of the one company the query names, or (404 or 300, why not)."""
        tokens = _tokens(query)[:50]
        named = sorted({self._company_words[t] for t in tokens if t in self._company_words})
        if not named:  # ranking every page by shared words would hand back another company's numbers
            return 404, "no report: name a company by its ticker, e.g. ACME Q3"
        if len(named) > 1:
            return 300, f"ambiguous: the query names {', '.join(named)}"
        scores = self._bm25.get_scores(tokens)
        pages = [i for i, r in enumerate(self.corpus) if r.ticker == named[0]]
        return self.corpus[max(pages, key=lambda i: scores[i])]

    def _search_call(self, r: QuarterReport) -> tuple[str, dict[str, str]]:
        """A reference lookup of one report, under this env's tool and argument names."""
        return (self._surface.search, {self._surface.search_arg: f"{r.ticker} Q{r.quarter}"})

    def _calculation(self, expression: str) -> tuple[str, dict[str, str]]:
        """A reference calculator call that rounds inside the tool, as the instructions ask (so an imitating model
        copies the rounded digits instead of truncating the unrounded ones)."""
        return (self._surface.calc, {self._surface.calc_arg: f"round({expression}, 2)"})

    def report(self, ticker: str, quarter: int) -> QuarterReport:
        return next(r for r in self.corpus if r.ticker == ticker and r.quarter == quarter)

    @cached_property
    def _split_tickers(self) -> dict[Split, list[str]]:
        tickers = sorted({r.ticker for r in self.corpus})
        random.Random(CORPUS_SEED + 1).shuffle(tickers)
        heldout = [t for t in tickers if t != "ACME"][:HELDOUT_COMPANIES]
        return {"train": sorted(set(tickers) - set(heldout)), "heldout": sorted(heldout)}

    def tasks(self, split: Split) -> list[Task]:
        out = []
        for ticker in self._split_tickers[split]:
            quarters = [self.report(ticker, q) for q in range(1, 5)]
            for r in quarters:
                if "pct_change" in self.task_kinds:
                    out.append(self._pct_change(r))
                if "eps_surprise" in self.task_kinds:
                    out.append(self._eps_surprise(r))
            if "revenue_growth" in self.task_kinds:
                out.extend(self._revenue_growth(a, b) for a, b in zip(quarters, quarters[1:]))
        return out

    def _pct_change(self, r: QuarterReport) -> Task:
        truth = (r.close - r.baseline) / r.baseline * 100
        return Task(
            id=f"pct_change-{r.ticker}-Q{r.quarter}",
            kind="pct_change",
            prompt=(
                f"By what percent did {r.ticker} stock change in Q{r.quarter}, from the baseline price to the close?"
            ),
            answer=f"{truth:.2f}",
            truth=truth,
            reference_thought=f"I need the {r.ticker} Q{r.quarter} report, then (close - baseline) / baseline * 100.",
            reference_calls=[
                self._search_call(r),
                self._calculation(f"({r.close:.2f} - {r.baseline:.2f}) / {r.baseline:.2f} * 100"),
            ],
            reference_answer=(
                f"{r.ticker}'s stock changed by {truth:.2f}% in Q{r.quarter} "
                f"(from ${r.baseline:.2f} to ${r.close:.2f})."
            ),
        )

    def _revenue_growth(self, a: QuarterReport, b: QuarterReport) -> Task:
        truth = (b.revenue_b - a.revenue_b) / a.revenue_b * 100
        return Task(
            id=f"revenue_growth-{a.ticker}-Q{a.quarter}Q{b.quarter}",
            kind="revenue_growth",
            prompt=f"By what percent did {a.ticker} revenue change from Q{a.quarter} to Q{b.quarter}?",
            answer=f"{truth:.2f}",
            truth=truth,
            reference_thought=f"I need both reports, then (Q{b.quarter} - Q{a.quarter}) / Q{a.quarter} * 100.",
            reference_calls=[
                self._search_call(a),
                self._search_call(b),
                self._calculation(f"({b.revenue_b:.1f} - {a.revenue_b:.1f}) / {a.revenue_b:.1f} * 100"),
            ],
            reference_answer=(
                f"{a.ticker}'s revenue changed by {truth:.2f}% from Q{a.quarter} to Q{b.quarter} "
                f"(${a.revenue_b:.1f}B to ${b.revenue_b:.1f}B)."
            ),
        )

    def _eps_surprise(self, r: QuarterReport) -> Task:
        diff = r.eps - r.eps_estimate
        return Task(
            id=f"eps_surprise-{r.ticker}-Q{r.quarter}",
            kind="eps_surprise",
            prompt=f"Did {r.ticker} beat or miss its EPS estimate in Q{r.quarter}, and by how much per share?",
            answer=f"{r.verdict} by {abs(diff):.2f}",
            truth={"verdict": r.verdict, "diff": diff},
            reference_thought=f"I need the {r.ticker} Q{r.quarter} report, then EPS minus the estimate.",
            reference_calls=[
                self._search_call(r),
                self._calculation(f"{r.eps:.2f} - {r.eps_estimate:.2f}"),
            ],
            reference_answer=(
                f"{r.ticker} {'beat' if r.verdict == 'beat' else 'missed'} its Q{r.quarter} EPS estimate by "
                f"${abs(diff):.2f} per share (EPS ${r.eps:.2f} vs estimate ${r.eps_estimate:.2f})."
            ),
        )

    def answer_end(self, answer: str, evidence: Evidence) -> int | None:
        """The instructions ask for one sentence with the result: the answer ends with the first sentence that
        states a number the calculator returned (not a looked-up fact: "PINN Q4 report: EPS $0.09 vs estimate
        $0.39." is not the answer)."""
        calculated = [n for name, resp in evidence.responses if name != self._surface.search for n in numbers_in(resp)]
        return result_sentence_end(answer, calculated)

    def verify(self, task: Task, final_answer: str, evidence: Evidence) -> Verdict:
        context = numbers_in(evidence.prompt)
        context += [n for _, args in evidence.calls for n in numbers_in(args)]
        context += [n for name, resp in evidence.responses if name == self._surface.search for n in numbers_in(resp)]
        grounding = [n for _, resp in evidence.responses for n in numbers_in(resp)]
        if task.kind == "eps_surprise":
            words = set(re.findall(r"\b(beat|beats|missed|miss|misses)\b", final_answer.lower()))
            said = {"beat" if w.startswith("beat") else "miss" for w in words}
            if len(said) != 1:
                return Verdict(False, "say exactly one of beat or miss" if said else "no beat/miss verdict")
            if said.pop() != task.truth["verdict"]:
                return Verdict(False, f"wrong verdict: it was a {task.truth['verdict']}")
            return numeric_verdict(final_answer, task.truth["diff"], context, grounding, signed=False)
        return numeric_verdict(final_answer, task.truth, context, grounding, signed=True)


def finance_shifted() -> FinanceEnv:
    """`finance_shifted`: the finance tasks behind renamed tools, for evaluation on tools never trained on."""
    return FinanceEnv(shifted=True)
