"""trinity_webshop (Trinity-RFT's webshop_workflow) against a stand-in `web_agent_site`, WebShop's
simulator package (not on PyPI, so not installed here): the shop Trinity makes, its user turns, the
actions it refuses with its messages, the purchase's reward and the -0.1 after 15 actions; and the
translation of Trinity's example file, whose rows name sessions by task_id."""

from __future__ import annotations

import importlib.machinery
import sys
import textwrap
import types

import pytest

from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.trinity_webshop import SYSTEM_PROMPT, TrinityWebShop, parse_action
from posttrain.errors import ConfigError

START = {"has_search_bar": True, "clickables": ["search"]}
RESULTS = {"has_search_bar": False, "clickables": ["back to search", "next >", "b0042"]}
ITEM = {"has_search_bar": False, "clickables": ["back to search", "< prev", "red", "buy now"]}


class TextEnv:
    """WebShop's text environment, reduced to three pages."""

    built: list = []

    def __init__(self, observation_mode="html", file_path=None, server=None, **kwargs):
        self.kwargs = dict(observation_mode=observation_mode, **kwargs)
        self.page, self.sent, self.view = START, [], "start"
        TextEnv.built.append(self)

    def reset(self, session=None, instruction_text=None):
        self.session, self.page, self.view = session, START, f"WebShop\nInstruction:\ngoal {session}\n[button] Search [button_]"
        return self.view, None

    @property
    def observation(self):
        return self.view

    def get_available_actions(self):
        return self.page

    def step(self, action):
        self.sent.append(action)
        action = action.lower()
        if action.startswith("search["):
            self.page, self.view = RESULTS, "[button] Back to Search [button_]\n[button] B0042 [button_]"
        elif action == "click[b0042]":
            self.page, self.view = ITEM, "[button] red [button_]\n[button] Buy Now [button_]"
        elif action == "click[buy now]":
            return "Thank you for shopping with us!", 0.5, True, None
        return self.view, 0.0, False, None

    def close(self):
        self.closed = True


@pytest.fixture
def webshop(monkeypatch):
    for name in ("web_agent_site", "web_agent_site.envs", "web_agent_site.envs.web_agent_text_env", "gym"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, module)
    sys.modules["web_agent_site.envs.web_agent_text_env"].WebAgentTextEnv = TextEnv
    TextEnv.built = []


def test_the_shop_trinity_makes_and_its_user_turns(webshop):
    env = TrinityWebShop(task_desc="12")
    assert TextEnv.built[-1].kwargs == dict(observation_mode="text_rich", num_products=None, human_goals=True)
    assert env.reset(seed=99) == "Observation: WebShop\nInstruction:\ngoal 12\n[button] Search [button_]"  # session 12, seed unread
    assert TextEnv.built[-1].session == 12
    valid = {"action_is_valid": True, "success": False}
    assert env.step("<think>look</think><action>search[red mug]</action>") == (
        "Observation: [button] Back to Search [button_]\n[button] B0042 [button_]", 0.0, False, valid)
    assert env.step("<action>click[B0042]</action>")[1:] == (0.0, False, valid)  # buttons matched in lower case
    assert env.step("<action>click[Buy Now]") == ("Observation: Thank you for shopping with us!", 0.5, True,
                                                  {"action_is_valid": True, "success": False})  # 0.5: not a full match
    assert TextEnv.built[-1].sent == ["search[red mug]", "click[B0042]", "click[Buy Now]"]
    assert SYSTEM_PROMPT.startswith("\nYou are an agent interacting with a virtual text-based web shopping environment")
    assert SYSTEM_PROMPT.endswith("DO NOT try to interact with the user at anytime. Finish the task and buy the item by yourself.\n")


def test_refused_actions_answer_with_trinitys_messages_and_the_page_stays(webshop):
    env = TrinityWebShop(task_desc=3)
    env.reset(seed=0)
    invalid = {"action_is_valid": False, "success": False}
    assert env.step("I will search") == ("Observation: Invalid action. You should wrap your action with the <action> </action> tag "
                                         "and follow the action format.", 0.0, False, invalid)
    # Trinity's pattern needs a character inside the brackets: "search[]" is no search; a bare "search" is one without a query
    assert env.step("<action>search[]</action>")[0].startswith("Observation: Invalid action. You should wrap your action")
    assert env.step("<action>search</action>")[0] == ("Observation: Invalid action, please type in the query you want to search "
                                                      "in the square brackets here.")
    assert env.step("<action>click[b0042]</action>")[0] == (
        "Observation: Incorrect action format, make sure you have the correct button name that is **within the current page**. "
        "The buttons you can click now are: ['search']")
    env.step("<action>search[mug]</action>")
    assert env.step("<action>search[cup]</action>")[0] == ("Observation: Can not perform search action without search bar. "
                                                           "Please click the Back to Search button first.")
    assert TextEnv.built[-1].sent == ["search[mug]"]  # refused actions never reach the shop


def test_fifteen_actions_without_a_purchase_end_with_minus_0_1(webshop):
    env = TrinityWebShop(task_desc=0)
    env.reset(seed=0)
    results = [env.step("<action>click[nowhere]</action>") for _ in range(15)]
    assert [r[1:3] for r in results] == [(0.0, False)] * 14 + [(-0.1, True)]
    env.reset(seed=0)
    assert env.step("<action>search[x]</action>")[2] is False  # a new episode counts afresh


def test_a_full_match_is_a_success(webshop, monkeypatch):
    monkeypatch.setattr(TextEnv, "step", lambda self, action: ("Thank you", 1.0, True, None))
    env = TrinityWebShop(task_desc=0)
    env.reset(seed=0)
    assert env.step("<action>search[x]</action>") == ("Observation: Thank you", 1.0, True, {"action_is_valid": True, "success": True})


def test_actions_are_read_as_trinity_reads_them():
    assert parse_action("<think>a</think><action> click[x] </action> more") == "click[x]"
    assert parse_action("<action>click[x]") == "click[x]" and parse_action("no tag") == ""
    assert parse_action("<action>a<action>b</action>") == "a"  # up to the next <action>, as Trinity splits


def test_a_machine_without_webshop_is_named_when_the_entry_is_read(monkeypatch):
    monkeypatch.setitem(sys.modules, "web_agent_site", None)
    with pytest.raises(ConfigError, match=r"env.custom_envs.w.env_type trinity_webshop: trinity_webshop plays WebShop's simulated "
                                          r"shop through WebShop's web_agent_site package, which is not installed on this machine"):
        parse_custom_envs({"w": {"env_type": "trinity_webshop", "max_steps": 15, "env_config": {"task_desc": "1"}}})
    with pytest.raises(ValueError, match="task_desc is a WebShop session number"):
        TrinityWebShop(task_desc="shoes")


def test_trinitys_example_becomes_an_agentic_stage_over_its_sessions(webshop, tmp_path, monkeypatch):
    from posttrain.config import load_config

    data = tmp_path / "webshop_data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"task_id": 3}\n{"task_id": 7}\n')
    config = tmp_path / "webshop.yaml"
    config.write_text(textwrap.dedent(f"""\
        algorithm: {{algorithm_type: grpo, repeat_times: 4}}
        model: {{model_path: /models/qwen, max_response_tokens: 1024, max_model_len: 2048}}
        buffer:
          total_epochs: 1
          batch_size: 2
          explorer_input:
            taskset:
              name: webshop
              storage_type: file
              path: {data}
              format: {{prompt_key: task_id}}
              default_workflow_type: webshop_workflow
    """))
    cfg = load_config(str(config), [], dialect="trinity")
    entry = cfg.env.custom_envs["webshop"]
    assert entry["env_type"] == "trinity_webshop" and entry["max_steps"] == 15
    assert entry["episode_files"] == [str(data / "train.jsonl")] and entry["episode_columns"] == {"task_desc": "task_id"}
    spec = parse_custom_envs(cfg.env.custom_envs)["webshop"]
    assert [spec.episode(i)[1] for i in range(2)] == [{"task_desc": 3}, {"task_desc": 7}]
    assert spec.instruction == SYSTEM_PROMPT and spec.action_pattern is None  # the env reads its own <action> tags
    assert (cfg.env.train_env_manager.num_env_groups, cfg.env.train_env_manager.group_size) == (2, 4)
