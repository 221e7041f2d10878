"""Tool calling on the agent loop with a scripted engine: what the model and the tools write, which
tokens train, and what each rollout.multi_turn key changes."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from posttrain.config.sections.rollout import MultiTurnConfig
from posttrain.models.tokenizer import CHATML_TEMPLATE, build_tiny_tokenizer
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.tool_loop import ToolRollout

TOK = build_tiny_tokenizer()
EOS = TOK.eos_token_id
CALC = '<tool_call>{{"name": "calculator", "arguments": {{"expression": "{}"}}}}</tool_call>'


def ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False)["input_ids"]


class Engine:
    """Call k answers every row with script[k] + EOS (a callable: script[k](row's prompt text))."""

    def __init__(self, script):
        self.script, self.prompts = script, []

    def __call__(self, prompts: PromptBatch, params: SamplingParams) -> RolloutBatch:
        self.prompts.append([TOK.decode(r[m > 0].tolist()) for r, m in zip(prompts.input_ids, prompts.attention_mask)])
        step = self.script[len(self.prompts) - 1]
        rows = [(ids(step(p) if callable(step) else step) + [EOS])[: params.max_new_tokens] for p in self.prompts[-1]]
        width = max(map(len, rows))
        b = len(rows)
        return RolloutBatch(
            prompt_ids=prompts.input_ids, prompt_mask=prompts.attention_mask,
            response_ids=torch.tensor([r + [0] * (width - len(r)) for r in rows]),
            response_mask=torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows]),
            rollout_logprobs=torch.full((b, width), -0.5), weights_version=torch.zeros(b, dtype=torch.long),
            group_index=list(prompts.uid), data_source=list(prompts.data_source), ground_truth=[None] * b,
            extra_info=[{}] * b, raw_prompt=[""] * b,
        )


def tool_file(tmp_path, body: str | None = None):
    path = tmp_path / "tools.yaml"
    path.write_text(body or "tools:\n  - class_name: calculator\n    config: {type: native}\n")
    return str(path)


def prompts(questions: list[str], tools: ToolRollout, raw_chat: bool = False) -> PromptBatch:
    chats = [[{"role": "user", "content": q}] for q in questions]
    rows = [ids(tools.renderer.conversation_text(c, True)) for c in chats]
    width = max(map(len, rows))
    return PromptBatch(
        input_ids=torch.tensor([[0] * (width - len(r)) + r for r in rows]),
        attention_mask=torch.tensor([[0.0] * (width - len(r)) + [1.0] * len(r) for r in rows]),
        uid=[f"s1/{i}" for i in range(len(rows))], data_source=["calc"] * len(rows), ground_truth=["x"] * len(rows),
        extra_info=[{"row": i} for i in range(len(rows))], raw_chat=chats if raw_chat else [],
    )


def rollout(tmp_path, script, questions=("3*4?",), n=1, length=1024, tools_yaml=None, **keys):
    mt = MultiTurnConfig(enable=True, tool_config_path=tool_file(tmp_path, tools_yaml), **keys)
    tools = ToolRollout(mt, TOK, CHATML_TEMPLATE)
    engine = Engine(script)
    batch, metrics = tools.generate(engine, prompts(list(questions), tools, raw_chat=keys.get("use_inference_chat_template", False)),
                                    SamplingParams(n=n, max_new_tokens=length), version=2)
    return batch, metrics, engine


def test_a_call_runs_the_tool_and_only_the_model_tokens_train(tmp_path):
    batch, metrics, engine = rollout(tmp_path, [CALC.format("3*4"), "12"])
    call, answer = CALC.format("3*4") + "<|im_end|>", "12<|im_end|>"
    tool_turn = "\n<|im_start|>user\n<tool_response>\n12\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    pieces = [(call, 1.0), (tool_turn, 0.0), (answer, 1.0)]
    assert batch.response_ids[0][batch.response_mask[0] > 0].tolist() == [i for t, _ in pieces for i in ids(t)]
    assert batch.loss_mask[0][batch.response_mask[0] > 0].tolist() == [m for t, m in pieces for _ in ids(t)]
    # the prompt shows the tools; the second turn's prompt is everything so far
    assert engine.prompts[0][0].startswith("<|im_start|>system\n<tools>calculator(expression)</tools>")
    assert engine.prompts[1][0] == engine.prompts[0][0] + call + tool_turn
    assert batch.group_index == ["s1/0"] and batch.ground_truth == ["x"] and batch.extra_info[0]["row"] == 0
    assert metrics["tool/calls_per_traj"] == 1.0 and metrics["tool/call_success_rate"] == 1.0
    assert metrics["tool/tokenization_mismatch"] == 0.0 and metrics["tool/assistant_turns"] == 2.0


def test_tool_failures_become_tool_messages(tmp_path):
    bad = ['<tool_call>{"name": "calculator", "arguments": </tool_call>', '<tool_call>{"name": "search", "arguments": {}}</tool_call>',
           CALC.format("1/0"), "done"]
    batch, metrics, engine = rollout(tmp_path, bad, length=1024)
    seen = engine.prompts[-1][0]
    assert "Error: could not read the tool call: not valid JSON" in seen
    assert "Error: unknown tool 'search'; available: calculator" in seen
    assert "Error when executing tool: ValueError: division by zero" in seen
    assert metrics["tool/parse_failures_per_traj"] == 1.0 and metrics["tool/unknown_tool_per_traj"] == 1.0
    assert metrics["tool/failed_calls_per_traj"] == 1.0 and metrics["tool/call_success_rate"] == 0.0


@pytest.mark.parametrize("side, kept", [("left", "1000000000...(truncated)"), ("right", "(truncated)...0000000000"),
                                        ("middle", "10000...(truncated)...00000")])
def test_a_long_tool_response_is_truncated_on_the_configured_side(tmp_path, side, kept):
    _, metrics, engine = rollout(tmp_path, [CALC.format("10**30"), "ok"], max_tool_response_length=10, tool_response_truncate_side=side)
    assert f"<tool_response>\n{kept}\n</tool_response>" in engine.prompts[1][0]
    assert metrics["tool/truncated_responses_per_traj"] == 1.0


def test_max_assistant_turns_and_max_user_turns_end_the_conversation(tmp_path):
    always = [CALC.format("1+1")] * 9
    _, metrics, engine = rollout(tmp_path, always, max_assistant_turns=3)
    assert len(engine.prompts) == 3 and metrics["tool/assistant_turns"] == 3.0 and metrics["tool/calls_per_traj"] == 2.0
    _, metrics, engine = rollout(tmp_path, always, max_user_turns=1)
    assert len(engine.prompts) == 2 and metrics["tool/calls_per_traj"] == 1.0  # one tool turn, then the last model turn
    _, metrics, engine = rollout(tmp_path, always)  # no limit: until the response length is used up
    assert len(engine.prompts) > 3


def test_max_parallel_calls_runs_that_many_calls_of_a_turn(tmp_path):
    three = "".join(CALC.format(e) for e in ("1+1", "2+2", "3+3"))
    for limit, answers in ((1, ["2"]), (2, ["2", "4"])):
        _, metrics, engine = rollout(tmp_path, [three, "ok"], max_parallel_calls=limit)
        assert engine.prompts[1][0].count("<tool_response>") == limit
        assert metrics["tool/calls_per_traj"] == limit and metrics["tool/dropped_calls_per_traj"] == 3 - limit


def test_conversations_of_all_prompts_and_samples_share_each_generate_call(tmp_path):
    script = [lambda p: CALC.format("2*2") if "A" in p else "no tool", "4"]
    batch, metrics, engine = rollout(tmp_path, script, questions=("A?", "B?"), n=2)
    assert [len(p) for p in engine.prompts] == [4, 2]  # turn 2: only the two conversations of A called a tool
    assert batch.group_index == ["s1/0", "s1/0", "s1/1", "s1/1"] and metrics["tool/trajs_with_call"] == 0.5


def test_use_inference_chat_template_re_renders_the_history(tmp_path):
    # a template that, like Qwen3's, drops reasoning from earlier assistant turns
    template = CHATML_TEMPLATE.replace("message['content'] + '<|im_end|>'", "message['content'].split('</think>')[-1] + '<|im_end|>'")
    think = "<think>hmm</think>" + CALC.format("3*4")
    for infer, shown in ((True, False), (False, True)):
        mt = MultiTurnConfig(enable=True, tool_config_path=tool_file(tmp_path), use_inference_chat_template=infer)
        tools = ToolRollout(mt, TOK, template)
        engine = Engine([think, "12"])
        batch, metrics = tools.generate(engine, prompts(["3*4?"], tools, raw_chat=True), SamplingParams(max_new_tokens=256), 0)
        assert ("<think>hmm</think>" in engine.prompts[1][0]) is shown
        assert "<think>hmm</think>" in TOK.decode(batch.response_ids[0].tolist())  # training keeps the exact tokens


def test_tokenization_sanity_check_counts_conversations_the_template_renders_otherwise(tmp_path, caplog):
    template = CHATML_TEMPLATE.replace("message['content'] + '<|im_end|>'", "message['content'].split('</think>')[-1] + '<|im_end|>'")
    spaced = CALC.format("3*4") + "  "  # trailing spaces: the template keeps them, so whitespace-only rules agree
    for mode, script, expected in (("strict", ["<think>x</think>" + CALC.format("3*4"), "12"], 1.0),
                                   ("disable", ["<think>x</think>" + CALC.format("3*4"), "12"], 0.0),
                                   ("strict", [spaced, "12"], 0.0)):
        mt = MultiTurnConfig(enable=True, tool_config_path=tool_file(tmp_path), tokenization_sanity_check_mode=mode)
        tools = ToolRollout(mt, TOK, template)
        with caplog.at_level(logging.WARNING):
            _, metrics = tools.generate(Engine(script), prompts(["3*4?"], tools), SamplingParams(max_new_tokens=256), 0)
        assert metrics["tool/tokenization_mismatch"] == expected, mode
    assert "differ from the chat template" in caplog.text


def test_ignore_strippable_ignores_whitespace_differences(tmp_path):
    template = CHATML_TEMPLATE.replace("message['content'] + '<|im_end|>'", "message['content'].strip() + '<|im_end|>'")
    for mode, expected in (("strict", 1.0), ("ignore_strippable", 0.0)):
        mt = MultiTurnConfig(enable=True, tool_config_path=tool_file(tmp_path), tokenization_sanity_check_mode=mode)
        tools = ToolRollout(mt, TOK, template)
        _, metrics = tools.generate(Engine([" " + CALC.format("3*4"), "12"]), prompts(["3*4?"], tools), SamplingParams(max_new_tokens=256), 0)
        assert metrics["tool/tokenization_mismatch"] == expected, mode


class Tutor:
    """An interaction: asks once for a check, then ends with a score of 1."""

    def __init__(self, config):
        self.config, self.turns = config, {}

    def start_interaction(self, instance_id, **kwargs):
        self.turns[instance_id] = 0

    async def generate_response(self, instance_id, messages, **kwargs):  # verl's interactions are async
        self.turns[instance_id] += 1
        return self.turns[instance_id] > 1, "Are you sure?", 0.5 * self.turns[instance_id], {}

    def finalize_interaction(self, instance_id):
        self.turns.pop(instance_id)


def test_an_interaction_answers_turns_without_tool_calls(tmp_path):
    inter = tmp_path / "interaction.yaml"
    inter.write_text(f"interaction:\n  - name: tutor\n    class_name: {__name__}.Tutor\n    config: {{}}\n")
    batch, metrics, engine = rollout(tmp_path, ["12", "yes, 12"], interaction_config_path=str(inter))
    assert len(engine.prompts) == 2 and "<|im_start|>user\nAre you sure?<|im_end|>" in engine.prompts[1][0]
    assert batch.extra_info[0]["turn_scores"] == [0.5, 1.0] and batch.extra_info[0]["num_turns"] == 2
    without, _, engine = rollout(tmp_path, ["12", "yes, 12"])
    assert len(engine.prompts) == 1
