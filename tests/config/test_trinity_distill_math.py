"""Trinity-RFT's on_policy_distill_math_workflow: Qwen2.5-Math's prompt (system message and the
instruction after the question), the teacher scoring at the rollout temperature, a logged math score."""

from __future__ import annotations

from posttrain.config.dialects import translate
from posttrain.config.dialects.prompts import QWEN_MATH_SYSTEM_PROMPT, QWEN_MATH_USER_SUFFIX

_IN = "buffer.explorer_input"
TEACHER = {"explorer": {"auxiliary_models": [{"model_path": "/teacher"}]}}


def run(workflow_args: dict | None = None, temperature: float = 1.0, algorithm_type: str = "on_policy_distill"):
    taskset = {"path": "d.jsonl", "rollout_args": {"temperature": temperature}, "workflow_args": workflow_args or {}}
    raw = {"algorithm": {"algorithm_type": algorithm_type}, **TEACHER,
           "buffer": {"explorer_input": {"taskset": taskset, "default_workflow_type": "on_policy_distill_math_workflow"}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_the_distill_math_workflow_prompts_like_qwen_math_and_logs_a_math_score():
    for kind in ("on_policy_distill", "jsd"):
        native, entries = run(algorithm_type=kind)
        assert native["data"]["system_prompt"] == QWEN_MATH_SYSTEM_PROMPT
        assert native["data"]["user_suffix"] == QWEN_MATH_USER_SUFFIX
        assert native["reward"]["custom_reward_function"] == {"name": "math"}
        assert native["algorithm"]["adv_estimator"] == kind and native["ref"]["model_path"] == "/teacher"
        assert not [k for k, (status, _) in entries.items() if status == "refused"]


def test_the_teacher_temperature_must_be_the_rollout_temperature():
    _, entries = run({"temperature": 0.7}, temperature=0.7)
    assert entries[f"{_IN}.taskset.workflow_args.temperature"][0] == "dropped"
    _, entries = run({"temperature": 1.0}, temperature=0.7)
    status, reason = entries[f"{_IN}.taskset.workflow_args.temperature"]
    assert status == "refused" and "rollout temperature (0.7)" in reason
    raw = {"algorithm": {"algorithm_type": "on_policy_distill"}, **TEACHER,
           "buffer": {"explorer_input": {"taskset": {"path": "d.jsonl", "rollout_args": {"temperature": 0.7}},
                                         "default_workflow_type": "on_policy_distill_math_workflow"}}}
    _, report = translate(raw, "trinity")  # the teacher's default temperature, 1.0
    assert [e for e in report.entries if e.key == f"{_IN}.default_workflow_type" and e.status == "refused"]


def test_with_a_reward_driven_algorithm_the_workflow_is_refused():
    _, entries = run(algorithm_type="grpo")  # GRPO would train on Qwen2.5-Math's answer check
    status, reason = entries[f"{_IN}.default_workflow_type"]
    assert status == "refused" and "trains on its score" in reason
