"""ROLL's agentic keys: env-manager sampling onto rollout.* / rollout.val_kwargs.*, ROLL's own defaults accepted,
the rest refused with a reason true of posttrain's design."""

from __future__ import annotations

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
    _, entries = run(train_env_manager={"tags": ["E"], "generating_args": {"max_new_tokens": 8}})
    status, reason = entries["train_env_manager.generating_args.max_new_tokens"]
    assert status == "refused" and "max_tokens_per_step; set it to at most 8 for E" in reason
    native, entries = run(actor_infer={"generating_args": {"temperature": 0.5}}, train_env_manager=train)
    assert native["rollout"]["temperature"] == 0.5 and entries["train_env_manager.generating_args"][0] == "dropped"


def test_roll_defaults_are_accepted_and_other_agentic_keys_refused_by_reason():
    default_worker = "roll.pipeline.agentic.environment_worker.EnvironmentWorker"
    _, entries = run(train_env_manager={"tags": ["E"], "worker_cls": default_worker}, skip_mock_system_prompt=True,
                     parse_tool_call_parameter_to_dict=True, env_manager_cls="roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager")
    for key in ("train_env_manager.worker_cls", "skip_mock_system_prompt", "parse_tool_call_parameter_to_dict", "env_manager_cls"):
        assert entries[key][0] == "dropped", key
    _, entries = run(train_env_manager={"tags": ["E"], "worker_cls": "my.Worker"}, skip_mock_system_prompt=False,
                     actor_train={"pg_variant": "tis"}, reward_system_config={"submit_url": "http://x"})
    for key, needle in (("train_env_manager.worker_cls", "env_type: module:Class"), ("skip_mock_system_prompt", "env_instruction"),
                        ("actor_train.pg_variant", "actor.policy_loss.loss_mode"), ("reward_system_config", "remote service")):
        assert entries[key][0] == "refused" and needle in entries[key][1], (key, entries[key])
        assert "not implemented yet" not in entries[key][1]


def test_an_agentic_file_renders_turns_without_thinking_as_rolls_env_managers_do():
    native, entries = run(actor_train={"data_args": {"template": "qwen3"}})
    assert native["data"] == {"enable_thinking": False}  # ROLL's agentic pipeline does not read the template name
    assert entries["actor_train.data_args.template"][0] == "dropped"
    assert "enable_thinking=False" in entries["train_env_manager"][1]
    rlvr, _ = translate({"actor_train": {}, "rollout_batch_size": 8}, "roll")
    assert "enable_thinking" not in rlvr.get("data", {})  # prompts from files follow their template
