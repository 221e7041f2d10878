"""Trinity-RFT's RULER and rubric judge workflows become chat-judge workers over reward.auxiliary_models.judge."""

from __future__ import annotations

from posttrain.config.dialects import translate
from posttrain.config.dialects.prompts import R1_SYSTEM_PROMPT
from posttrain.config.dialects.trinity_judges import RUBRIC_SYSTEM_PROMPT, RULER_FORMAT
from posttrain.config.load import load_config

JUDGE = {"model_path": "/models/judge", "tensor_parallel_size": 2, "max_response_tokens": 300, "engine_num": 1,
         "enable_thinking": False, "max_model_len": 4096}


def run(workflow, aux=(JUDGE,), eval_workflow=None, **taskset):
    explorer_input = {"taskset": {"path": "data.jsonl", "default_workflow_type": workflow, **taskset}}
    if eval_workflow is not None:
        explorer_input["eval_tasksets"] = [{"path": "val.jsonl", "default_workflow_type": eval_workflow}]
    raw = {"model": {"model_path": "/models/policy", "max_response_tokens": 128},
           "buffer": {"explorer_input": explorer_input}, "explorer": {"auxiliary_models": list(aux)}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_ruler_becomes_a_ruler_judge_over_the_first_auxiliary_model_with_the_gold_reward_as_a_metric():
    native, entries = run("math_ruler_workflow")
    reward = native["reward"]
    assert reward["auxiliary_models"] == {"judge": {
        "model_path": "/models/judge", "dtype": "bf16",
        "engine": {"name": "vllm", "tensor_model_parallel_size": 2, "max_model_len": 4096, "gpu_memory_utilization": 0.9, "enforce_eager": False}}}
    assert reward["workers"]["judge"] == {"worker_cls": "ruler_judge", "tag_included": [""], "reward_kwargs": {
        "model": "judge", "max_tokens": 300, "temperature": 1.0, "instructions": RULER_FORMAT}}
    assert reward["workers"]["gold"] == {"worker_cls": "think_answer", "tag_included": [""], "weight": 0.0}
    assert native["data"]["system_prompt"] == R1_SYSTEM_PROMPT
    assert entries["explorer.auxiliary_models[0].engine_num"][0] == "dropped"
    assert "custom_reward_function" not in reward  # the judge gives the reward


def test_rubric_judge_rates_against_the_row_s_rubric_greedily():
    native, entries = run("rubric_judge_workflow", format={"system_prompt": "Answer as a doctor."})
    worker = native["reward"]["workers"]["judge"]
    assert worker["worker_cls"] == "rubric_judge"
    assert worker["reward_kwargs"] == {"model": "judge", "max_tokens": 300, "temperature": 0.0, "rubric_key": "rubric"}
    assert "gold" not in native["reward"]["workers"] and native["data"]["extra_info_keys"] == ["rubric"]
    default_prompt, _ = run("rubric_judge_workflow")
    assert default_prompt["data"]["system_prompt"] == RUBRIC_SYSTEM_PROMPT
    assert RUBRIC_SYSTEM_PROMPT.endswith("with the answer.\n    ")  # the characters Trinity-RFT's rubric workflow sends


def test_the_judge_s_translation_loads_as_a_native_config(tmp_path):
    native, _ = run("math_ruler_workflow")
    import yaml

    path = tmp_path / "judge.yaml"
    path.write_text(yaml.safe_dump(native))
    cfg = load_config(path)
    assert cfg.reward.auxiliary_models["judge"].engine.name == "vllm" and cfg.reward.workers["judge"].reward_kwargs["max_tokens"] == 300


def test_judge_workflows_refuse_what_they_cannot_honour():
    _, entries = run("math_ruler_workflow", aux=())
    assert entries["buffer.explorer_input.taskset.default_workflow_type"][0] == "refused"
    _, entries = run("rubric_judge_workflow", aux=({**JUDGE, "engine_num": 2, "engine_type": "tinker"},))
    assert entries["explorer.auxiliary_models[0].engine_num"][0] == "refused"
    assert entries["explorer.auxiliary_models[0].engine_type"][0] == "refused"
    _, entries = run("rubric_judge_workflow", aux=({**JUDGE, "enable_thinking": True},))
    assert entries["explorer.auxiliary_models[0].enable_thinking"][0] == "refused"
    _, entries = run("math_ruler_workflow", aux=(JUDGE, {"model_path": "/models/other"}))
    assert entries["explorer.auxiliary_models[1]"][0] == "dropped"  # the workflows call only the first


def test_an_evaluation_taskset_is_judged_by_the_training_judge_or_refused():
    _, entries = run("math_ruler_workflow", eval_workflow="math_ruler_workflow")
    assert entries["buffer.explorer_input.eval_tasksets[0].default_workflow_type"][0] == "dropped"
    _, entries = run("math_workflow", eval_workflow="rubric_judge_workflow")
    status, reason = entries["buffer.explorer_input.eval_tasksets[0].default_workflow_type"]
    assert status == "refused" and "validates with the training stage's reward" in reason


def test_the_learn_to_ask_example_becomes_the_learn2ask_reward_over_the_judge(tmp_path):
    from posttrain.config.dialects.trinity_learn2ask import ASK, NAME, POLICY_PROMPT, WORKER

    native, entries = run(NAME, format={"prompt_key": "messages", "response_key": "action_truth"},
                          workflow_args={"train_mode": "Ra+Rs", "fusion_mode": "sum"})
    worker = native["reward"]["workers"]["judge"]
    assert worker == {"worker_cls": WORKER, "tag_included": [""], "reward_kwargs": {
        "model": "judge", "max_tokens": 300, "train_mode": "Ra+Rs", "fusion_mode": "sum", "messages_key": "messages"}}
    assert native["data"]["extra_info_keys"] == ["messages", "decision_truth", "info_truth"]
    assert native["data"]["system_prompt"] == POLICY_PROMPT and "<stop />" in POLICY_PROMPT
    assert run(NAME, workflow_args={"train_mode": "Ra"})[0]["data"]["system_prompt"] == ASK  # no stopping in train_mode Ra
    _, refused = run(NAME, workflow_args={"train_mode": "Rx", "other": 1})
    assert refused["buffer.explorer_input.taskset.workflow_args.train_mode"][0] == "refused"
    import yaml

    (tmp_path / "l2a.yaml").write_text(yaml.safe_dump(native))
    cfg = load_config(tmp_path / "l2a.yaml")
    assert cfg.reward.workers["judge"].worker_cls == WORKER and cfg.data.system_prompt == POLICY_PROMPT


def _trainable(batch_size=96, train_batch_size=960, **explorer_input):
    raw = {"model": {"model_path": "/models/policy", "max_response_tokens": 128}, "algorithm": {"algorithm_type": "grpo", "repeat_times": 8},
           "buffer": {"batch_size": batch_size, "train_batch_size": train_batch_size,
                      "explorer_input": {"taskset": {"path": "data.jsonl"}, "default_workflow_type": "math_trainable_ruler_workflow",
                                         **explorer_input}}}
    native, report = translate(raw, "trinity")
    entries: dict[str, list[tuple[str, str]]] = {}
    for e in report.entries:
        entries.setdefault(e.key, []).append((e.status, e.reason))
    return native, entries


def test_trainable_ruler_is_the_self_judge_over_math_reward():
    native, entries = _trainable(eval_tasksets=[{"path": "test.jsonl"}])
    assert native["reward"]["self_judge"] == {"enable": True, "gold_probability": 0.2, "gold_range": [-0.1, 1.1], "instructions": RULER_FORMAT}
    assert native["reward"]["custom_reward_function"]["name"] == "think_answer"  # the gold reward: its default math_reward
    assert native["data"]["system_prompt"] == R1_SYSTEM_PROMPT
    # the example's 960 experiences a trainer step for 96 x 8 responses: the responses and judge rows of one explore step
    assert native["actor"]["ppo_mini_batch_size"] == 96 and native["data"]["train_batch_size"] == 96
    assert any(status == "translated" and "judge replies" in reason for status, reason in entries["buffer.train_batch_size"])
    # the evaluation taskset's use of it
    assert any(status == "dropped" and "gold reward" in reason for status, reason in entries["buffer.explorer_input.default_workflow_type"])


def test_trainable_ruler_refuses_a_trainer_step_beyond_an_explore_steps_rows(tmp_path):
    _, entries = _trainable(train_batch_size=96 * 8 * 2 + 8)  # more than the responses plus n judge replies for every task
    assert [status for status, _ in entries["buffer.train_batch_size"]] == ["refused"]
    native, _ = _trainable()
    import yaml

    path = tmp_path / "self_judge.yaml"
    path.write_text(yaml.safe_dump(native))
    cfg = load_config(path)
    assert cfg.reward.self_judge.enable and cfg.reward.self_judge.gold_range == [-0.1, 1.1]
