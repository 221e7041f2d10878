"""Trinity-RFT workflows map onto posttrain's rollout paths, or are refused naming what they need."""

from __future__ import annotations

from posttrain.config.dialects import translate


def run(taskset: dict, **explorer_input):
    raw = {"buffer": {"explorer_input": {"taskset": {"path": "data.jsonl", **taskset}, **explorer_input}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_single_turn_workflows_are_the_ordinary_rollout(tmp_path):
    for name in ("simple_workflow", "async_simple_workflow"):
        native, entries = run({}, default_workflow_type=name)
        assert entries["buffer.explorer_input.default_workflow_type"][0] == "dropped"
        assert "multi_turn" not in native.get("rollout", {})


def test_math_workflow_keeps_the_tasksets_system_prompt():
    native, entries = run({"format": {"system_prompt": "Think, then answer."}}, default_workflow_type="math_workflow")
    assert native["data"]["system_prompt"] == "Think, then answer."
    assert native["reward"]["custom_reward_function"]["name"] == "think_answer"  # its default reward, math_reward


def test_the_tool_workflow_sets_rollout_multi_turn_from_workflow_args():
    args = {"tool_config_path": "tools.yaml", "max_assistant_turns": 3, "max_tool_response_length": 64}
    native, entries = run({"default_workflow_type": "posttrain_tool_workflow", "workflow_args": args},
                          default_workflow_type="simple_workflow")  # the taskset's own wins over the default
    assert native["rollout"]["multi_turn"] == {"enable": True, **args}
    _, entries = run({"default_workflow_type": "posttrain_tool_workflow", "workflow_args": {"tools": []}})
    assert entries["buffer.explorer_input.taskset.workflow_args.tools"][0] == "refused"


def test_other_workflows_and_reward_functions_are_refused_with_what_they_need():
    for name, needle in (("sudoku_workflow", "env.custom_envs"), ("math_eval_workflow", "fixed math evaluation"),
                         ("math_rm_workflow", "only rm_gallery_reward takes"),
                         ("my_workflow", "translates are")):
        _, entries = run({"default_workflow_type": name})
        status, reason = entries["buffer.explorer_input.taskset.default_workflow_type"]
        assert status == "refused" and needle in reason, name
    _, entries = run({"workflow_args": {"x": 1}})
    assert entries["buffer.explorer_input.taskset.workflow_args.x"][0] == "refused"


def test_evaluation_tasksets_use_the_eval_default():
    _, entries = run({}, eval_tasksets=[{"path": "test.jsonl"}], default_workflow_type="simple_workflow",
                     default_eval_workflow_type="frozen_lake_workflow")
    assert entries["buffer.explorer_input.default_workflow_type"][0] == "dropped"  # the training taskset's
    assert entries["buffer.explorer_input.default_eval_workflow_type"][0] == "refused"  # the eval taskset's
