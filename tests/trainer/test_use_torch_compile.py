"""`actor.use_torch_compile` switches an RL stage's training forward to the compiled lean forward."""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.config.load import load_config
from posttrain.modeling import lean_forward
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext


@pytest.fixture
def files(tmp_path):
    model = make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", tmp_path / "data", train=8, test=4, sft=0, dpo=0)
    yield tmp_path, Path(model)
    lean_forward.set_mode("off")  # process-wide: leave it as the other tests expect


def _trainer(files, compile_: bool) -> RLTrainer:
    root, model = files
    cfg = load_config(None, [
        f"model.path={model}", f"data.train_files={root}/data/train.parquet", "data.max_prompt_length=32",
        "data.max_response_length=4", "data.train_batch_size=4", "rollout.n=2", "actor.ppo_mini_batch_size=4",
        "actor.ppo_micro_batch_size_per_gpu=8", "trainer.total_training_steps=1", "trainer.logger=[]",
        f"actor.use_torch_compile={str(compile_).lower()}",
    ])
    return RLTrainer(StageContext(name="main", cfg=cfg, run_dir=root / f"run-{compile_}", model_path=str(model)))


def test_the_flag_selects_the_compiled_lean_forward_and_its_absence_resets_it(files):
    _trainer(files, True)
    assert lean_forward.MODE == "compiled"
    _trainer(files, False)
    assert lean_forward.MODE == "off"
