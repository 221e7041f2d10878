"""ROLL's agentic keys: env-manager sampling onto rollout.* / rollout.val_kwargs.*, ROLL's own defaults accepted,
the rest refused with a reason true of posttrain's design."""

from __future__ import annotations

import pytest

from posttrain.config.dialects import translate

ENVS = {"E": {"env_type": "frozen_lake", "max_tokens_per_step": 16}}
PIPELINE = {"actor_train": {}, "custom_envs": ENVS, "train_env_manager": {"tags": ["E"]}, "val_env_manager": {"tags": ["E"]}}


def run(**raw):
    native, report = translate({**PIPELINE, **raw}, "roll")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_env_manager_sampling_becomes_the_rollout_and_validation_sampling():
    train = {"tags": ["E"], "generating_args": {"temperature": 0.99, "top_p": 0.99, "max_new_tokens": 128, "num_return_sequences": 1}}
    val = {"tags": ["E"], "generating_args": {"temperature": 0.2, "top_k": 5, "max_new_tokens": 128}}
    native, entries = run(train_env_manager=train, val_env_manager=val)
    rollout = native["rollout"]
    assert (rollout["temperature"], rollout["top_p"], rollout["top_k"]) == (0.99, 0.99, 50)  # top_k: ROLL's default
    assert rollout["val_kwargs"] == {"temperature": 0.2, "top_k": 5, "top_p": 0.7, "do_sample": True}
    for manager in ("train_env_manager", "val_env_manager"):  # each turn is capped by E's 16 tokens anyway
        assert entries[f"{manager}.generating_args.max_new_tokens"][0] == "dropped"
    native, entries = run(train_env_manager={"tags": ["E"], "generating_args": {"max_new_tokens": 8}})
    status, reason = entries["train_env_manager.generating_args.max_new_tokens"]
    # E's 16 is looser: the manager's own cap takes each turn to 8 (E's cap still fills its template)
    assert status == "translated" and native["env"]["train_env_manager"]["max_new_tokens"] == 8 and "looser here: E" in reason
    assert "max_new_tokens" not in native["env"].get("val_env_manager", {})
    native, entries = run(actor_infer={"generating_args": {"temperature": 0.5}}, train_env_manager=train)
    assert native["rollout"]["temperature"] == 0.5 and entries["train_env_manager.generating_args"][0] == "dropped"


def test_roll_defaults_are_accepted_and_other_agentic_keys_refused_by_reason():
    default_worker = "roll.pipeline.agentic.environment_worker.EnvironmentWorker"
    _, entries = run(train_env_manager={"tags": ["E"], "worker_cls": default_worker}, skip_mock_system_prompt=True,
                     parse_tool_call_parameter_to_dict=True, env_manager_cls="roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager")
    for key in ("train_env_manager.worker_cls", "skip_mock_system_prompt", "parse_tool_call_parameter_to_dict", "env_manager_cls"):
        assert entries[key][0] == "dropped", key
    _, entries = run(train_env_manager={"tags": ["E"], "worker_cls": "my.Worker"}, skip_mock_system_prompt=False,
                     actor_train={"pg_variant": "tis"})
    for key, needle in (("train_env_manager.worker_cls", "env_type: module:Class"), ("skip_mock_system_prompt", "env_instruction")):
        assert entries[key][0] == "refused" and needle in entries[key][1], (key, entries[key])
        assert "not implemented yet" not in entries[key][1]
    assert entries["actor_train.pg_variant"][0] == "dropped"  # ROLL's default actor worker does not read it (tests/config/test_roll_loss_keys.py)


@pytest.mark.parametrize(("devices", "words"), [(16, "every row copied once"), (32, "randomly drawn copies weigh some rows more")])
def test_an_optimizer_batch_beyond_an_agentic_step_is_one_step_over_its_rows(devices, words):
    # ROLL's adjust_batch pads the step's 128 trajectories with copies up to the optimizer batch (1 x 16 x devices)
    raw = {"rollout_batch_size": 128, "train_env_manager": {"num_env_groups": 16, "group_size": 8},
           "actor_train": {"device_mapping": f"list(range(0,{devices}))", "training_args": {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 16}}}
    native, report = translate(raw, "roll")
    entry = report.entry("actor_train.training_args.gradient_accumulation_steps")
    assert native["actor"]["ppo_mini_batch_size"] == 128 and words in entry.reason and f"= {16 * devices} is more than" in entry.reason
    del raw["train_env_manager"]  # an RLVR pipeline pads nothing (ROLL's make_iterator asserts): the mini-batch stays
    native, _ = translate(raw, "roll")
    assert native["actor"]["ppo_mini_batch_size"] == 16 * devices


def test_an_agentic_file_renders_turns_without_thinking_as_rolls_env_managers_do():
    native, entries = run(actor_train={"data_args": {"template": "qwen3"}})
    assert native["data"] == {"enable_thinking": False}  # ROLL's agentic pipeline does not read the template name
    assert entries["actor_train.data_args.template"][0] == "dropped"
    assert "enable_thinking=False" in entries["train_env_manager"][1]
    rlvr, _ = translate({"actor_train": {}, "rollout_batch_size": 8}, "roll")
    assert "enable_thinking" not in rlvr.get("data", {})  # prompts from files follow their template
