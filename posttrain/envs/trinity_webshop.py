"""`trinity_webshop`: Trinity-RFT's WebShop workflow as a text environment.

Trinity-RFT's ``webshop_workflow`` (trinity/common/workflows/envs/webshop) plays one WebShop session
per taskset row: the row's ``task_desc`` (the taskset's ``format.prompt_key`` column, ``task_id`` in
Trinity's example) is the session's number, which picks the goal (an instruction and the product that
meets it). This environment plays the same episodes turn for turn, through WebShop's own simulator
(the ``web_agent_site`` package of the WebShop benchmark; it is not on PyPI: install it from its
source with its product data):

- **Shop**: WebShop's text environment in its ``text_rich`` mode (buttons written
  ``[button] name [button_]``, one per line) over all products with the human-written goals, as
  Trinity makes it; the reset opens session ``int(task_desc)``.
- **Observations**: ``Observation: `` followed by the page (Trinity's ``format_observation``); after an
  action the shop refuses, ``Observation: `` followed by Trinity's message saying why (no search bar,
  a button not on the page, no ``<action>`` tag), and the page stays.
- **Actions**: the text between the reply's first ``<action>`` and the next ``</action>`` (to the end
  when unclosed), stripped; ``search[query]`` when the page has a search bar, ``click[name]`` for a
  button of the page (matched in lower case). Anything else is refused as above and is
  ``action_is_valid`` False, which costs nothing unless the entry sets a format_penalty (Trinity has none).
- **Reward**: the shop's reward when the episode ends with a purchase (``click[buy now]``: how well
  the product, its options and its price match the goal, 0 to 1); -0.1 when 15 actions pass without
  one (Trinity's fixed ``max_env_steps``), which ends the episode. ``success`` is a purchase scored
  at least 0.99, the threshold of Trinity's sparse-reward switch.

The system prompt (the entry's instruction) is Trinity's, word for word: the policy it trains reads
exactly this text.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from posttrain.envs.registry import register_env

MAX_ENV_STEPS = 15  # Trinity's workflow ends an episode after this many actions
UNFINISHED = -0.1  # its reward for an episode that ends without a purchase

# Trinity-RFT's WebShop_SYSTEM_PROMPT (webshop_workflow.py), word for word, its leading and trailing
# newlines included.
SYSTEM_PROMPT = """
You are an agent interacting with a virtual text-based web shopping environment to test out your ability. Your job is to follow the Instruction provided and mimic the steps to buy the item that are closest to the Instruction provided.

## Action Format:
You should give both the action_name and action_arg like the format `action_name[action_arg]`. You can execute two types of actions, search and click.
- When the button `[button] Search [button_]` is available in the current observation, you can execute the action <action>search[xxx]</action> (you should type the query you want to search in the square brackets here).
- You can click buttons `[button] xxx [button_]` that is available in the current observation, by execute the action <action>click[xxx]</action>.

Below are some examples of action formats.
- <action>search[white shoes]</action>
- <action>click[Buy Now]</action>

## Notes:
At each step, you should first think then perform action to fulfill the instruction. You should ALWAYS wrap your thinking with the <think> </think> tag and wrap your action with the <action> </action> tag.
You should ALWAYS take one action each step.
You should finish the task and buy the item within 15 steps.
DO NOT try to interact with the user at anytime. Finish the task and buy the item by yourself.
"""

_ACTION = re.compile(r"(.+)\[(.+)\]")


def parse_action(reply: str) -> str:
    """The text between the first ``<action>`` and the next ``</action>``, stripped; "" without ``<action>``."""
    if "<action>" not in reply:
        return ""
    return reply.split("<action>")[1].split("</action>")[0].strip()


def refusal(action: str, page: dict[str, Any]) -> str | None:
    """Why the shop's current page cannot take `action` (Trinity's messages), or None when it can."""
    m = _ACTION.match(action)
    name, arg = (m.group(1), m.group(2).lower()) if m else (action, None)
    if name == "search" and arg and page["has_search_bar"]:
        return None
    if name == "click" and arg in page["clickables"]:
        return None
    if name == "search":
        if not arg:
            return "Invalid action, please type in the query you want to search in the square brackets here."
        return "Can not perform search action without search bar. Please click the Back to Search button first."
    if name == "click":
        return ("Incorrect action format, make sure you have the correct button name that is **within the current page**. "
                f"The buttons you can click now are: {page['clickables']}")
    return "Invalid action. You should wrap your action with the <action> </action> tag and follow the action format."


def _check_runtime() -> None:
    missing = [name for name in ("web_agent_site", "gym") if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(f"trinity_webshop plays WebShop's simulated shop through WebShop's web_agent_site package, which is not "
                         f"installed on this machine ({' and '.join(missing)} missing): install WebShop from its source with its "
                         "product data (it is not on PyPI)")


@register_env("trinity_webshop")
class TrinityWebShop:
    """Trinity-RFT's WebShop workflow, one shop session per episode (see the module docstring)."""

    instruction = SYSTEM_PROMPT
    check_runtime = staticmethod(_check_runtime)  # the package it needs, checked at plan time
    # an episode_files row names its episode by this column instead of a seed (posttrain.envs.spec)
    episode_argument = "task_desc"

    def __init__(self, task_desc: str | int | None = None):
        try:
            self.session = int(task_desc if task_desc not in (None, "") else 0)  # Trinity: task_desc or "0"
        except (TypeError, ValueError):
            raise ValueError(f"trinity_webshop's task_desc is a WebShop session number (a row's task_id), got {task_desc!r}") from None
        _check_runtime()
        from web_agent_site.envs.web_agent_text_env import WebAgentTextEnv

        self.shop = WebAgentTextEnv(observation_mode="text_rich", num_products=None, human_goals=True)
        self.actions = 0

    def reset(self, seed: int) -> str:
        self.shop.reset(session=self.session)
        self.actions = 0
        return "Observation: " + self.shop.observation

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        self.actions += 1
        action = parse_action(action_text)
        why = refusal(action, self.shop.get_available_actions())
        if why is None:
            page, reward, done, _ = self.shop.step(action)
        else:
            page, reward, done = why, 0.0, False
        if not done and self.actions >= MAX_ENV_STEPS:
            return "Observation: " + page, UNFINISHED, True, {"action_is_valid": why is None, "success": False}
        return "Observation: " + page, float(reward), bool(done), {"action_is_valid": why is None,
                                                                    "success": bool(done) and float(reward) >= 0.99}

    def close(self) -> None:
        self.shop.close()
