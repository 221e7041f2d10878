"""ROLL's step env managers translate onto window prompt modes and turn rows (posttrain.config.dialects.roll_step_envs)."""

from __future__ import annotations

import pytest
import yaml

from posttrain.config.dialects import translate
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
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
    assert report.entry("batch_adjust_mode").status == "dropped" and "trains and counts every step sample once" in report.entry("batch_adjust_mode").reason
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


def test_grpo_and_reinforce_over_step_samples_score_each_step_by_its_own_reward():
    norm = {"grouping": "traj_group_id", "norm_mean_type": "group", "norm_std_type": "group"}
    for estimator in ("grpo", "reinforce"):
        native, report = translate({**roll_file(), "adv_estimator": estimator, "reward_normalization": norm, "reward_clip": 5,
                                    "step_reward_gamma": 1.0, "whiten_advantages": True}, "roll")
        alg = native["algorithm"]
        assert (alg["adv_estimator"], alg["agentic_reward_norm"], alg["reward_clip"], alg["whiten_advantages"]) == ("step_reward", norm, 5, True)
        assert "each step sample's score (its own step reward)" in report.entry("adv_estimator").reason
        # ROLL discounts step rewards under gigpo / step_reinforce only
        assert report.entry("step_reward_gamma").status == "dropped" and f"not under {estimator}" in report.entry("step_reward_gamma").reason
        assert not [e for e in report.entries if e.status == "refused"]
    # ROLL's step estimators normalise over step samples by reward_normalization too: step_reward's other modes
    for estimator, mode in (("gigpo", "gigpo"), ("step_reinforce", "return")):
        native, report = translate({**roll_file(), "adv_estimator": estimator, "step_reward_gamma": 0.9, "step_reward_weight": 0.5}, "roll")
        alg = native["algorithm"]
        assert (alg["adv_estimator"], alg["adv_estimator_args"], alg["gigpo"]["step_gamma"]) == ("step_reward", {"mode": mode}, 0.9)
        assert (report.entry("step_reward_weight").status == "dropped") == (mode == "return")  # ROLL weighs the parts under gigpo only


def test_gae_and_estimators_roll_cannot_run_over_step_samples_are_refused():
    raw = {k: v for k, v in roll_file().items() if k != "adv_estimator"}  # ROLL's default: gae
    [entry] = [e for e in translate(raw, "roll")[1].entries if e.key == "adv_estimator" and e.status == "refused"]
    assert "ROLL runs GAE within each step sample" in entry.reason and "posttrain's gae runs along the episode's row" in entry.reason
    [other] = [e for e in translate({**roll_file(), "adv_estimator": "agentic_reinforce"}, "roll")[1].entries if e.status == "refused"]
    assert other.key == "adv_estimator" and "posttrain translates ROLL's grpo, reinforce, gigpo and step_reinforce there" in other.reason
    # with a trajectory manager grpo is over whole episodes: reinforce over the normalised scores (next test)
    episodes = {**roll_file(), "adv_estimator": "grpo", "custom_envs": {"FL": {"env_type": "frozen_lake", "max_tokens_per_step": 16}}}
    assert translate(episodes, "roll")[0]["algorithm"]["adv_estimator"] == "reinforce"


def test_agentic_grpo_over_episodes_is_the_returns_of_rolls_normalised_scores():
    """ROLL's agentic grpo does not standardise per group as its RLVR grpo does: the scores are
    normalised by reward_normalization alone, then every token of the episode takes their return."""
    import torch

    from posttrain.algorithms import reinforce_advantage
    from posttrain.algorithms.agentic_norm import agentic_reward_norm

    episodes = {**roll_file(), "adv_estimator": "grpo", "custom_envs": {"FL": {"env_type": "frozen_lake", "max_tokens_per_step": 16}},
                "reward_normalization": {"grouping": "tags", "method": "identity"}}
    native, report = translate(episodes, "roll")
    assert native["algorithm"]["adv_estimator"] == "reinforce" and "does not standardise them per group again" in report.entry("adv_estimator").reason
    rlvr = {k: v for k, v in roll_file().items() if k not in ("train_env_manager", "custom_envs", "batch_adjust_mode")}
    assert translate({**rlvr, "adv_estimator": "grpo"}, "roll")[0]["algorithm"]["adv_estimator"] == "grpo"  # ROLL's RLVR grpo is posttrain's
    scores = torch.tensor([1.0, 0.0, 3.0, 1.0])  # two environment groups of two episodes
    mask = torch.ones(4, 2)
    rewards = torch.zeros(4, 2)
    for method, want in (("identity", [1.0, 0.0, 3.0, 1.0]),  # ROLL's advantages are the raw scores; a group-standardised grpo's are not
                         ("mean_std", [0.5 / (0.5**0.5 + 1e-6), -0.5 / (0.5**0.5 + 1e-6), 1 / (2**0.5 + 1e-6), -1 / (2**0.5 + 1e-6)])):
        rewards[:, -1] = agentic_reward_norm(scores, ["a", "a", "b", "b"], method, None, None)
        adv = reinforce_advantage(token_level_rewards=rewards, response_mask=mask).advantages
        torch.testing.assert_close(adv, torch.tensor(want).unsqueeze(1).expand(4, 2), rtol=0, atol=1e-6)


def test_a_file_shaped_as_rolls_atropos_grpo_demo_plans_with_step_reward(tmp_path):
    """agentic_demo/atropos_gsm8k_grpo_qwen25_0.5b.yaml's keys (its atropos_env, which posttrain does
    not ship, played by sokoban_native_env; its missing DeepSpeed include left out): grpo over the
    AgentNativeStepEnvManager's step samples plans, as ROLL runs it."""
    native_cls = "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager"
    entry = {"env_type": "sokoban_native_env", "max_steps": 1, "max_tokens_per_step": 512, "env_manager_cls": native_cls,
             "agent_system_template": "Think, then answer.", "agent_template": "{observation}", "env_config": {"max_steps": 1}}
    raw = {"exp_name": "atropos_like", "seed": 42, "max_steps": 100, "pretrain": "Qwen/Qwen2.5-0.5B-Instruct", "sequence_length": 2048,
           "rollout_batch_size": 64, "val_batch_size": 1,
           "actor_train": {"training_args": {"learning_rate": 1.0e-6, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 32}},
           "actor_infer": {"generating_args": {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "max_new_tokens": 512}},
           "adv_estimator": "grpo", "batch_adjust_mode": "random_sample", "step_reward_gamma": 1.0, "use_kl_loss": True,
           "kl_loss_coef": 0.001, "whiten_advantages": True, "entropy_loss_coef": 0, "max_grad_norm": 1.0,
           "reward_normalization": {"grouping": "traj_group_id", "norm_mean_type": "group", "norm_std_type": "group"},
           "custom_envs": {"AtroposGSM8KTrain": entry},
           "train_env_manager": {"max_env_num_per_worker": 4, "num_env_groups": 4, "group_size": 16, "tags": ["AtroposGSM8KTrain"],
                                 "num_groups_partition": [4]}}
    path = tmp_path / "atropos_like.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(str(path), [], dialect="roll")
    alg = cfg.algorithm
    assert (alg.adv_estimator, cfg.env.train_rows, alg.whiten_advantages) == ("step_reward", "turn", True)
    assert (alg.agentic_reward_norm.grouping, alg.agentic_reward_norm.norm_mean_type, alg.agentic_reward_norm.norm_std_type) == (
        "traj_group_id", "group", "group")
    # ROLL's token-level gamma below 1 discounts along each step's tokens, which step_reward does not: refused at load
    path.write_text(yaml.safe_dump({**raw, "gamma": 0.9}))
    with pytest.raises(ConfigError, match=r"algorithm.gamma \(0.9\): adv_estimator step_reward gives every token"):
        load_config(str(path), [], dialect="roll")


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
