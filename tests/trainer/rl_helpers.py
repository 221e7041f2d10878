"""A tiny RL stage for the trainer tests (a module name no other test folder uses): a 1-layer
model and the sort task, built locally, and an `RLTrainer` of one step over them."""

from __future__ import annotations

from pathlib import Path

from posttrain.config.load import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext

# 4 prompts x 2 responses of up to 6 tokens, one mini-batch, one micro-batch, one step, no trackers.
BASE = [
    "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4", "rollout.n=2",
    "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=8", "trainer.total_training_steps=1",
    "trainer.logger=[]",
]


def tiny_rl_files(root: Path, train: int = 8) -> tuple[Path, Path]:
    """(root, model directory) with the model under root/model and the task under root/data."""
    model = make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=train, test=4, sft=0, dpo=0)
    return root, Path(model)


def tiny_rl_trainer(files: tuple[Path, Path], *overrides: str, run: str = "run") -> RLTrainer:
    """An RL stage over `tiny_rl_files`; `overrides` come after `BASE`, so they win."""
    root, model = files
    cfg = load_config(None, [f"model.path={model}", f"data.train_files={root}/data/train.parquet", *BASE, *overrides])
    return RLTrainer(StageContext(name="main", cfg=cfg, run_dir=root / run, model_path=str(model)))
