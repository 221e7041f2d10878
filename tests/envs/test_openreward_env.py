"""openreward_env against a real OpenReward environment server, served here by the openreward package
itself: sessions, tools in the prompt, tool calls in both forms, rewards and their reduction."""

from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("openreward", reason="the openreward extra is not installed")

import uvicorn  # noqa: E402
from openreward.environments import Environment, Server, tool  # noqa: E402
from openreward.environments.types import TextBlock, ToolOutput  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from posttrain.envs.openreward_env import OpenRewardEnv, parse_tool_call  # noqa: E402
from posttrain.envs.spec import parse_custom_envs  # noqa: E402
from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes  # noqa: E402
from posttrain.rollout.base import SamplingParams  # noqa: E402
from posttrain.rollout.turns import TurnRenderer  # noqa: E402
from tests.rollout.test_agent_loop import TOK, ScriptedEngine  # noqa: E402

# a template that writes the tools, as the chat templates of tool-calling models do
TEMPLATE = ("{% if tools %}tools: {{ tools | map(attribute='function') | map(attribute='name') | join(',') }}\n{% endif %}"
            "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}")


class Guess(BaseModel):
    number: int


class Secret(Environment):
    """Guess the task's secret: a hint (reward 0.1 when close) per wrong guess, 1.0 and finished when right."""

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"secret": 3}, {"secret": 7}]

    def get_prompt(self):
        return [TextBlock(text="Find the secret number from 1 to 9.")]

    @tool
    def guess(self, params: Guess) -> ToolOutput:
        """Guess the number."""
        secret = self.task_spec["secret"]
        if params.number == secret:
            return ToolOutput(blocks=[TextBlock(text="right")], reward=1.0, finished=True)
        if params.number > 9:
            raise ValueError("out of range")
        return ToolOutput(blocks=[TextBlock(text="higher" if params.number < secret else "lower")],
                          reward=0.1 if abs(params.number - secret) == 1 else None)


@pytest.fixture(scope="module")
def server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    served = uvicorn.Server(uvicorn.Config(Server([Secret]).app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    while not served.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    served.should_exit = True
    thread.join(10)


@pytest.fixture
def local(server, monkeypatch):
    monkeypatch.setenv("OPENREWARD_SESSION_URL", server)
    monkeypatch.setenv("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)


def play(script, seed=1, **config):
    spec = parse_custom_envs({"S": {"env_type": "openreward_env", "prompt_mode": "messages", "max_steps": 4,
                                    "env_config": {"environment_name": "secret", **config}}})["S"]
    engine = ScriptedEngine(script)
    [traj] = run_episodes([EnvSlot(spec.make(spec.env_config), spec, seed, "g", 0.0)], engine, SamplingParams(),
                          TurnRenderer(TOK, TEMPLATE), LoopLimits(4096, 128), "s")
    return traj, [TOK.decode(p.input_ids[0][p.attention_mask[0] > 0]) for p, _ in engine.calls]


XML = "<tool_call>\n<function=guess>\n<parameter=number>\n{}\n</parameter>\n</function>\n</tool_call>"
JSON = '<tool_call>{{"name": "guess", "arguments": {{"number": {}}}}}</tool_call>'


def test_an_episode_calls_the_sessions_tools_and_is_rewarded_when_it_finishes(local):
    # seed 1: task 1 % 2 tasks, secret 7
    traj, shown = play(["I think.", JSON.format(6), XML.format(7)])
    assert shown[0] == "tools: guess\n[user] Find the secret number from 1 to 9.\n[assistant] "
    assert "[user] Your reply has no tool call." in shown[1] and "[user] <tool_response>\nhigher\n</tool_response>" in shown[2]
    assert [t.valid for t in traj.turns] == [False, True, True] and traj.done and traj.success
    # the session's rewards (0.1 for the close guess, 1.0) summed onto the finishing action
    assert [t.reward for t in traj.turns] == pytest.approx([0.0, 0.0, 1.1])


def test_the_last_action_ends_the_episode_with_the_reduced_reward_and_the_nonterminal_one(local):
    traj, shown = play([JSON.format(6), JSON.format(12), "<tool_call>{oops}</tool_call>", JSON.format(2)],
                       reward_reduction="mean", nonterminal_reward=-1.0)
    assert "Error running tool 'guess'" in shown[2] and "out of range" in shown[2]  # the tool's error is its answer
    assert "[user] Your tool call does not parse: not JSON" in shown[3]
    assert traj.done and not traj.truncated and len(traj.turns) == 4 and traj.success
    assert [t.reward for t in traj.turns] == pytest.approx([0.0, 0.0, 0.0, (0.1 - 1.0) / 2])  # mean of 0.1 and -1
    other, _ = play([JSON.format(2)] * 4, seed=0)  # task 0, secret 3: a close guess every time
    assert other.turns[-1].reward == pytest.approx(0.4) and other.success


def test_tool_calls_parse_in_both_forms():
    assert parse_tool_call("a " + XML.format(" 5 ") + " b") == ("guess", {"number": "5"})
    assert parse_tool_call(JSON.format(5)) == ("guess", {"number": 5})
    assert parse_tool_call("no call") is None
    assert parse_tool_call("<tool_call> </tool_call>") == "the <tool_call> block is empty"
    assert parse_tool_call('<tool_call>{"arguments": {}}</tool_call>') == "expected an object with a name and arguments"
    assert parse_tool_call('<tool_call>{"name": "x", "arguments": [1]}</tool_call>') == "the arguments are a list, not an object"


def test_plan_asks_for_the_key_of_a_hosted_environment(monkeypatch):
    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)
    with pytest.raises(ValueError, match="environment variable OPENREWARD_API_KEY is not set: the hosted environment kanishk/EndlessTerminals"):
        OpenRewardEnv.check_data({"environment_name": "kanishk/EndlessTerminals"})
    OpenRewardEnv.check_data({"environment_name": "secret"})  # one's own server: no key
    monkeypatch.setenv("OPENREWARD_API_KEY", "k")
    OpenRewardEnv.check_data({"environment_name": "kanishk/EndlessTerminals"})
