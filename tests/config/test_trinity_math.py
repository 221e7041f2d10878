"""Trinity-RFT's math workflow and reward functions translate to posttrain's prompt and scorers, so
a translated file sends the messages Trinity's MathWorkflow sends and scores as its reward classes do
(Trinity-RFT: trinity/common/workflows/workflow.py MathWorkflow, trinity/common/rewards/)."""

from __future__ import annotations

import textwrap

import pytest
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


def _rm_gallery_math_verify(response: str, reference: str) -> float:
    """RM-Gallery's math_verify_reward as its source reads (re-implemented): LaTeX and plain
    extraction on both stripped sides, the first parse of each compared, 0 on no parse or an error."""
    from math_verify import parse, verify
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    try:
        gold, pred = parse(reference.strip(), extraction_config=config), parse(response.strip(), extraction_config=config)
        return float(bool(gold and pred) and verify(gold[0], pred[0]))
    except Exception:
        return 0.0


def test_rm_gallery_math_verify_is_not_posttrains_math_scorer_so_it_stays_refused():
    from posttrain.rewards.math_scorer import math_score

    agree = [("The answer is \\boxed{\\frac{1}{2}}", "0.5"), ("x = 3", "4"), ("\\boxed{3}", "\\frac{6}{2}"), ("The answer is 12", "12")]
    assert [_rm_gallery_math_verify(r, g) for r, g in agree] == [math_score("m", r, g)["score"] for r, g in agree] == [1.0, 0.0, 1.0, 1.0]
    # where they part: an answer inside the thinking, a tuple against a set, an empty reference
    assert _rm_gallery_math_verify("<think>\\boxed{7}</think> \\boxed{3}", "3") == 0.0
    assert math_score("m", "<think>\\boxed{7}</think> \\boxed{3}", "3")["score"] == 1.0
    assert (_rm_gallery_math_verify("\\boxed{1,2}", "\\{2,1\\}"), math_score("m", "\\boxed{1,2}", "\\{2,1\\}")["score"]) == (0.0, 1.0)
    assert _rm_gallery_math_verify("\\boxed{3}", "") == 0.0
    with pytest.raises(ValueError):
        math_score("m", "\\boxed{3}", "")
    _, entries = run({"default_reward_fn_type": "rm_gallery_reward", "reward_fn_args": {"reward_name": "math_verify_reward"}},
                     default_workflow_type="math_workflow")
    status, reason = entries["buffer.explorer_input.taskset.default_reward_fn_type"]
    assert status == "refused" and "math_verify_reward is not posttrain's math scorer" in reason
    _, entries = run({}, default_workflow_type="math_rm_workflow", default_reward_fn_type="rm_gallery_reward")
    assert entries["buffer.explorer_input.default_workflow_type"][0] == "refused"
