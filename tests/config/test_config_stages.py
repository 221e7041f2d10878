"""Multi-stage runs: each stage is the base config plus its overrides, validated with stage paths."""

from __future__ import annotations

import pytest

from posttrain.config import Stage, load_config, stage_configs
from posttrain.errors import ConfigError

BASE = """
data: {train_batch_size: 8}
rollout: {n: 2}
actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4, ppo_epochs: 1}
algorithm: {adv_estimator: grpo}
"""


def load(tmp_path, stages: str):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + stages)
    return load_config(path)


def test_without_stages_there_is_one_main_stage(tmp_path):
    cfg = load(tmp_path, "")
    assert stage_configs(cfg) == [Stage("main", cfg)]


def test_each_stage_inherits_from_the_base_not_from_the_previous_stage(tmp_path):
    cfg = load(
        tmp_path,
        "stages:\n"
        "  - {name: warm, actor: {ppo_epochs: 3}}\n"
        "  - {name: main, data: {train_batch_size: 4}}\n",
    )
    warm, main = stage_configs(cfg)
    assert (warm.name, warm.config.actor.ppo_epochs, warm.config.data.train_batch_size) == ("warm", 3, 8)
    assert (main.name, main.config.actor.ppo_epochs, main.config.data.train_batch_size) == ("main", 1, 4)
    assert main.config.rollout.n == 2 and main.config.stages == []


def test_stage_errors_name_the_stage_path(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(
            tmp_path,
            "stages:\n"
            "  - {name: a, actor: {ppo_epochs: 0}}\n"
            "  - {name: b, actor: {ppo_epoch: 2}}\n"
            "  - {actor: {ppo_epochs: 2}}\n"
            "  - {name: a}\n"
            "  - {name: c, stages: []}\n",
        )
    where = f"{tmp_path / 'c.yaml'}: "  # every problem names the file it is in
    assert info.value.problems == [
        where + "stages[0].actor.ppo_epochs: must be >= 1, got 0",
        where + "stages[1].actor.ppo_epoch: unknown key; did you mean stages[1].actor.ppo_epochs?",
        where + "stages[2].name: every stage needs a name (a non-empty string), got null",
        where + "stages[3].name: stage name 'a' is used twice; stage names must be unique",
        where + "stages[4].stages: a stage cannot contain stages; list all stages at the top level",
    ]


def test_cross_field_rules_run_per_stage(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "stages:\n  - {name: rl, actor: {ppo_mini_batch_size: 3}}\n")
    assert info.value.problems == [
        f"{tmp_path / 'c.yaml'}: stages[0] (rl): data.train_batch_size (8) is not divisible by actor.ppo_mini_batch_size (3): each "
        "step's prompts are split into equal mini-batches; use one of 1, 2, 4, 8"
    ]


def test_stages_must_be_a_list_of_mappings(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "stages: {name: x}\n")
    assert info.value.problems == [f"{tmp_path / 'c.yaml'}: stages: expected a list of mappings, got {{'name': 'x'}}"]


TWO_STAGES = "stages:\n  - {name: sft, algorithm: {kind: sft}, trainer: {total_training_steps: 2}}\n  - name: rl\n"


@pytest.mark.parametrize("key", ["stages.1", "stages[1]", "stages.rl"])
def test_one_stage_is_overridden_by_index_or_name(tmp_path, key):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + TWO_STAGES)
    cfg = load_config(path, [f"{key}.trainer.total_training_steps=50", "stages.sft.actor.optim.lr=0.5", "trainer.total_training_steps=7"])
    sft, rl = stage_configs(cfg)
    assert rl.config.trainer.total_training_steps == 50 and rl.config.actor.optim.lr == load_config(path).actor.optim.lr
    assert sft.config.trainer.total_training_steps == 2 and sft.config.actor.optim.lr == 0.5  # the stage's own key stays
    assert cfg.trainer.total_training_steps == 7 and cfg.stages[1] == {"name": "rl", "trainer": {"total_training_steps": 50}}


def test_stage_override_problems_name_the_override_as_typed(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + TWO_STAGES)
    cases = {
        "stages.rl.trainer.total_training_steps=0":
            "command line override 'stages.rl.trainer.total_training_steps=0': stages[1].trainer.total_training_steps: must be >= 1, got 0",
        "stages.1.actor.ppo_mini_batch_size=3":
            "command line override 'stages.1.actor.ppo_mini_batch_size=3': stages[1] (rl): data.train_batch_size (8) is not "
            "divisible by actor.ppo_mini_batch_size (3): each step's prompts are split into equal mini-batches; use one of 1, 2, 4, 8",
        "stages.2.trainer.total_training_steps=5":
            "command line override 'stages.2.trainer.total_training_steps=5': no stage '2'; the config's stages are 0: sft, 1: rl "
            "(name one by index or name)",
        "stages.ppo.trainer.total_training_steps=5":
            "command line override 'stages.ppo.trainer.total_training_steps=5': no stage 'ppo'; the config's stages are 0: sft, 1: rl "
            "(name one by index or name)",
        "stages.rl=5": "command line override 'stages.rl=5': expected stages.<index or name>.<key>=value, e.g. "
            "stages.1.trainer.total_training_steps=50 or stages.rl.trainer.total_training_steps=50",
    }
    for override, expected in cases.items():
        with pytest.raises(ConfigError) as info:
            load_config(path, [override])
        assert info.value.problems == [expected], override
    path.write_text(BASE)
    with pytest.raises(ConfigError, match="'stages.0.trainer.seed=1': the config has no stages to override"):
        load_config(path, ["stages.0.trainer.seed=1"])
