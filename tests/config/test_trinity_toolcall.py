"""Trinity-RFT's toolcall_workflow (Tool-N1) translates to Tool-N1 rows (data.prompt_format), their
answer column and the tool_n1 scorer; its evaluation tasksets read the same fixed columns."""

from __future__ import annotations

from posttrain.config.dialects import translate

_IN = "buffer.explorer_input"


def run(taskset: dict, **explorer_input):
    raw = {"buffer": {"explorer_input": {"taskset": {"path": "data.jsonl", **taskset}, **explorer_input}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_toolcall_workflow_reads_tool_n1_rows_and_scores_with_tool_n1():
    for name in ("toolcall_workflow", "tool_call_workflow"):
        native, entries = run({"default_workflow_type": name})
        assert native["data"]["prompt_format"] == "tool_n1" and native["data"]["response_key"] == "answer"
        assert native["reward"]["custom_reward_function"] == {"name": "tool_n1"}
        assert entries[f"{_IN}.taskset.default_workflow_type"][0] == "translated"


def test_its_reward_function_and_eval_columns_are_the_workflows_own():
    native, entries = run({}, default_workflow_type="toolcall_workflow", default_reward_fn_type="math_reward",
                          eval_tasksets=[{"path": "e.jsonl", "format": {"prompt_key": "question"}}])
    assert entries[f"{_IN}.default_reward_fn_type"][0] == "dropped"  # the workflow scores inline
    assert entries[f"{_IN}.eval_tasksets[0].format.prompt_key"][0] == "dropped"
    assert "val_file_keys" not in native["data"]
    _, entries = run({"default_workflow_type": "toolcall_workflow", "workflow_args": {"k": 1}})
    assert entries[f"{_IN}.taskset.workflow_args.k"][0] == "refused"
