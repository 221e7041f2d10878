"""Trinity-RFT's math_dapo_reward translates to the dapo_math scorer with its overlong penalty as
reward.overlong_buffer; BOTS's math workflow to the bots_math scorer over the prompt column as it is."""

from __future__ import annotations

from posttrain.config.dialects import translate

_IN = "buffer.explorer_input"
_TS = f"{_IN}.taskset"
_BOTS = "examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow"
_PENALTY = {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 20480, "cache_length": 4096}


def run(taskset: dict, evals: list | None = None, mode: str = "both", **explorer_input):
    raw = {"model": {"max_response_tokens": 20480}, "mode": mode,
           "buffer": {"explorer_input": {"taskset": {"path": "data.jsonl", **taskset}, **explorer_input}}}
    if evals is not None:
        raw["buffer"]["explorer_input"]["eval_tasksets"] = [{"path": "eval.jsonl", **e} for e in evals]
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_math_dapo_reward_is_dapo_math_with_the_overlong_buffer():
    native, entries = run({"reward_fn_args": _PENALTY}, default_workflow_type="math_boxed_workflow",
                          default_reward_fn_type="math_dapo_reward")
    assert native["reward"]["custom_reward_function"] == {"name": "dapo_math"}
    assert native["reward"]["overlong_buffer"] == {"enable": True, "len": 4096, "penalty_factor": 1.0, "max_resp_len": 20480}
    native, entries = run({"reward_fn_args": {**_PENALTY, "enable_overlong_penalty": False}},
                          default_reward_fn_type="math_dapo_reward")
    assert "overlong_buffer" not in native["reward"] and entries[f"{_TS}.reward_fn_args"][0] == "dropped"


def test_a_penalty_that_would_differ_is_refused():
    for args, key in (({**_PENALTY, "max_response_length": 8192}, f"{_TS}.reward_fn_args.max_response_length"),
                      ({**_PENALTY, "cache_length": 30000}, f"{_TS}.reward_fn_args"),
                      ({**_PENALTY, "typo": 1}, f"{_TS}.reward_fn_args.typo")):
        native, entries = run({"reward_fn_args": args}, default_reward_fn_type="math_dapo_reward")
        assert entries[key][0] == "refused", args
    # an evaluation taskset without the penalty (Trinity-RFT does not inherit the training taskset's
    # reward_fn_args): its files are scored without it
    native, entries = run({"reward_fn_args": _PENALTY}, evals=[{}], default_reward_fn_type="math_dapo_reward")
    assert native["data"]["val_file_settings"] == {"eval.jsonl@test": {"overlong_penalty": False}}
    assert native["reward"]["overlong_buffer"]["enable"] is True
    _, entries = run({"reward_fn_args": _PENALTY}, evals=[{"reward_fn_args": _PENALTY}], default_reward_fn_type="math_dapo_reward")
    assert entries[f"{_IN}.eval_tasksets[0].reward_fn_args"][0] == "dropped"


def test_bots_workflow_is_bots_math_over_the_prompt_messages():
    native, entries = run({"workflow_args": {"with_think": True, "format_score_coef": 0.2}}, evals=[{}],
                          default_workflow_type=_BOTS, default_reward_fn_type="math_reward")
    assert native["reward"]["custom_reward_function"] == {"name": "bots_math", "reward_kwargs": {"with_think": True, "format_score_coef": 0.2}}
    assert "system_prompt" not in native.get("data", {})  # the messages as they are
    assert entries[f"{_IN}.default_reward_fn_type"][0] == "dropped"  # BOTS scores with its own reward
    assert entries[f"{_IN}.default_workflow_type"][0] == "refused"  # the evaluation taskset has no with_think
    raw = {"buffer": {"explorer_input": {"default_workflow_type": _BOTS, "taskset": {
        "path": "data.jsonl", "format": {"system_prompt": "Hi"}, "workflow_args": {"use_base": True}}}}}
    refused = {e.key for e in translate(raw, "trinity")[1].entries if e.status == "refused"}
    assert {f"{_TS}.format.system_prompt", f"{_TS}.workflow_args.use_base"} <= refused


def test_bots_reference_collection_logs_every_task_to_the_file_its_variable_names(monkeypatch):
    # examples/bots/ref_eval_collect.yaml: BOTS's math workflow that also appends each task's rewards
    # to BOTS_REF_EVAL_LOG_FILE, else ./bots_ref_eval_log.jsonl (the workflow's default)
    monkeypatch.delenv("BOTS_REF_EVAL_LOG_FILE", raising=False)
    for name in ("bots_ref_eval_collect_math_boxed_workflow",
                 "examples.bots.workflow.bots_math_boxed_workflow.BOTSRefEvalCollectMathBoxedWorkflow"):
        native, entries = run({}, default_workflow_type=name, mode="explore")
        assert native["explorer"] == {"task_rewards_file": "./bots_ref_eval_log.jsonl"}
        assert native["reward"]["custom_reward_function"] == {"name": "bots_math"}
    monkeypatch.setenv("BOTS_REF_EVAL_LOG_FILE", "/logs/ref.jsonl")
    native, entries = run({}, default_workflow_type="bots_ref_eval_collect_math_boxed_workflow")
    assert native["explorer"]["task_rewards_file"] == "/logs/ref.jsonl"
    # posttrain's validation logs nothing: as an evaluation taskset's workflow it is refused
    _, entries = run({}, evals=[{"default_workflow_type": "bots_ref_eval_collect_math_boxed_workflow"}], default_workflow_type=_BOTS)
    assert entries[f"{_IN}.eval_tasksets[0].default_workflow_type"][0] == "refused"
