"""ROLL's step env managers translate onto window prompt modes and turn rows (posttrain.config.dialects.roll_step_envs)."""

from __future__ import annotations

from posttrain.config.dialects import translate
from posttrain.envs.spec import parse_custom_envs

STEP = "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager"
CONCAT = "roll.pipeline.agentic.env_manager.step_concat_env_manager.StepConcatEnvManager"
TEMPLATE = "{env_instruction} | {step_count} steps | [{history}] | {current_observation} | {max_response_length}"


def roll_file(manager: str = STEP, **training_args):
    entry = {"env_type": "frozen_lake", "max_steps": 5, "max_tokens_per_step": 16, "env_manager_cls": manager, "history_length": 3,
             "agent_system_template": "You play.", "agent_template": TEMPLATE if manager == STEP else "{history}\n{current_observation}",
             "env_config": {"is_slippery": False, "format_penalty": -0.05}}
    args = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "lr_scheduler_type": "constant", **training_args}
    return {"actor_train": {"training_args": args, "device_mapping": "list(range(0,2))"}, "rollout_batch_size": 8,
            "batch_adjust_mode": "copy", "custom_envs": {"FL": entry}, "adv_estimator": "gigpo",
            "train_env_manager": {"tags": ["FL"], "num_env_groups": 2, "group_size": 4}}


def test_a_step_env_manager_file_trains_turn_rows_prompted_through_its_window():
    native, report = translate(roll_file(), "roll")
    assert native["env"]["train_rows"] == "turn"
    assert native["env"]["turn_mini_batch_size"] == 2 * 4 * 2  # ROLL's optimizer batch counts step samples
    assert (native["actor"]["optim"]["lr_schedule_unit"], native["actor"]["optim"]["lr_schedule_updates"]) == ("update", 250)  # ROLL's count
    assert report.entry("batch_adjust_mode").status == "dropped" and "trains every step sample once" in report.entry("batch_adjust_mode").reason
    spec = parse_custom_envs(native["env"]["custom_envs"])["FL"]
    window = spec.window
    # history_length 3 is the current step and 2 earlier ones; ROLL's StepEnvManager writes only the invalid ones
    assert (window.mode, window.window, window.history_steps) == ("window", 2, "invalid")
    assert (window.template, window.system_template, spec.format_penalty) == (TEMPLATE, "You play.", -0.05)
    concat = parse_custom_envs(translate(roll_file(CONCAT), "roll")[0]["env"]["custom_envs"])["FL"].window
    assert (concat.mode, concat.window) == ("observation_window", 2)


def test_a_trajectory_manager_file_keeps_episode_rows_and_a_decaying_step_schedule_is_refused():
    native, _ = translate({**roll_file(), "custom_envs": {"FL": {"env_type": "frozen_lake", "max_tokens_per_step": 16}}}, "roll")
    assert "train_rows" not in native.get("env", {}) and native["actor"]["optim"]["lr_schedule_unit"] == "update"
    # Hugging Face's cosine (no megatron_train) rises again past the horizon, which posttrain's does not
    _, report = translate(roll_file(lr_scheduler_type="cosine", warmup_steps=10), "roll")
    [entry] = [e for e in report.entries if e.key == "actor_train.training_args.lr_scheduler_type" and e.status == "refused"]
    assert "cosine, warmup_steps 10 under its default strategy: ROLL builds Hugging Face's cosine schedule, which past its horizon" in entry.reason
    assert "not implemented" not in entry.reason


def test_a_step_manager_files_schedule_gets_rolls_horizon_in_updates():
    """ROLL: max(1, max_steps x rollout_batch_size x ppo_epochs // (per_device x GA)) // dp ranks updates,
    here max(1, 500 (its default) x 8 x 2 // (2 x 4)) // 2 ranks = 500; the critic's has no ppo_epochs."""
    megatron = {"strategy_args": {"strategy_name": "megatron_train", "strategy_config": {}}}
    raw = roll_file(lr_scheduler_type="cosine", warmup_steps=10)
    raw = {**raw, "ppo_epochs": 2, "adv_estimator": "gigpo", "actor_train": {**raw["actor_train"], **megatron}}
    native, report = translate(raw, "roll")
    optim = native["actor"]["optim"]
    assert (optim["lr_schedule_unit"], optim["lr_schedule_updates"], optim["lr_warmup_steps"]) == ("update", 500, 10)
    assert not [e for e in report.entries if e.status == "refused"]
    linear = translate({**roll_file(lr_scheduler_type="linear", warmup_ratio=0.1), "max_steps": 30}, "roll")[0]["actor"]["optim"]
    assert (linear["lr_schedule_unit"], linear["lr_schedule_updates"]) == ("update", 15)  # 30 x 8 // 8 // 2 (HF's linear holds 0 too)


def test_an_outcome_estimator_over_step_samples_is_refused():
    _, report = translate({**roll_file(), "adv_estimator": "grpo"}, "roll")
    [entry] = [e for e in report.entries if e.key == "adv_estimator" and e.status == "refused"]
    assert "ROLL scores each step sample by its own step reward" in entry.reason and "use gigpo or step_reinforce" in entry.reason
    assert not [e for e in translate(roll_file(), "roll")[1].entries if e.status == "refused"]  # gigpo: nothing refused


def test_the_native_env_manager_plays_the_environments_conversation_as_turn_rows():
    native_cls = "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager"
    raw = roll_file(native_cls)
    raw["custom_envs"]["FL"] = {"env_type": "sokoban_native_env", "max_steps": 5, "env_manager_cls": native_cls,
                                "agent_system_template": "placeholder", "agent_template": "placeholder",
                                "env_config": {"max_steps": 5, "format_penalty": -0.15}}
    native, report = translate({**raw, "adv_estimator": "step_reinforce"}, "roll")
    assert native["env"]["train_rows"] == "turn"  # one sample per step, as ROLL's native manager makes them
    for name in ("agent_template", "agent_system_template"):
        assert report.entry(f"custom_envs.FL.{name}").status == "dropped"
        assert "never reads it" in report.entry(f"custom_envs.FL.{name}").reason
    spec = parse_custom_envs(native["env"]["custom_envs"])["FL"]
    assert (spec.window.mode, spec.format_penalty, spec.max_steps) == ("messages", -0.15, 5)
    assert not [e for e in report.entries if e.status == "refused"]
