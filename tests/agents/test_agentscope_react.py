"""posttrain's AgentScope ReAct agent functions (posttrain.agents.agentscope_react) against the agent
endpoint with a scripted policy: the real agentscope ReActAgent calls the Python tool (run in
posttrain's sandbox), answers through generate_response, and is scored as Trinity-RFT's
MathBoxedRewardFn scores it; every call it made is recorded."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agentscope", reason="the agentscope extra (pip install 'posttrain[agentscope]')")

from agent_helpers import call, scripted_episode  # noqa: E402
from posttrain.agents.agentscope_react import boxed_reward, execute_python_code, gsm8k_truth, math_agent, template_agent  # noqa: E402

ROW = {"question": "What is 3 + 4?", "answer": "3 + 4 = 7\n#### 7"}
KEYS = {"prompt_key": "question", "response_key": "answer", "max_tokens": 300}


def episode(agent, texts, row=ROW, **kwargs):
    """(the function's result, the recorded calls, the policy) of one episode against a scripted policy."""
    return scripted_episode(agent, texts, row, **{**KEYS, **kwargs})


def test_the_math_agent_runs_python_then_answers_and_a_right_boxed_answer_scores_one():
    texts = [call("execute_python_code", {"code": "print(3 + 4)"}), call("generate_response", {"result": "It is \\boxed{7}."}), "It is 7."]
    result, calls, policy = episode(math_agent, texts)
    assert result["reward"] == 1.0 and result["accuracy"] == 1.0 and result["format_score"] == 0.0
    assert len(calls) == 3  # the tool call, the structured answer, the closing text: each a training row
    assert "execute_python_code(code,timeout)" in policy.prompts[0] and "What is 3 + 4?" in policy.prompts[0]
    assert "<returncode>0</returncode><stdout>7\n</stdout><stderr></stderr>" in policy.prompts[1]  # the sandbox ran the code
    assert [p.max_new_tokens for p in policy.params] == [300] * 3  # the kwargs' max_tokens per call


@pytest.mark.parametrize("answer, reward", [("\\boxed{8}", 0.0), ("7", 0.0), ("\\boxed{7.0}", 1.0)])
def test_a_wrong_or_unboxed_answer_scores_zero(answer, reward):
    result, calls, _ = episode(math_agent, [call("generate_response", {"result": answer}), "done"])
    assert result["reward"] == reward and len(calls) == 2


def test_without_a_structured_reply_the_template_scores_nothing_and_the_math_agent_scores_the_last_text():
    text = "The answer is \\boxed{7}."  # never a tool call: reminded each iteration, then asked to sum up
    template, calls, _ = episode(template_agent, [text], type="gsm8k")
    assert template["reward"] == 0.0 and len(calls) == 11  # 10 reasoning-acting iterations + the summary
    math, calls, _ = episode(math_agent, [text])
    assert math["reward"] == 1.0 and len(calls) == 11  # Trinity-RFT's math workflow scores the final message's text


def test_the_template_agent_reads_its_columns_and_refuses_an_unknown_type():
    result, calls, policy = episode(template_agent, [call("generate_response", {"result": "\\boxed{7}"}), "ok"], type="gsm8k")
    assert result["reward"] == 1.0 and result["react_memory_length"] >= 3 and len(calls) == 2
    assert "reset_equipped_tools" in policy.prompts[0]  # AgentScope's meta tool, as the template enables it
    with pytest.raises(ValueError, match="no AgentScope ReAct template for type 'math'"):
        asyncio.run(template_agent("http://127.0.0.1:1/v1", ROW, type="math"))
    with pytest.raises(KeyError, match="no column \\['prompt'\\]"):
        asyncio.run(math_agent("http://127.0.0.1:1/v1", {"question": "q", "response": "1"}))


def test_the_reward_follows_trinitys_gsm8k_truth_and_boxed_answer():
    assert gsm8k_truth("a\n#### 1,234 ") == "1,234" and gsm8k_truth(5) == "5" and gsm8k_truth("12") == "12"
    # Qwen2.5-Math's string cleaning, as Trinity-RFT compares: equal spellings match, a decimal and a fraction do not
    assert boxed_reward("so \\boxed{\\dfrac{1}{2}}", "1/2")["reward"] == 1.0
    assert boxed_reward("so \\boxed{\\frac{1}{2}}", "0.5")["reward"] == 0.0
    assert boxed_reward("\\boxed{1} then \\boxed{2}", "2")["reward"] == 1.0  # the last boxed answer counts
    assert boxed_reward("\\fbox{2}", "2")["reward"] == 0.0 and boxed_reward("", "2")["reward"] == 0.0


def test_the_python_tool_answers_in_agentscopes_format_and_stops_at_its_timeout():
    text = asyncio.run(execute_python_code("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")).content[0]["text"]
    assert text == "<returncode>3</returncode><stdout>out\n</stdout><stderr>err\n</stderr>"
    slow = asyncio.run(execute_python_code("while True: pass", timeout=1)).content[0]["text"]
    assert slow.startswith("<returncode>-1</returncode>") and "TimeoutError" in slow
