"""webshop (ROLL's WebShop environment) against a stand-in `webshop_minimal`, the simulator package
ROLL ships (not on PyPI, so not installed here): the entry as ROLL's examples write it, the
observations, the session a seed picks, the actions the loop takes out of a reply, and the end."""

from __future__ import annotations

import importlib.machinery
import random
import sys
import types

import pytest

from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.webshop import INSTRUCTION, WebShop
from posttrain.errors import ConfigError

START = {"has_search_bar": True, "clickables": ["search"]}
RESULTS = {"has_search_bar": False, "clickables": ["back to search", "next >", "b0042"]}
ITEM = {"has_search_bar": False, "clickables": ["back to search", "< prev", "red", "buy now"]}


class Shop:
    """The simulator's text environment, reduced to three pages."""

    built: list = []

    def __init__(self, observation_mode="html", file_path="", server=None, **kwargs):
        self.kwargs = dict(observation_mode=observation_mode, file_path=file_path, server=server, **kwargs)
        self.server = types.SimpleNamespace(weights=[1.0] * 50)  # 50 goals
        self.page, self.sent = START, []
        Shop.built.append(self)

    def reset(self, session=None, instruction_text=None):
        self.session, self.page = session, START
        return f" [SEP] WebShop [SEP] session {session}", None

    def get_instruction_text(self):
        return f"Instruction: [SEP] goal {self.session}"

    def get_available_actions(self):
        return self.page

    def step(self, action):
        self.sent.append(action)
        if action == "search[red mug]":
            self.page = RESULTS
            return "Back to Search [SEP] b0042 [SEP] Red Mug", 0.0, False, None
        if action == "click[b0042]":
            self.page = ITEM
            return "Red Mug [SEP] red [SEP] Buy Now", 0.0, False, None
        if action == "click[buy now]":
            return "Thank you for shopping with us!", 0.75, True, None
        return "unchanged page", 0.0, False, None  # an action the page does not offer changes nothing

    def close(self):
        self.closed = True


@pytest.fixture
def shop_package(monkeypatch):
    package = types.ModuleType("webshop_minimal")
    package.__spec__ = importlib.machinery.ModuleSpec("webshop_minimal", None)
    package.WebAgentTextEnv = Shop
    package.init_basedir = lambda dataset="small": setattr(utils, "DEFAULT_FILE_PATH", "/pkg/data/items_shuffle_1000.json")
    utils = types.ModuleType("webshop_minimal.utils")
    utils.DEFAULT_FILE_PATH = ""
    monkeypatch.setitem(sys.modules, "webshop_minimal", package)
    monkeypatch.setitem(sys.modules, "webshop_minimal.utils", utils)
    Shop.built = []
    return package


def rolls_entry(**extra):
    """The WebShopEnv entry of ROLL's examples (its traj_envs.yaml), max_actions_per_traj 3."""
    return {"env_type": "webshop", "max_steps": 3, "max_tokens_per_step": 128,
            "env_config": {"observation_mode": "text", "max_steps": 3, "format_penalty": -0.05, **extra}}


def test_rolls_entry_reads_with_rolls_action_pattern_penalty_and_instruction(shop_package):
    spec = parse_custom_envs({"WebShopEnv": rolls_entry()})["WebShopEnv"]
    assert (spec.max_steps, spec.format_penalty, spec.instruction) == (3, -0.05, INSTRUCTION)
    assert spec.action_pattern.pattern == "<answer>(.*?)</answer>"  # the class's, as ROLL's environment parses
    # the group as written; the environment strips it, as ROLL's does (the buy below)
    assert spec.parse_action("Thought: I think I should search. <answer> search[red mug] </answer>") == " search[red mug] "
    assert spec.parse_action("Action: click[buy now]") is None  # never reaches the shop: the loop adds the penalty
    env = spec.make(spec.env_config)
    assert Shop.built[-1].kwargs == dict(observation_mode="text", file_path="/pkg/data/items_shuffle_1000.json", server=None,
                                         filter_goals=None, limit_goals=-1, num_products=None, human_goals=False, show_attrs=False)
    # an entry's own pattern replaces the class's
    mine = parse_custom_envs({"W": rolls_entry(action_pattern="<act>(.*?)</act>")})["W"]
    assert mine.parse_action("<act>click[b0042]</act>") == "click[b0042]" and mine.parse_action("<answer>x</answer>") is None
    env.close()
    assert env.shop.closed


def test_a_seed_picks_the_session_and_the_pages_list_their_actions(shop_package):
    env = WebShop(observation_mode="text")
    first = env.reset(seed=7)
    session = random.Random(7).randint(0, 49)  # ROLL's draw under its seeded random
    assert Shop.built[-1].session == session
    assert first == (f"Instruction: [SEP] goal {session} [SEP] WebShop [SEP] session {session}\n"
                     "Available actions: search[<content>]")
    assert env.reset(seed=7) == first and env.reset(seed=8) != first
    assert env.step("search[red mug]") == ("Back to Search [SEP] b0042 [SEP] Red Mug\nAvailable actions: click[back to search], "
                                           "click[next >], click[b0042]", 0.0, False, {"action_is_valid": True, "success": False})
    assert env.step("click[nothing here]")[1:] == (0.0, False, {"action_is_valid": True, "success": False})
    env.step("click[b0042]")
    page, reward, done, info = env.step(" click[buy now] ")
    assert (reward, done, info) == (0.75, True, {"action_is_valid": True, "success": True})  # a purchase ends it
    assert Shop.built[-1].sent == ["search[red mug]", "click[nothing here]", "click[b0042]", "click[buy now]"]


def test_a_machine_without_the_package_is_named_when_the_entry_is_read(monkeypatch):
    monkeypatch.setitem(sys.modules, "webshop_minimal", None)  # find_spec -> None: not installed
    with pytest.raises(ConfigError, match=r"env.custom_envs.WebShopEnv.env_type webshop: webshop plays WebShop's simulated shop "
                                          r"through the webshop_minimal package, which is not installed on this machine"):
        parse_custom_envs({"WebShopEnv": rolls_entry()})


def test_rolls_sandbox_environments_are_refused_with_the_reason():
    with pytest.raises(ConfigError, match=r"env.custom_envs.S.env_type: environment 'sokoban_sandbox': not supported: ROLL's "
                                          r"Sokoban played inside a ROCK sandbox container .* use env_type sokoban"):
        parse_custom_envs({"S": {"env_type": "sokoban_sandbox", "env_config": {"base_url": "http://localhost:8080"}}})
