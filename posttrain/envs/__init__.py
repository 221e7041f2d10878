"""Environments of agentic (multi-turn) RL: the `Env` protocol, the registry and built-in envs.

An environment speaks text: `reset(seed)` returns the first observation, `step(action_text)` the
next observation, the reward of that action, whether the episode is over and an info dict. The
agent loop (`posttrain.rollout.agent_loop`) turns the exchange into token sequences; environments
never see tokens. Built in: `walk`, `frozen_lake` (gymnasium's, imported when a lake is built),
`trinity_frozen_lake` (Trinity-RFT's FrozenLake workflow), `trinity_sciworld` (Trinity-RFT's
ScienceWorld workflow, with the scienceworld package and Java), `trinity_alfworld` (Trinity-RFT's
ALFWorld workflows, with the alfworld package), `trinity_raft_alfworld` (its RAFT ALFWorld workflow), `sokoban`, `sokoban_native_env` (Sokoban
writing its own conversation: prompt_mode messages), `task` (any task of `posttrain.tasks` as a one-action env),
`roll_math` / `roll_qa` (a dataset's questions, one per episode; text tools in front of any env by
`tool_wrapper`: posttrain.envs.text_tools), `game:GuessTheNumber-v0` (GEM's game) and `rg:NAME` (a
reasoning-gym dataset, with that package), `openreward_env` (an OpenReward environment's tasks over its
client, with the openreward package), `webshop` (ROLL's WebShop shop, with its webshop_minimal package), `trinity_webshop` (Trinity-RFT's
WebShop workflow, with WebShop's web_agent_site package).
"""

from posttrain.envs.base import Env, EnvError, StepResult
from posttrain.envs.registry import ENVS, env_class, register_env
from posttrain.envs import (dataset_envs, frozen_lake, guess_the_number, openreward_env, reasoning_gym_env, sokoban,  # noqa: F401
                            sokoban_native, task_env, trinity_alfworld, trinity_frozen_lake, trinity_raft_alfworld,  # registers the
                            trinity_sciworld, trinity_webshop, walk, webshop)  # built-in environments

__all__ = ["ENVS", "Env", "EnvError", "StepResult", "env_class", "register_env"]
