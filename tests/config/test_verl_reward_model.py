"""verl's reward model through `--dialect verl` on both of its paths (posttrain.config.dialects.verl_reward):
the reward loop (use_reward_loop, verl's default) and the legacy worker land on posttrain's reward model
with the inputs verl gives it, and its score is the whole reward."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.config.dialects.verl_launch import launch
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

POLICY, RM = "/models/policy", "/models/rm"
# The reward-model keys of verl's examples/ppo_trainer/run_qwen2-7b_rm.sh (its reward loop).
LOOP_LINE = [
    f"actor_rollout_ref.model.path={POLICY}", "data.return_raw_chat=True",
    "reward_model.enable=True", f"reward_model.model.path={RM}", "reward_model.use_reward_loop=True",
    "reward_model.rollout.name=vllm", "reward_model.rollout.gpu_memory_utilization=0.8",
    "reward_model.rollout.tensor_model_parallel_size=1", "reward_model.rollout.prompt_length=2048",
    "reward_model.rollout.response_length=1024", "reward_model.num_workers=8",
]


def _translate(*words: str) -> tuple[dict, dict]:
    """(native dict, {key: [(status, native, value, reason)]}) of a verl launch line."""
    native, report, _ = launch(None, list(words))
    entries: dict = {}
    for e in report.entries:
        entries.setdefault(e.key, []).append((e.status, e.native, e.value, e.reason))
    return native, entries


def test_the_reward_loop_lands_on_posttrain_s_reward_model_with_the_loop_s_inputs():
    native, entries = _translate(*LOOP_LINE, "reward_model.max_length=16", "reward_model.model.input_tokenizer=/elsewhere")
    rm = native["reward"]["reward_model"]
    assert rm["enable"] is True and rm["path"] == RM
    assert native["reward"]["function_weight"] == 0.0  # verl takes the model's score as the reward
    assert rm["input_tokenizer"] == POLICY  # the loop decodes with the policy's tokenizer, not model.input_tokenizer
    assert "max_length" not in rm  # the loop never truncates
    assert native["data"]["return_raw_chat"] is True
    assert rm["param_offload"] is True  # free_cache_engine (verl's default true): the engine sleeps between passes
    for key in ("reward_model.max_length", "reward_model.model.input_tokenizer"):
        assert entries[key][0][0] == "dropped" and "legacy reward-model worker" in entries[key][0][3]
    for key in ("reward_model.num_workers", "reward_model.use_reward_loop", "reward_model.rollout.name",
                "reward_model.rollout.gpu_memory_utilization", "reward_model.rollout.prompt_length"):
        assert [e[0] for e in entries[key]] == ["dropped"], key
    assert not [k for k, v in entries.items() if any(e[0] == "refused" for e in v)]


def test_free_cache_engine_false_keeps_the_reward_model_on_the_device():
    native, _ = _translate(*LOOP_LINE, "reward_model.rollout.free_cache_engine=False")
    assert native["reward"]["reward_model"]["param_offload"] is False


def test_the_legacy_worker_reads_its_own_keys_and_param_offload():
    native, entries = _translate(*LOOP_LINE[:4], "reward_model.use_reward_loop=False", "reward_model.max_length=16",
                                 "reward_model.model.fsdp_config.param_offload=True", "reward_model.model.input_tokenizer=/elsewhere")
    rm = native["reward"]["reward_model"]
    assert (rm["max_length"], rm["input_tokenizer"], rm["param_offload"]) == (16, "/elsewhere", True)
    assert rm["truncation"] == "right"  # verl's postprocess_data(truncation="right") keeps the beginning
    assert native["reward"]["function_weight"] == 0.0
    legacy = [*LOOP_LINE[:4], "reward_model.use_reward_loop=False", "data.max_prompt_length=32", "data.max_response_length=16"]
    native, _ = _translate(*legacy)
    rm = native["reward"]["reward_model"]
    assert "param_offload" not in rm  # verl's default false: on the device
    assert (rm["max_length"], rm["truncation"]) == (48, "right")  # null: the policy's sequence width, 32 + 16
    native, entries = _translate(*legacy, "reward_model.model.input_tokenizer=null", "reward_model.max_length=16")
    assert "max_length" not in native["reward"]["reward_model"] and "truncation" not in native["reward"]["reward_model"]
    assert entries["reward_model.max_length"][0][0] == "dropped"  # without the template switch verl never reads it
    native, entries = _translate(*legacy, "+reward_model.truncation=left")
    assert native["reward"]["reward_model"]["truncation"] == "left"
    _, entries = _translate(*legacy, "+reward_model.truncation=middle")
    assert entries["reward_model.truncation"][0][0] == "refused"
    _, entries = _translate(*LOOP_LINE, "+reward_model.truncation=left")  # the loop does not read it
    assert entries["reward_model.truncation"][0][0] == "dropped"


def test_what_posttrain_cannot_reproduce_is_refused_with_the_reason():
    _, entries = _translate(*LOOP_LINE, "custom_reward_function.path=/my/reward.py")
    status, _, _, reason = entries["reward_model.use_reward_loop"][0]
    assert status == "refused" and "reward_router_address" in reason and "use_reward_loop: false" in reason
    _, entries = _translate(*LOOP_LINE, "reward_model.rollout.name=trtllm", "+reward_model.rollout.engine_kwargs.vllm.task=embed")
    assert entries["reward_model.rollout.name"][0][0] == "refused"
    assert entries["reward_model.rollout.engine_kwargs"][0][0] == "refused"


def test_without_a_reward_model_the_loop_s_engine_keys_are_unused_and_the_function_scores():
    native, entries = _translate("reward_model.rollout.name=vllm", "reward_model.num_workers=8", "reward_model.rollout.free_cache_engine=False")
    assert "function_weight" not in native.get("reward", {})
    assert "enable" not in native["reward"]["reward_model"]
    assert entries["reward_model.rollout.free_cache_engine"][0][0] == "dropped"


@pytest.fixture(scope="module")
def line_inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rm_line")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    make_tiny_model(root / "rm", layers=1, hidden=32, heads=4, seed=1)  # config plan reads no weights
    write_task_data("sort", root / "data", train=8, test=4)
    return root


def test_a_reward_loop_launch_line_plans(line_inputs, capsys):
    r = line_inputs
    words = [w for w in LOOP_LINE if not w.startswith(("actor_rollout_ref.model.path", "reward_model.model.path"))]
    line = [*words, f"actor_rollout_ref.model.path={r}/model", f"reward_model.model.path={r}/rm",
            f"data.train_files={r}/data/train.parquet", f"data.val_files={r}/data/test.parquet", "data.train_batch_size=4",
            "data.max_prompt_length=32", "data.max_response_length=16", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "algorithm.adv_estimator=grpo", f"trainer.default_local_dir={r}/run"]
    assert main(["config", "show", "--dialect", "verl", *line]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["reward"]["reward_model"]["input_tokenizer"] == f"{r}/model"
    assert main(["config", "plan", "--dialect", "verl", *line]) == 0, capsys.readouterr().err
