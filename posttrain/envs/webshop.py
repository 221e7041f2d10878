"""`webshop`: ROLL's WebShop environment: buy the product an instruction describes in a simulated shop.

ROLL's agentic examples (``env_type: webshop``) play WebShop through ``webshop_minimal``, a trimmed
copy of the WebShop benchmark's simulator (its text environment, product catalogue and search index)
that ROLL ships as ``third_party/webshop-minimal``. It is not on PyPI: install it from that source,
with its product data. This environment drives the same simulator turn for turn, as ROLL's does:

- **Episode**: the reset seed picks the shop session (the goal: an instruction and the product that
  meets it) as ``Random(seed).randint(0, goals - 1)``, the draw ROLL makes under its seeded
  ``random``; the same seed, the same goal.
- **Observations**: the first is the instruction text followed by the start page; every later one the
  simulator's page after the action (its text mode: visible strings joined by `` [SEP] ``). Each ends
  with a line ``Available actions: `` listing ``search[<content>]`` when the page has a search bar
  and ``click[<name>]`` for each of its buttons, links and options (ROLL's rendering).
- **Actions**: the text inside the reply's ``<answer>...</answer>`` (the class's `action_pattern`,
  ROLL's default, read by the agent loop; an entry's own action_pattern replaces it), stripped, sent
  as it is: ``search[keywords]`` or ``click[name]``. A reply without the pattern never reaches the
  shop: the page stays, the step's reward is 0 and the entry's format_penalty is added (ROLL's
  examples set -0.05 in env_config, which the loop reads), as ROLL's environment returns that
  penalty. A well-formed action the page does not offer changes nothing and is valid, as in the
  simulator.
- **Reward and end**: the simulator's reward, given when the product is bought (``click[buy now]``),
  which ends the episode: how well the product, its options and its price match the goal, between 0
  and 1. ``success`` is the episode ending in a purchase, ROLL's metric of that name; the reward says
  how good the purchase was.

The instruction the policy reads first (the entry's env_instruction, else `instruction`) is ROLL's,
word for word: a policy trained on ROLL's examples reads exactly this text.
"""

from __future__ import annotations

import importlib.util
import random
from typing import Any

from posttrain.envs.registry import register_env

# ROLL's WebShopEnv instruction, word for word (see the module docstring)
INSTRUCTION = ("You are web shopping. I will give you instructions about what to do. "
               "You have to follow the instructions. Every round I will give you an observation and "
               "a list of available actions, you have to respond an action based on the state and instruction. "
               "You can use search action if search is available. You can click one of the buttons in clickables. "
               "An action should be of the following structure: search[keywords] click[value] If the action is not valid, perform nothing. "
               "Keywords in search are up to you, but the value in click must be a value in the list of available actions. "
               "Remember that your keywords in search should be carefully designed. "
               "Your response should use the following format Thought: I think ... Action: click[something]")


def _check_runtime() -> None:
    if importlib.util.find_spec("webshop_minimal") is None:
        raise ValueError("webshop plays WebShop's simulated shop through the webshop_minimal package, which is not installed "
                         "on this machine: install it from its source with its product data (ROLL ships it as "
                         "third_party/webshop-minimal; it is not on PyPI)")


@register_env("webshop")
class WebShop:
    """A WebShop session as a text environment (see the module docstring)."""

    instruction = INSTRUCTION
    action_pattern = r"<answer>(.*?)</answer>"  # ROLL's default: the agent loop takes the action out of the reply
    check_runtime = staticmethod(_check_runtime)  # the package it needs, checked at plan time

    def __init__(self, observation_mode: str = "text", file_path: str | None = None, server: Any = None,
                 filter_goals: Any = None, limit_goals: int = -1, num_products: int | None = None, human_goals: bool = False,
                 show_attrs: bool = False, **kwargs: Any):
        _check_runtime()
        import webshop_minimal

        webshop_minimal.init_basedir()  # the package's product files (its small catalogue), as ROLL does at import
        from webshop_minimal.utils import DEFAULT_FILE_PATH

        self.shop = webshop_minimal.WebAgentTextEnv(
            observation_mode=observation_mode, file_path=DEFAULT_FILE_PATH if file_path is None else file_path, server=server,
            filter_goals=filter_goals, limit_goals=limit_goals, num_products=num_products, human_goals=human_goals,
            show_attrs=show_attrs, **kwargs)

    def actions(self) -> list[str]:
        """The actions the current page offers, as the observation lists them."""
        page = self.shop.get_available_actions()
        listed = ["search[<content>]"] if page["has_search_bar"] else []
        return listed + [f"click[{name}]" for name in page["clickables"] if name != "search"]

    def _shown(self, page: str) -> str:
        return f"{page}\nAvailable actions: {', '.join(self.actions())}"

    def reset(self, seed: int) -> str:
        session = random.Random(seed).randint(0, len(self.shop.server.weights) - 1)
        page, _ = self.shop.reset(session=session)
        return self._shown(self.shop.get_instruction_text() + page)

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        page, reward, done, _ = self.shop.step(action_text.strip())
        return self._shown(page), float(reward), bool(done), {"action_is_valid": True, "success": bool(done)}

    def close(self) -> None:
        self.shop.close()
