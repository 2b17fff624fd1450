"""What `rollout.stop_at_answer` would have changed in recorded runs: the rule applied to their transcripts.

    .venv/bin/python benchmarks/answer_stop_replay.py RUN_DIR [RUN_DIR ...] [--results NAME]

For every recorded episode (training samples in episodes.jsonl, greedy held-out answers in eval/*.jsonl) of runs
made without the rule, cut the first turn after a tool response where the environment says the answer ends (the
same function the rollout calls, `grpolab.engine.rollout.answer_end_in_turn`) and score the cut transcript again
with the run's scorer.
Reported per source: how many episodes the rule would end early, the policy tokens it would save, and completion
(the verifier) before and after the cut, with the episodes it turns to solved and to failed. This is an offline
estimate: a policy trained with the rule would also sample differently after the answer (it never sees the rambling
it no longer pays for). No model runs; seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from common import solved, write_results

from grpolab.engine.rollout import answer_end_in_turn, answer_start
from grpolab.envs import env_for
from grpolab.models import load_tokenizer
from grpolab.protocol import TOOL_RESPONSE_CLOSE
from grpolab.rewards.replay import replay as replay_transcript
from grpolab.rewards.score import score_transcript
from grpolab.rundir import RunDir


def cut(env: Any, task: Any, text: str) -> str | None:
    """The transcript ended where the rule would have ended it, or None where the rule would not fire. Every turn
    after a tool response is tried in order, as the rollout does, on its text before the next tag (a call): the rule
    decides before that tag is sampled, with the evidence of the responses so far."""
    start = 0
    while (at := text.find(TOOL_RESPONSE_CLOSE, start)) >= 0:
        start = at + len(TOOL_RESPONSE_CLOSE)
        head, turn = text[:start], text[start:]
        skip = answer_start(turn)
        if skip is None:  # a thought never closed: no answer in this turn
            continue
        tag = turn.find("<", skip)
        before_tag = turn if tag < 0 else turn[:tag]
        evidence = replay_transcript(env, task, head).evidence
        assert evidence is not None
        end = answer_end_in_turn(env, before_tag, evidence)
        if end is not None and end < len(turn.rstrip()):
            return head + turn[:end]
    return None


def replay(rows: list[dict[str, Any]], env: Any, cfg: Any, tok: Any) -> dict[str, Any]:
    """Over episode rows of one source: how many the rule ends early, the policy tokens it saves, and how many are
    solved before and after the cut (with those it turns to solved and to failed)."""
    n = fired = saved = before = after = gained = lost = 0
    for row in rows:
        task = env.task(row["task_id"])
        was = solved(row) == 1.0
        n += 1
        before += was
        short = cut(env, task, row["text"])
        if short is None:
            after += was
            continue
        fired += 1
        rest = row["text"][len(short) :]
        saved += len(tok(rest, add_special_tokens=False)["input_ids"])
        score = score_transcript(
            env,
            task,
            short,
            cfg.reward.weights,
            cfg.reward.length_unit,
            count_tokens=len,
            thought_min_words=cfg.reward.thought_min_words,
        )
        now = score.components.get("completion") == 1.0
        after += now
        gained += now and not was
        lost += was and not now
    return {
        "episodes": n,
        "ended_early": fired,
        "tokens_saved": saved,
        "solved_before": before,
        "solved_after": after,
        "gained": gained,
        "lost": lost,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--results", default="answer_stop_replay")
    args = parser.parse_args()
    tok = None
    out: dict[str, Any] = {}
    for path in args.runs:
        run = RunDir(path)
        cfg = run.read_config()
        env = env_for(cfg)
        tok = tok or load_tokenizer(cfg.model)
        sources = {"train": run.episodes()}
        labels = run.eval_labels()
        if labels:
            sources[f"eval@{labels[-1]}"] = run.eval_rows(labels[-1])
        out[path.name] = {name: replay(rows, env, cfg, tok) for name, rows in sources.items()}
        for name, r in out[path.name].items():
            print(
                f"{path.name:>16} {name:>8}: {r['ended_early']:3d}/{r['episodes']} ended early, "
                f"{r['tokens_saved']} tokens saved, solved {r['solved_before']} -> {r['solved_after']} "
                f"(+{r['gained']} -{r['lost']})"
            )
    write_results(args.results, out, indent=1)


if __name__ == "__main__":
    main()
