"""`trinity_alfworld`: Trinity-RFT's ALFWorld workflow as a text environment.

Trinity-RFT's ``alfworld_workflow`` (trinity/common/workflows/envs/alfworld/alfworld_workflow.py) plays
one ALFWorld game per taskset row: the row's ``task_desc`` (the taskset's ``format.prompt_key`` column)
is the path of a ``game.tw-pddl`` file. This environment plays the same episodes turn for turn on
posttrain's agent loop, through the ``alfworld`` and ``textworld`` packages:

- **Game**: the file is registered with ``textworld.gym`` with ALFWorld's ``AlfredDemangler`` (object
  ids become "apple 1") and ``AlfredExpert`` (handcoded) wrappers, asking for the description, the
  inventory and the admissible commands, as Trinity does; textworld's PDDL engine (fast-downward)
  plays it. The expert reads the game's ``traj_data.json`` from the same folder, as in ALFWorld's data.
  The reset seed is not read: the file is the episode.
- **Observations**: ``Observation: `` + the game's text (Trinity's ``format_observation``), with a hint
  glued after "Nothing happens." (the game's answer to a command it does not know).
- **Actions**: the text between the reply's first ``<action>`` and the next ``</action>`` (to the end
  when unclosed), stripped; a reply without ``<action>`` sends ``""`` to the game ("Nothing happens."),
  as Trinity does. Such a reply is ``action_is_valid`` False, which costs nothing unless the entry
  sets a format_penalty (Trinity has none).
- **Reward**: Trinity's episode reward is the game's reward on the step that ends it (1 for a won
  game; 0 when textworld's own limit of 50 moves ends it), or -0.1 when ``max_env_steps`` actions
  (default 30) pass without an end. posttrain's loop sums an episode's step rewards, so every step
  returns 0 but the last: the game's reward when it is done, else -0.1 on the ``max_env_steps``-th
  action, which also ends the episode. The entry's ``max_steps`` must not cut earlier (the translation
  sets it to ``max_env_steps``). ``success`` is a won game.

fast-downward's translator sets ``sys.argv`` to its own while it reads a game (each reset): the reset
puts the caller's back, and one lock keeps two resets (an abandoned, timed-out one) from interleaving.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import threading
from typing import Any

from posttrain.envs.registry import register_env
# Trinity's alfworld and sciworld workflows parse the <action> tag with the same split
from posttrain.envs.trinity_sciworld import parse_action

# Trinity-RFT's AlfWORLD_SYSTEM_PROMPT (alfworld_workflow.py), word for word, its leading and trailing
# newlines included: the policy it trains reads exactly this.
SYSTEM_PROMPT = """
You are an agent interacting with a virtual text-based environment.

## Notes:
At each step, you should first think then perform action to fulfill the instruction. You should ALWAYS wrap your thinking with the <think> </think> tag and wrap your action with the <action> </action> tag.
You should ALWAYS take one action each step.
DO NOT try to interact with the user at anytime. Finish the task by yourself.

## Action Format:
Below are the available commands you can use:
  look:                             look around your current location
  inventory:                        check your current inventory(you can only have 1 item in your inventory)
  go to (receptacle):               move to a receptacle
  open (receptacle):                open a receptacle
  close (receptacle):               close a receptacle
  take (object) from (receptacle):  take an object from a receptacle
  move (object) to (receptacle):  place an object in or on a receptacle
  examine (something):              examine a receptacle or an object
  use (object):                     use an object
  heat (object) with (receptacle):  heat an object using a receptacle
  clean (object) with (receptacle): clean an object using a receptacle
  cool (object) with (receptacle):  cool an object using a receptacle
  slice (object) with (object):     slice an object using a sharp object

For example your output should be like this:
<think> To solve the task, I need first to ... </think><action>go to cabinet 1</action>
"""
# Trinity's format_observation hint after "Nothing happens." (glued on, no space), word for word
NOTHING_HAPPENS_HINT = "Please check if the action you take is valid or you have carefully followed the action format."
MAX_ENV_STEPS = 30  # Trinity's default workflow_args.max_env_steps
TIMEOUT_REWARD = -0.1  # Trinity's final reward of an episode that max_env_steps ended
_RESET_LOCK = threading.Lock()

# A small game in ALFWorld's PDDL problem format (object ids as ALFWorld's generator mangles them:
# "_bar_" for "|", "_minus_" for "-", "_dot_" for "."): a countertop, a dining table with an apple on it
# and a closed cabinet, each at its own spot. Its task, "put some apple on countertop", is ALFWorld's
# pick_and_place_simple goal. `write_game` turns it into a game.tw-pddl with the alfworld package's domain
# and grammar: `posttrain smoke`'s stand-in rows and the tests play it.
APPLE = "Apple_bar__minus_01_dot_23_bar__plus_00_dot_90_bar__plus_01_dot_45"
COUNTERTOP = "CounterTop_bar__minus_01_dot_50_bar__plus_00_dot_90_bar__plus_01_dot_00"
TABLE = "DiningTable_bar__minus_02_dot_00_bar__plus_00_dot_70_bar__plus_03_dot_00"
CABINET = "Cabinet_bar__minus_00_dot_50_bar__plus_00_dot_40_bar__plus_02_dot_00"
SPOTS = ("loc_bar_0_bar_0_bar_0_bar_0", "loc_bar__minus_4_bar_7_bar_1_bar_45", "loc_bar__minus_8_bar_10_bar_2_bar_60",
         "loc_bar__minus_2_bar_5_bar_0_bar_30")  # the agent's start, then the countertop's, the table's, the cabinet's
_LOCATIONS = "\n".join(f"{spot} - location" for spot in SPOTS)
GAME_PROBLEM = f"""(define (problem plan_posttrain_demo)
(:domain alfred)
(:objects
agent1 - agent
{APPLE} - object
{COUNTERTOP} - receptacle
{TABLE} - receptacle
{CABINET} - receptacle
{_LOCATIONS}
AppleType - otype
CounterTopType - rtype
DiningTableType - rtype
CabinetType - rtype
)
(:init
(atLocation agent1 {SPOTS[0]})
(receptacleType {COUNTERTOP} CounterTopType)
(receptacleType {TABLE} DiningTableType)
(receptacleType {CABINET} CabinetType)
(openable {CABINET})
(objectType {APPLE} AppleType)
(pickupable {APPLE})
(canContain CounterTopType AppleType)
(canContain DiningTableType AppleType)
(canContain CabinetType AppleType)
(inReceptacle {APPLE} {TABLE})
(objectAtLocation {APPLE} {SPOTS[2]})
(receptacleAtLocation {COUNTERTOP} {SPOTS[1]})
(receptacleAtLocation {TABLE} {SPOTS[2]})
(receptacleAtLocation {CABINET} {SPOTS[3]})
)
(:goal (and (exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r) (objectType ?o AppleType) (receptacleType ?r CounterTopType))))))
)
"""
GAME_TASK = "put some apple on countertop"
GAME_WALKTHROUGH = ("go to diningtable 1", "take apple 1 from diningtable 1", "go to countertop 1", "move apple 1 to countertop 1")


def format_observation(observation: str) -> str:
    """Trinity's user turn for a game text.

    >>> format_observation("Nothing happens.")
    'Observation: Nothing happens.Please check if the action you take is valid or you have carefully followed the action format.'
    """
    if "Nothing happens." in observation:
        observation += NOTHING_HAPPENS_HINT
    return "Observation: " + observation


def write_game(folder: str) -> str:
    """Write the small game (see GAME_PROBLEM) as ALFWorld's generator lays a game out, game.tw-pddl and
    traj_data.json in `folder`; the game file's path."""
    import alfworld

    data = os.path.join(os.path.dirname(alfworld.__file__), "data")
    with open(os.path.join(data, "alfred.pddl"), encoding="utf-8") as f:
        domain = f.read()
    with open(os.path.join(data, "alfred.twl2"), encoding="utf-8") as f:
        grammar = f.read().replace("UNKNOWN GOAL", GAME_TASK)  # as alfworld's add_task_to_grammar does
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "game.tw-pddl")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"pddl_domain": domain, "grammar": grammar, "pddl_problem": GAME_PROBLEM, "solvable": True,
                   "walkthrough": list(GAME_WALKTHROUGH)}, f)
    traj = {"task_type": "pick_and_place_simple", "pddl_params": {
        "object_target": "Apple", "parent_target": "CounterTop", "toggle_target": "", "mrecep_target": "", "object_sliced": False}}
    with open(os.path.join(folder, "traj_data.json"), "w", encoding="utf-8") as f:
        json.dump(traj, f)
    return path


def _check_runtime() -> None:
    missing = [name for name in ("alfworld", "textworld", "fast_downward") if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(f"trinity_alfworld plays ALFWorld games with alfworld and textworld's PDDL engine, and "
                         f"{', '.join(missing)} is not installed: pip install 'posttrain[envs]' (or alfworld; its fast-downward "
                         "builds from source with a C++ compiler and make)")


def _check_game(path: str) -> None:
    """A one-line ValueError naming `path` when it is not a readable ALFWorld game with its traj_data.json."""
    where = f"task_desc (the row's game file) {path!r}"
    if not os.path.isfile(path):
        raise ValueError(f"{where}: no such file; ALFWorld's games are folders holding game.tw-pddl and traj_data.json")
    try:
        with open(path, encoding="utf-8") as f:
            game = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where}: cannot be read as a tw-pddl game (JSON): {e}") from None
    lacks = [k for k in ("pddl_domain", "grammar", "pddl_problem") if not isinstance(game, dict) or not isinstance(game.get(k), str)]
    if lacks:
        raise ValueError(f"{where}: not a tw-pddl game, it lacks {', '.join(lacks)}")
    if not os.path.isfile(os.path.join(os.path.dirname(path), "traj_data.json")):
        raise ValueError(f"{where}: its folder has no traj_data.json, which ALFWorld's expert reads (ALFWorld's data "
                         "keeps one beside every game.tw-pddl)")


def _make_game(path: str) -> Any:
    """Trinity's create_environment: the game under textworld.gym with ALFWorld's wrappers."""
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredExpertType

    expert = AlfredExpert(expert_type=AlfredExpertType.HANDCODED)
    request_infos = textworld.EnvInfos(description=True, inventory=True, admissible_commands=True)
    return textworld.gym.make(textworld.gym.register_game(path, request_infos, wrappers=[AlfredDemangler(), expert]))


def start_game(path: str) -> tuple[Any, str]:
    """A fresh game of the file at `path` and its first observation (the game's text)."""
    argv = sys.argv
    with _RESET_LOCK:
        try:
            game = _make_game(path)
            observation, _ = game.reset()
        finally:
            sys.argv = argv  # fast-downward's translator leaves its own there
    return game, observation


@register_env("trinity_alfworld")
class TrinityAlfworld:
    """Trinity-RFT's ALFWorld workflow, one game file per episode (see the module docstring)."""

    instruction = SYSTEM_PROMPT
    check_runtime = staticmethod(_check_runtime)  # the packages (and runtime) it needs, checked at plan time
    # an episode_files row may name its episode by this column instead of a seed (posttrain.envs.spec)
    episode_argument = "task_desc"

    def __init__(self, task_desc: str | None = None, max_env_steps: int = MAX_ENV_STEPS):
        if not isinstance(task_desc, str) or not task_desc:
            raise ValueError("trinity_alfworld needs task_desc, the path of an ALFWorld game.tw-pddl file: "
                             "give it in env_config or as a column of the entry's episode_files")
        if isinstance(max_env_steps, bool) or not isinstance(max_env_steps, int) or max_env_steps < 1:
            raise ValueError(f"max_env_steps must be an integer >= 1, got {max_env_steps!r}")
        _check_runtime()
        _check_game(task_desc)
        self.task_desc, self.max_env_steps = task_desc, max_env_steps
        self.game: Any = None
        self.steps = 0

    @staticmethod
    def smoke_rows() -> list[dict[str, Any]]:
        """Stand-in episode rows (`posttrain smoke` on a machine without ALFWorld's games): the small game,
        written to a fresh temporary folder."""
        _check_runtime()
        return [{"task_desc": write_game(tempfile.mkdtemp(prefix="posttrain-alfworld-"))}]

    def reset(self, seed: int) -> str:
        self.close()
        self.game, observation = start_game(self.task_desc)
        self.steps = 0
        return format_observation(observation)

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        observation, score, done, _ = self.game.step(parse_action(action_text))
        self.steps += 1
        won = bool(done) and score > 0
        if done:
            reward = float(score)
        elif self.steps >= self.max_env_steps:
            reward, done = TIMEOUT_REWARD, True
        else:
            reward = 0.0
        return format_observation(observation), reward, bool(done), {"action_is_valid": "<action>" in action_text, "success": won}

    def close(self) -> None:
        """Close the game (Trinity closes it after each episode)."""
        if self.game is not None:
            self.game.close()
            self.game = None
