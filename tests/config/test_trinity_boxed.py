"""Trinity-RFT's math_boxed_workflow and math_boxed_reward translate to the single-turn rollout with
the math_boxed scorer, the workflow's system prompt, use_base's plain-text prompt and with_think's
format penalty; an evaluation taskset's own use_base prompts its files otherwise (data.val_file_settings)."""

from __future__ import annotations

import json

from posttrain.config.dialects import translate
from posttrain.config.dialects.prompts import BOXED_SYSTEM_PROMPT, BOXED_THINK_SYSTEM_PROMPT
from posttrain.config.sections.data import DataConfig
from posttrain.data import build_rl_dataset
from posttrain.models.tiny import build_tiny_tokenizer

_IN = "buffer.explorer_input"


def run(taskset: dict, **explorer_input):
    raw = {"buffer": {"explorer_input": {"taskset": {"path": "data.jsonl", **taskset}, **explorer_input}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def test_the_boxed_workflow_scores_with_math_boxed_and_its_own_system_prompt():
    for name in ("math_boxed_workflow", "async_math_boxed_workflow"):
        native, entries = run({}, default_workflow_type=name)
        assert native["reward"]["custom_reward_function"] == {"name": "math_boxed"}
        assert native["data"]["system_prompt"] == BOXED_SYSTEM_PROMPT
        assert entries[f"{_IN}.default_workflow_type"][0] == "translated"
    native, _ = run({"format": {"system_prompt": "Box it."}}, default_workflow_type="math_boxed_workflow")
    assert native["data"]["system_prompt"] == "Box it."  # the taskset's own wins


def test_with_think_and_format_score_coef_are_the_scorers_arguments():
    args = {"with_think": True, "format_score_coef": 0.3}
    native, _ = run({"workflow_args": args}, default_workflow_type="math_boxed_workflow")
    assert native["reward"]["custom_reward_function"]["reward_kwargs"] == args
    assert native["data"]["system_prompt"] == BOXED_THINK_SYSTEM_PROMPT
    native, entries = run({"workflow_args": {"format_score_coef": 0.3}}, default_workflow_type="math_boxed_workflow")
    assert "reward_kwargs" not in native["reward"]["custom_reward_function"]  # no penalty without with_think
    assert entries[f"{_IN}.taskset.workflow_args.format_score_coef"][0] == "dropped"
    _, entries = run({"workflow_args": {"with_thinking": True}}, default_workflow_type="math_boxed_workflow")
    assert entries[f"{_IN}.taskset.workflow_args.with_thinking"][0] == "refused"


def test_math_boxed_reward_with_another_workflow_and_its_ignored_arguments():
    native, entries = run({}, default_workflow_type="async_math_workflow", default_reward_fn_type="math_boxed_reward",
                          reward_fn_args={"unused": 1})
    assert native["reward"]["custom_reward_function"] == {"name": "math_boxed"}
    assert "system_prompt" not in native.get("data", {})  # math_workflow adds the R1 prompt with math_reward only
    assert entries[f"{_IN}.reward_fn_args"][0] == "dropped"


def test_an_evaluation_taskset_must_prompt_and_score_as_the_training_one():
    think = {"workflow_args": {"with_think": True}}
    _, entries = run(think, default_workflow_type="math_boxed_workflow", eval_tasksets=[{"path": "t.jsonl", **think}])
    assert entries[f"{_IN}.eval_tasksets[0].workflow_args.with_think"][0] == "dropped"
    assert not [k for k, (status, _) in entries.items() if status == "refused"]
    # the eval taskset's use_base (off) is its own (Trinity-RFT does not inherit workflow_args): its
    # files are prompted with the tokenizer's chat template (data.val_file_settings)
    native, entries = run({"workflow_args": {"use_base": True}}, default_workflow_type="math_boxed_workflow",
                          eval_tasksets=[{"path": "t.jsonl"}])
    assert entries[f"{_IN}.default_workflow_type"][0] == "translated"
    assert native["data"]["val_file_settings"] == {"t.jsonl@test": {"chat_template": "tokenizer"}}
    native, entries = run({}, default_workflow_type="math_boxed_workflow",
                          eval_tasksets=[{"path": "t.jsonl", "workflow_args": {"use_base": True}}])
    assert native["data"]["val_file_settings"]["t.jsonl@test"]["chat_template"].startswith("{% if bos_token %}")  # BASE_MODEL_TEMPLATE


def _base_prompt(tmp_path, system: str | None) -> str:
    native, _ = run({"workflow_args": {"use_base": True}, **({"format": {"system_prompt": system}} if system else {})},
                    default_workflow_type="math_boxed_workflow")
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "1+1?"}) + "\n")
    data = DataConfig(return_full_prompt=True, max_prompt_length=4096, chat_template=native["data"]["chat_template"],
                      system_prompt=native["data"]["system_prompt"])
    return build_rl_dataset(data, str(path), build_tiny_tokenizer())[0].full_prompt


def test_use_base_renders_trinitys_plain_text_prompt(tmp_path):
    # Trinity-RFT's MathBoxedWorkflow.format_prompt: "System:" + system + "\nUser:\n" + question + "\nAssistant:\n"
    assert _base_prompt(tmp_path, "Be brief.") == "System:Be brief.\nUser:\n1+1?\nAssistant:\n"
    assert _base_prompt(tmp_path, None) == f"System:{BOXED_SYSTEM_PROMPT}\nUser:\n1+1?\nAssistant:\n"
