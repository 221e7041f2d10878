"""`trinity_sciworld`: Trinity-RFT's ScienceWorld workflow as a text environment.

Trinity-RFT's ``sciworld_workflow`` (trinity/common/workflows/envs/sciworld) plays one ScienceWorld
task per taskset row: the row's ``task_desc`` (the taskset's ``format.prompt_key`` column) is a JSON
string ``{"task_name": ..., "var_num": ..., "jar_path": ...}``. This environment plays the same
episodes turn for turn on posttrain's agent loop, through the ``scienceworld`` package (which runs
the simulator in a Java virtual machine):

- **Task**: the simulator loads ``task_name`` at variation ``var_num`` with the ``easy`` simplifications
  and a step limit of 100, as Trinity does, and each reset starts it afresh (ScienceWorld's own reset,
  which replays "look around"). ``jar_path`` null, absent or naming a file this machine lacks (Trinity's
  data script writes the path on the machine that made the rows) plays the package's bundled jar. The
  reset seed is not read: the variation is the episode. Trinity also asks for the gold path, which
  only feeds its ``golden_rounds`` metric (the reset reloads the task): posttrain does not.
- **Observations**: the first user turn is ``Observation: \\n`` + ``Task Description: <the task's
  description>\\n`` + the room; each later one ``Observation: \\n`` + the simulator's answer (Trinity's
  ``format_observation``). ScienceWorld lists a room's objects in an order of its own, which can differ
  between two loads of one task.
- **Actions**: the text between the reply's first ``<action>`` and the next ``</action>`` (to the end
  when unclosed), stripped; a reply without ``<action>`` sends ``""`` to the simulator ("No known
  action matches that input."), as Trinity does. Such a reply is ``action_is_valid`` False, which
  costs nothing unless the entry sets a format_penalty (Trinity has none).
- **Reward**: Trinity's episode reward is the best cumulative score over the steps (the sum of the
  simulator's score deltas, floored at 0, as its running maximum starts at 0), divided by 100, given
  at the end. The deltas count from the score after the reset's "look around" (often 8 already), so
  a solved task earns less than 1.0 (0.92 for find-living-thing, variation 1), as in Trinity.
  posttrain's loop sums an episode's step rewards, so each step returns the rise of that running
  maximum over 100: the rises telescope to Trinity's value whether the episode ends by the
  simulator's done, by the entry's ``max_steps`` (the loop still steps the last action, then cuts),
  or earlier. ``success`` is a score of 100.

Trinity plays at most 30 actions (``max_env_steps``); the translation sets the entry's ``max_steps``
to that. A Java virtual machine takes seconds to start (about 3 s here, and the first load of a task
another 1-7 s), so environments do not start one each: a closed or garbage-collected environment
(posttrain builds fresh ones every step and drops them) hands its simulator back to an idle pool that
the next one takes, one per jar; `close_idle` stops the idle ones, and they stop with the process.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import weakref
from typing import Any

from posttrain.envs.registry import register_env

# Trinity-RFT's SCIWORLD_SYSTEM_PROMPT (sciworld_workflow.py), word for word, its leading and trailing
# newlines included: the policy it trains reads exactly this.
SYSTEM_PROMPT = """
You are an agent, your job is to do some scientific experiment in a virtual text-based environment.

## Notes:
At each step, you should first think then perform action to fulfill the instruction. You should ALWAYS wrap your thinking with the <think> </think> tag and wrap your action with the <action> </action> tag.
You should ALWAYS take one action each step.
DO NOT try to interact with the user at anytime. Finish the task by yourself.

## Action Format:
Below are the available commands you can use:
    open OBJ: open a container
    close OBJ: close a container
    activate OBJ: activate a device
    deactivate OBJ: deactivate a device
    connect OBJ to OBJ: connect electrical components
    disconnect OBJ: disconnect electrical components
    use OBJ [on OBJ]: use a device/item
    look around: describe the current room
    examine OBJ: describe an object in detail
    look at OBJ: describe a container's contents
    read OBJ: read a note or book
    move OBJ to OBJ: move an object to a container
    pick up OBJ: move an object to the inventory
    pour OBJ into OBJ: pour a liquid into a container
    mix OBJ: chemically mix a container
    teleport to LOC: teleport to a specific room
    focus on OBJ: signal intent on a task object
    wait: task no action for 10 steps
    wait1: task no action for a step

For example your output should be like this:
<think> Now I will check the bedroom ... </think><action>teleport to bedroom</action>
"""
MAX_ENV_STEPS = 30  # Trinity's max_env_steps: actions per episode (the entry's max_steps)
SIMPLIFICATIONS = "easy"  # Trinity's simplificationStr
ENV_STEP_LIMIT = 100  # Trinity's envStepLimit: the simulator ends an episode past this many moves
# Two tasks of Trinity's training split (get_sciworld_data.py) with short gold paths: `posttrain smoke`'s stand-in rows
SMOKE_TASKS = (("find-living-thing", 1), ("find-plant", 0))

_IDLE: dict[str | None, list[Any]] = {}  # jar path (None: the bundled one) -> simulators no environment holds


def format_observation(observation: str) -> str:
    """Trinity's user turn for a simulator answer.

    >>> format_observation("You teleport to the kitchen.")
    'Observation: \\nYou teleport to the kitchen.'
    """
    return "Observation: \n" + observation


def parse_action(response: str) -> str:
    """Trinity's action: between the first ``<action>`` and the next ``</action>``, stripped; "" without ``<action>``.

    >>> parse_action("<think>hm</think><action> look around </action>"), parse_action("<action>open door"), parse_action("wait")
    ('look around', 'open door', '')
    """
    parts = response.split("<action>")
    return parts[1].split("</action>")[0].strip() if len(parts) > 1 else ""


def parse_task(task_desc: Any) -> tuple[str, int, str | None]:
    """(task_name, var_num, jar path or None for the bundled jar) of a row's task_desc.

    >>> parse_task('{"task_name": "boil", "var_num": 3, "jar_path": "/elsewhere/scienceworld.jar"}')
    ('boil', 3, None)
    """
    try:
        task = json.loads(task_desc) if isinstance(task_desc, str) else task_desc
    except json.JSONDecodeError as e:
        raise ValueError(f"task_desc must be a JSON object {{task_name, var_num, jar_path}}, got {task_desc!r:.80} ({e})") from None
    if not isinstance(task, dict) or not isinstance(task.get("task_name"), str) or isinstance(task.get("var_num"), bool) \
            or not isinstance(task.get("var_num"), int) or task["var_num"] < 0:
        raise ValueError(f"task_desc must be a JSON object with task_name (a string) and var_num (an integer >= 0), got {task_desc!r:.120}")
    jar = task.get("jar_path")
    # Trinity's rows carry the jar path of the machine that wrote them: one not here plays the package's own
    return task["task_name"], task["var_num"], jar if isinstance(jar, str) and os.path.isfile(jar) else None


def close_idle() -> int:
    """Stop every idle simulator's Java virtual machine; how many were stopped."""
    count = 0
    for pool in _IDLE.values():
        while pool:
            pool.pop().close()
            count += 1
    return count


atexit.register(close_idle)


def _check_runtime() -> None:
    if importlib.util.find_spec("scienceworld") is None:
        raise ValueError("trinity_sciworld plays ScienceWorld: pip install 'posttrain[envs]' (or scienceworld)")
    if shutil.which("java") is None:
        raise ValueError("trinity_sciworld's ScienceWorld runs in Java and `java` is not on PATH: install a Java runtime "
                         "(e.g. apt-get install default-jre-headless)")


def _take(jar: str | None) -> Any:
    """An idle simulator of this jar, else a new one (a Java virtual machine started)."""
    if _IDLE.get(jar):
        return _IDLE[jar].pop()
    from scienceworld import ScienceWorldEnv

    return ScienceWorldEnv("", jar, envStepLimit=ENV_STEP_LIMIT)


def _give_back(jar: str | None, held: list[Any]) -> None:
    """An environment's finalizer: its simulator (if it took one) goes to the idle pool. It must not
    reference the environment itself, or the environment would never be collected."""
    if held:
        _IDLE.setdefault(jar, []).append(held.pop())


@register_env("trinity_sciworld")
class TrinitySciWorld:
    """Trinity-RFT's ScienceWorld workflow, one task variation per episode (see the module docstring)."""

    instruction = SYSTEM_PROMPT
    check_runtime = staticmethod(_check_runtime)  # the packages (and runtime) it needs, checked at plan time
    # an episode_files row may name its episode by this column instead of a seed (posttrain.envs.spec)
    episode_argument = "task_desc"

    def __init__(self, task_desc: str | None = None):
        if task_desc is None:
            raise ValueError("trinity_sciworld needs task_desc, a JSON string {task_name, var_num, jar_path}: "
                             "give it in env_config or as a column of the entry's episode_files")
        self.task_name, self.var_num, self.jar = parse_task(task_desc)
        _check_runtime()
        self._held: list[Any] = []  # the simulator this environment took, once it took one
        self._finalizer = weakref.finalize(self, _give_back, self.jar, self._held)
        self.score = 0  # Trinity's current_reward: the sum of the simulator's score deltas so far
        self.best = 0  # Trinity's final_reward x 100: the best score so far, from 0

    @staticmethod
    def smoke_rows() -> list[dict[str, Any]]:
        """Stand-in episode rows (`posttrain smoke` on a machine without the taskset): two real tasks."""
        return [{"task_desc": json.dumps({"task_name": name, "var_num": var, "jar_path": None})} for name, var in SMOKE_TASKS]

    def _simulator(self) -> Any:
        if not self._held:
            self._held.append(_take(self.jar))
        return self._held[0]

    def reset(self, seed: int) -> str:
        sim = self._simulator()
        if getattr(sim, "posttrain_task", None) != (self.task_name, self.var_num):  # else its reset reloads the task
            sim.load(self.task_name, self.var_num, SIMPLIFICATIONS)
            sim.posttrain_task = (self.task_name, self.var_num)
        observation, _ = sim.reset()
        self.score = self.best = 0
        return format_observation("Task Description: " + str(sim.get_task_description()) + "\n" + observation)

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        observation, delta, done, info = self._simulator().step(parse_action(action_text))
        self.score += delta
        best = max(self.best, self.score)
        # the rise of the running maximum: the episode's rewards sum to Trinity's best / 100
        reward, self.best = (best - self.best) / 100.0, best
        valid = "<action>" in action_text
        return format_observation(observation), reward, bool(done), {"action_is_valid": valid, "success": info.get("score", 0) >= 100}

    def close(self) -> None:
        """Hand the simulator back to the idle pool (garbage collection does the same)."""
        self._finalizer()
