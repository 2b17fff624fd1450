"""The same environment and reward functions on TRL's GRPOTrainer, as a TRL user runs them (no grpolab import).

    python train_trl.py          # needs trl >= 1.16, transformers >= 5.2 and a model whose chat template has tools

grpolab runs this very ShopEnv and these rewards with `grpolab check --config config.toml` and `grpolab train
--config config.toml --out runs/shop`: config.toml names them, tasks.jsonl holds the rows below.
"""

import json
import sys
from pathlib import Path

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from rewards import names_order, no_stray_writes  # noqa: E402
from shop import ShopEnv  # noqa: E402


def dataset(split: str) -> Dataset:
    """tasks.jsonl as TRL reads a dataset: a conversational prompt, the answer, and each meta key as a column."""
    rows = [json.loads(line) for line in (HERE / "tasks.jsonl").read_text().splitlines() if line.strip()]
    return Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"], **r["meta"]}
            for r in rows
            if r.get("split", "train") == split
        ]
    )


def main() -> None:
    trainer = GRPOTrainer(
        model=sys.argv[1] if len(sys.argv) > 1 else "Qwen/Qwen3-0.6B",
        reward_funcs=[names_order, no_stray_writes],  # ShopEnv.get_reward is added by TRL, weight 1
        args=GRPOConfig(
            output_dir="shop-grpo",
            reward_weights=[0.5, 0.5],
            num_generations=8,
            per_device_train_batch_size=8,
            max_completion_length=512,
            max_steps=10,
            logging_steps=1,
            report_to="none",
        ),
        train_dataset=dataset("train"),
        environment_factory=ShopEnv,
    )
    trainer.train()


if __name__ == "__main__":
    main()
