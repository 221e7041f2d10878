"""A Trinity-RFT file whose taskset runs posttrain's agent function (posttrain_agent_workflow): its
workflow_args become rollout.agent.*, and the rollout model's OpenAI server and history keys are
accepted beside it, refused elsewhere with the pointer to it."""

from __future__ import annotations

import yaml

from posttrain.config.dialects import translate
from posttrain.config.load import load_config


def taskset(**extra):
    return {"path": "/tmp/tasks.jsonl", "default_workflow_type": "posttrain_agent_workflow", **extra}


def entries(raw: dict) -> dict:
    return {e.key: (e.status, e.reason, e.native, e.value) for e in translate(raw, "trinity")[1].entries}


SERVER = {"rollout_model": {"enable_openai_api": True, "enable_history": True}}


def test_the_agent_workflow_sets_rollout_agent_and_accepts_the_server_keys(tmp_path):
    args = {"function": "my_agent.py:run", "max_concurrency": 4, "timeout": 30, "failure_penalty": -1.0, "max_failure_rate": 0.2}
    raw = {"buffer": {"explorer_input": {"taskset": taskset(workflow_args=args)}}, "explorer": SERVER}
    native, _ = translate(raw, "trinity")
    assert native["rollout"]["agent"] == args
    got = entries(raw)
    assert got["explorer.rollout_model.enable_openai_api"][0] == got["explorer.rollout_model.enable_history"][0] == "dropped"
    assert "records every call as a training row" in got["explorer.rollout_model.enable_history"][1]
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "hi"}\n')
    raw["buffer"]["explorer_input"]["taskset"]["path"] = str(tmp_path / "tasks.jsonl")
    path = tmp_path / "trinity.yaml"
    path.write_text(yaml.safe_dump({**raw, "model": {"model_path": "/tmp/m"}, "algorithm": {"algorithm_type": "grpo", "repeat_times": 4}}))
    cfg = load_config(str(path), [])
    assert cfg.rollout.agent.function == "my_agent.py:run" and cfg.rollout.agent.failure_penalty == -1.0 and cfg.rollout.n == 4


def test_what_the_agent_workflow_refuses():
    off = {"rollout_model": {"enable_openai_api": False}}
    got = entries({"buffer": {"explorer_input": {"taskset": taskset(workflow_args={"function": "a:run", "temperature": 1.0},
                                                                     default_reward_fn_type="math_reward")}}, "explorer": off})
    assert got["explorer.rollout_model.enable_openai_api"][0] == "refused"  # the function needs the endpoint
    assert got["buffer.explorer_input.taskset.workflow_args.temperature"][0] == "refused"
    assert got["buffer.explorer_input.taskset.default_reward_fn_type"][0] == "refused"
    assert "returns each episode's reward" in got["buffer.explorer_input.taskset.default_reward_fn_type"][1]
    missing = entries({"buffer": {"explorer_input": {"taskset": taskset()}}})["buffer.explorer_input.taskset.default_workflow_type"]
    assert missing[0] == "refused" and "needs workflow_args.function" in missing[1]


def test_evaluation_tasksets_run_the_training_function_and_other_workflows_keep_the_keys_refused():
    same = {"path": "/tmp/val.jsonl", "default_workflow_type": "posttrain_agent_workflow", "workflow_args": {"function": "a:run"}}
    other = {**same, "workflow_args": {"function": "b:run"}}
    train = taskset(workflow_args={"function": "a:run"})
    got = entries({"buffer": {"explorer_input": {"taskset": train, "eval_tasksets": [same, other]}}})
    assert got["buffer.explorer_input.eval_tasksets[0].default_workflow_type"][0] == "dropped"
    assert got["buffer.explorer_input.eval_tasksets[1].default_workflow_type"][0] == "refused"
    plain = entries({"buffer": {"explorer_input": {"taskset": {"path": "/tmp/t.jsonl"}}}, "explorer": SERVER})
    for key in ("explorer.rollout_model.enable_openai_api", "explorer.rollout_model.enable_history"):
        assert plain[key][0] == "refused" and "posttrain_agent_workflow" in plain[key][1]


def test_the_rollout_models_tool_and_reasoning_parsers_become_the_agent_endpoints():
    parsers = {"enable_auto_tool_choice": True, "tool_call_parser": "hermes", "reasoning_parser": "deepseek_r1", "enable_thinking": False}
    raw = {"buffer": {"explorer_input": {"taskset": taskset(workflow_args={"function": "a:run"})}},
           "explorer": {"rollout_model": {**SERVER["rollout_model"], **parsers}}}
    native, _ = translate(raw, "trinity")
    assert {k: native["rollout"]["agent"][k] for k in ("enable_auto_tool_choice", "tool_call_parser", "reasoning_parser")} == {
        "enable_auto_tool_choice": True, "tool_call_parser": "hermes", "reasoning_parser": "deepseek_r1"}
    assert native["data"]["enable_thinking"] is False  # Trinity sends it with every call; the endpoint's template gets it
    raw["explorer"]["rollout_model"].update(enable_auto_tool_choice=False, tool_call_parser="llama3_json", reasoning_parser="qwen3")
    got = entries(raw)
    assert got["explorer.rollout_model.enable_auto_tool_choice"][2:] == ("rollout.agent.enable_auto_tool_choice", False)
    assert got["explorer.rollout_model.reasoning_parser"][2:] == ("rollout.agent.reasoning_parser", "qwen3")
    refused = got["explorer.rollout_model.tool_call_parser"]
    assert refused[0] == "refused" and "'llama3_json' is not a parser posttrain implements" in refused[1] and "hermes" in refused[1]
    # without the agent workflow there is no endpoint: Trinity's defaults pass, a parser is refused with the pointer
    plain = {"buffer": {"explorer_input": {"taskset": {"path": "/tmp/t.jsonl"}}}, "explorer": {"rollout_model": {
        "enable_auto_tool_choice": False, "tool_call_parser": None, "reasoning_parser": "qwen3"}}}
    got = entries(plain)
    assert got["explorer.rollout_model.enable_auto_tool_choice"][0] == got["explorer.rollout_model.tool_call_parser"][0] == "dropped"
    assert got["explorer.rollout_model.reasoning_parser"][0] == "refused"
    assert "posttrain_agent_workflow" in got["explorer.rollout_model.reasoning_parser"][1]
