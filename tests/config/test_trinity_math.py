"""Trinity-RFT's math workflow and reward functions translate to posttrain's prompt and scorers, so
a translated file sends the messages Trinity's MathWorkflow sends and scores as its reward classes do
(Trinity-RFT: trinity/common/workflows/workflow.py MathWorkflow, trinity/common/rewards/)."""

from __future__ import annotations

import textwrap

import pyarrow as pa
import pyarrow.parquet as pq

from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.data import build_rl_dataset
from posttrain.models.tiny import build_tiny_tokenizer
from posttrain.trainer.rewarding import reward_function

# The DeepSeek-R1-Zero template (arXiv:2501.12948, Table 1) as Trinity's MathWorkflow lays it out.
R1 = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
      "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
      "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e.,\n"
      "<think> reasoning process here </think>\n<answer> answer here </answer>.\n")


def run(taskset: dict, **explorer_input):
    raw = {"buffer": {"explorer_input": {"taskset": {"path": "data.jsonl", **taskset}, **explorer_input}}}
    native, report = translate(raw, "trinity")
    return native, {e.key: (e.status, e.reason) for e in report.entries}


def _load(tmp_path, fmt: str, **explorer_input):
    pq.write_table(pa.table({"question": ["What is 6 x 7?"], "answer": ["6 x 7 = 42\n#### 42"]}), tmp_path / "train.parquet")
    path = tmp_path / "trinity.yaml"
    extra = "".join(f"\n    {k}: {v}" for k, v in explorer_input.items())
    path.write_text(textwrap.dedent(f"""\
        algorithm: {{algorithm_type: grpo, repeat_times: 2}}
        model: {{model_path: {tmp_path}/model, max_prompt_tokens: 1024, max_response_tokens: 8}}
        buffer:
          batch_size: 1
          explorer_input:
            taskset:
              path: {tmp_path}
              split: train
              format: {fmt}""") + extra + "\n")
    return load_config(path)


def _messages(cfg) -> list[dict]:
    """The chat messages posttrain renders for the row, the reply prefix as the open assistant turn
    (the formatter adds it when it renders)."""
    ds = build_rl_dataset(cfg.data, cfg.data.train_files, build_tiny_tokenizer())
    messages = ds.encode_row(0)[1]
    prefix = cfg.data.reply_prefix
    return messages + ([{"role": "assistant", "content": prefix}] if prefix else [])


def test_math_workflow_sends_trinitys_messages(tmp_path):
    # MathWorkflow.format_messages: the R1 system prompt (math_reward, no system_prompt of the
    # taskset's), the task as the user turn, reply_prefix as an assistant message.
    cfg = _load(tmp_path, "{prompt_key: question, response_key: answer}", default_workflow_type="math_workflow")
    assert _messages(cfg) == [{"role": "system", "content": R1}, {"role": "user", "content": "What is 6 x 7?"}]
    assert cfg.reward.custom_reward_function.name == "think_answer" and cfg.reward.custom_reward_function.path is None
    cfg = _load(tmp_path, "{prompt_key: question, response_key: answer, reply_prefix: '<think>'}", default_workflow_type="async_math_workflow")
    assert _messages(cfg) == [{"role": "system", "content": R1}, {"role": "user", "content": "What is 6 x 7?"},
                              {"role": "assistant", "content": "<think>"}]
    # a taskset's own system prompt wins; another reward function adds none
    cfg = _load(tmp_path, "{prompt_key: question, system_prompt: Be brief.}", default_workflow_type="math_workflow")
    assert _messages(cfg)[0] == {"role": "system", "content": "Be brief."}
    cfg = _load(tmp_path, "{prompt_key: question}", default_workflow_type="math_workflow", default_reward_fn_type="countdown_reward")
    assert _messages(cfg) == [{"role": "user", "content": "What is 6 x 7?"}]
    assert cfg.reward.custom_reward_function.name == "countdown_equation"


def test_the_translated_reward_scores_as_math_reward(tmp_path):
    cfg = _load(tmp_path, "{prompt_key: question, response_key: answer}", default_workflow_type="math_workflow")
    fn = reward_function(cfg)
    # 1 for the answer + 0.1 for the layout, each logged
    assert fn("", "<think>6 x 7</think>\n<answer>42</answer><|im_end|>", "6 x 7 = 42\n#### 42") == {"score": 1.1, "accuracy": 1.0, "format_score": 0.1}
    assert fn("", "42", "#### 42") == {"score": 0.9, "accuracy": 1.0, "format_score": -0.1}


def test_reward_function_types_translate_or_are_refused():
    native, entries = run({"default_reward_fn_type": "countdown_reward"}, default_workflow_type="simple_workflow")
    assert native["reward"]["custom_reward_function"] == {"name": "countdown_equation"}
    assert entries["buffer.explorer_input.taskset.default_reward_fn_type"][0] == "translated"
    native, entries = run({}, default_reward_fn_type="math_reward", default_workflow_type="simple_workflow")
    assert native["reward"]["custom_reward_function"] == {"name": "think_answer"}
    assert "system_prompt" not in native.get("data", {})  # simple_workflow adds no prompt
    for name, needle in (("rm_gallery_reward", "RM-Gallery"), ("mine", "translates are")):
        _, entries = run({"default_reward_fn_type": name}, default_workflow_type="math_workflow")
        status, reason = entries["buffer.explorer_input.taskset.default_reward_fn_type"]
        assert status == "refused" and needle in reason, name
    _, entries = run({"reward_fn_args": {"pattern": ".*"}}, default_workflow_type="math_workflow")
    assert entries["buffer.explorer_input.taskset.reward_fn_args"][0] == "refused"
    # the reward of a refused workflow is named with it, not run
    _, entries = run({}, default_workflow_type="frozen_lake_workflow", default_reward_fn_type="math_reward")
    assert entries["buffer.explorer_input.default_reward_fn_type"][0] == "dropped"


def test_evaluation_tasksets_share_the_training_reward_and_prompt():
    same = {"path": "test.jsonl", "default_workflow_type": "math_workflow"}
    native, entries = run({}, default_workflow_type="math_workflow", eval_tasksets=[same])
    assert entries["buffer.explorer_input.eval_tasksets[0].default_workflow_type"][0] == "translated"
    assert native["data"]["system_prompt"] == R1
    other = {**same, "default_reward_fn_type": "countdown_reward"}
    _, entries = run({}, default_workflow_type="math_workflow", eval_tasksets=[other])
    status, reason = entries["buffer.explorer_input.eval_tasksets[0].default_reward_fn_type"]
    assert status == "refused" and "conflicts with" in reason


RM = {"default_reward_fn_type": "rm_gallery_reward", "reward_fn_args": {"reward_name": "math_verify_reward"}}
_TS = "buffer.explorer_input.taskset"


def test_math_rm_workflow_scores_with_rm_gallerys_math_verify_reward(tmp_path):
    for workflow in ("math_rm_workflow", "async_math_rm_workflow"):
        native, entries = run({"default_workflow_type": workflow, **RM})
        assert native["reward"]["custom_reward_function"] == {"name": "math_verify_first"}
        assert "system_prompt" not in native.get("data", {})  # simple_workflow's messages: no prompt of its own
        assert entries[f"{_TS}.default_workflow_type"][0] == "dropped"
        assert entries[f"{_TS}.default_reward_fn_type"][0] == "translated"
        assert entries[f"{_TS}.reward_fn_args.reward_name"][0] == "dropped"
    # the reward named at buffer.explorer_input reaches the taskset, as Trinity-RFT fills it in
    native, _ = run({}, default_workflow_type="math_rm_workflow", **RM)
    assert native["reward"]["custom_reward_function"] == {"name": "math_verify_first"}
    # the messages are the taskset's system prompt, the question and reply_prefix; the reward is RM-Gallery's
    fmt = "{prompt_key: question, response_key: answer, system_prompt: Be brief., reply_prefix: 'Answer:'}"
    cfg = _load(tmp_path, fmt, default_workflow_type="math_rm_workflow", default_reward_fn_type="rm_gallery_reward",
                reward_fn_args="{reward_name: math_verify_reward}")
    assert _messages(cfg) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 6 x 7?"},
                              {"role": "assistant", "content": "Answer:"}]
    fn = reward_function(cfg)
    # the whole response is read (the thinking too); the reference as written: a bare 2\sqrt{2} reads as 2
    assert fn("", "<think>\\boxed{42}</think> I am not sure<|im_end|>", "42") == {"score": 1.0, "math_verify": 1.0}
    assert fn("", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}") == {"score": 0.0, "math_verify": 0.0}


def test_math_verify_rewards_fields():
    fields = {"reward_name": "math_verify_reward", "name": "acc", "timeout_score": 0.0, "max_workers": 4, "colour": "red"}
    native, entries = run({"default_workflow_type": "math_rm_workflow", "default_reward_fn_type": "rm_gallery_reward",
                           "reward_fn_args": fields})
    assert native["reward"]["custom_reward_function"] == {"name": "math_verify_first", "reward_kwargs": {"name": "acc"}}
    assert [entries[f"{_TS}.reward_fn_args.{k}"][0] for k in ("name", "timeout_score", "max_workers", "colour")] == \
        ["translated", "dropped", "dropped", "dropped"]
    assert "ignore fields" in entries[f"{_TS}.reward_fn_args.colour"][1]
    native, entries = run({"default_workflow_type": "math_rm_workflow", "default_reward_fn_type": "rm_gallery_reward",
                           "reward_fn_args": {"reward_name": "math_verify_reward", "name": "math_verify", "timeout_score": 0.5}})
    assert "reward_kwargs" not in native["reward"]["custom_reward_function"]  # the default name
    status, reason = entries[f"{_TS}.reward_fn_args.timeout_score"]
    assert status == "refused" and "main thread" in reason


def test_other_rm_gallery_rewards_and_other_pairings_are_refused():
    _, entries = run({"default_workflow_type": "math_rm_workflow", "default_reward_fn_type": "rm_gallery_reward",
                      "reward_fn_args": {"reward_name": "base_helpfulness_listwise"}})
    status, reason = entries[f"{_TS}.reward_fn_args.reward_name"]
    assert status == "refused" and "'base_helpfulness_listwise'" in reason and "['math_verify_reward']" in reason
    _, entries = run({"default_workflow_type": "math_rm_workflow", "default_reward_fn_type": "rm_gallery_reward"})
    assert entries[f"{_TS}.default_reward_fn_type"][0] == "refused"  # no reward_name: Trinity-RFT cannot build it
    for args in ({"reward_name": ["math_verify_reward"]}, "math_verify_reward"):  # malformed: refused, no traceback
        _, entries = run({"default_workflow_type": "math_rm_workflow", "default_reward_fn_type": "rm_gallery_reward", "reward_fn_args": args})
        assert "refused" in {status for status, _ in entries.values()}, args
    # math_rm_workflow calls its reward with the response object: only rm_gallery_reward takes that
    _, entries = run({"default_workflow_type": "math_rm_workflow", "default_reward_fn_type": "math_reward"})
    status, reason = entries[f"{_TS}.default_reward_fn_type"]
    assert status == "refused" and "only rm_gallery_reward takes" in reason
    _, entries = run({"default_workflow_type": "math_rm_workflow"})
    assert entries[f"{_TS}.default_workflow_type"][0] == "refused"
    # and rm_gallery_reward under another workflow gets the response text only: Trinity-RFT fails there
    _, entries = run({"default_workflow_type": "simple_workflow", **RM})
    status, reason = entries[f"{_TS}.default_reward_fn_type"]
    assert status == "refused" and "math_rm_workflow" in reason


def test_an_evaluation_taskset_scores_as_the_training_one():
    same = {"path": "test.jsonl", "default_workflow_type": "math_rm_workflow", **RM}
    native, entries = run({"default_workflow_type": "math_rm_workflow", **RM}, eval_tasksets=[same])
    assert entries["buffer.explorer_input.eval_tasksets[0].default_reward_fn_type"][0] == "translated"
    renamed = {**same, "reward_fn_args": {"reward_name": "math_verify_reward", "name": "other"}}
    _, entries = run({"default_workflow_type": "math_rm_workflow", **RM}, eval_tasksets=[renamed])
    assert entries["buffer.explorer_input.eval_tasksets[0].reward_fn_args.name"][0] == "refused"
    _, entries = run({"default_workflow_type": "math_workflow"}, eval_tasksets=[same])
    status, reason = entries["buffer.explorer_input.eval_tasksets[0].default_reward_fn_type"]
    assert status == "refused" and "conflicts with" in reason
