"""A DAPO launch line (verl's `reward_model.reward_manager=dapo` with the manager's reward_kwargs, and
dynamic sampling added with `+`, as verl's DAPO example scripts write them) through `--dialect verl`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dapo_line")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=16, test=4)
    return root


def dapo_line(root: Path, *extra: str) -> list[str]:
    return [
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=False",
        f"data.train_files={root}/data/train.parquet", f"data.val_files={root}/data/test.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=32", "data.max_response_length=16",
        f"actor_rollout_ref.model.path={root}/model", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "reward_model.reward_manager=dapo",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.log=False",
        "+reward_model.reward_kwargs.max_resp_len=16",
        "+algorithm.filter_groups.enable=True", "+algorithm.filter_groups.metric=acc",
        "+algorithm.filter_groups.max_num_gen_batches=10", "+data.gen_batch_size=8",
        "trainer.logger=[\"console\"]", "trainer.total_epochs=1", f"trainer.default_local_dir={root}/run", *extra,
    ]


def test_a_dapo_launch_line_lands_on_the_dapo_manager_overlong_buffer_and_dynamic_sampling(inputs, capsys):
    assert main(["config", "show", "--dialect", "verl", *dapo_line(inputs)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["reward"]["reward_manager"] == "dapo"
    assert shown["reward"]["overlong_buffer"] == {"enable": True, "len": 4, "penalty_factor": 1.0, "log": False, "max_resp_len": 16}
    assert shown["algorithm"]["filter_groups"] == {"enable": True, "metric": "acc", "max_num_gen_batches": 10, "std_threshold": None}
    assert shown["data"]["gen_batch_size"] == 8  # verl's DAPO lines sample rounds of gen_batch_size prompts
    # another keyword argument of verl's reward managers is refused by name, with what posttrain reads instead
    assert main(["config", "plan", "--dialect", "verl", *dapo_line(inputs, "+reward_model.reward_kwargs.num_examine=2")]) == 2
    assert "reward_model.reward_kwargs.num_examine: not supported: keyword arguments of verl's reward manager classes" in capsys.readouterr().err
    # verl's prime manager (a process pool) is posttrain's parallel one
    assert main(["config", "show", "--dialect", "verl", *dapo_line(inputs, "reward_model.reward_manager=prime")]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["reward"]["reward_manager"] == "parallel"
    # verl asserts max_resp_len >= overlong_buffer_cfg.len; posttrain refuses it at load
    assert main(["config", "plan", "--dialect", "verl", *dapo_line(inputs, "++reward_model.reward_kwargs.max_resp_len=3")]) == 2
    assert "reward.overlong_buffer.len (4) must be between 1 and max_resp_len (3)" in capsys.readouterr().err


# The DAPO recipe's trainer YAML: verl's tree plus the keys its trainer reads (recipe/dapo's
# dapo_trainer.yaml has these keys and defaults), so its launch lines set them without `+`.
RECIPE_YAML = """
hydra:
  searchpath: [file://verl/trainer/config]
defaults: [ppo_trainer, _self_]
data:
  gen_batch_size: ${data.train_batch_size}
reward_model:
  reward_manager: dapo
  overlong_buffer: {enable: false, len: 0, penalty_factor: 0.0, log: false}
algorithm:
  filter_groups: {_target_: verl.trainer.config.FilterGroupsConfig, enable: false, metric: null, max_num_gen_batches: 0}
"""


def test_a_dapo_recipe_line_over_the_recipe_yaml(inputs, tmp_path, capsys):
    (tmp_path / "dapo_trainer.yaml").write_text(RECIPE_YAML)
    words = [f"data.train_files={inputs}/data/train.parquet", f"actor_rollout_ref.model.path={inputs}/model",
             "algorithm.adv_estimator=grpo", "data.train_batch_size=2", "data.gen_batch_size=6", "data.max_response_length=16",
             "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=4",
             "reward_model.overlong_buffer.enable=True", "reward_model.overlong_buffer.len=4", "reward_model.overlong_buffer.penalty_factor=1.0",
             "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=seq_reward", "algorithm.filter_groups.max_num_gen_batches=5"]
    assert main(["config", "show", "--dialect", "verl", "--config-path", str(tmp_path), "--config-name", "dapo_trainer", *words]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["data"]["gen_batch_size"] == 6 and shown["reward"]["reward_manager"] == "dapo"
    assert shown["reward"]["overlong_buffer"] == {"enable": True, "len": 4, "penalty_factor": 1.0, "log": False, "max_resp_len": None}
    assert shown["algorithm"]["filter_groups"] == {"enable": True, "metric": "seq_reward", "max_num_gen_batches": 5, "std_threshold": None}
