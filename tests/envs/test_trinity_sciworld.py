"""trinity_sciworld (Trinity-RFT's ScienceWorld workflow) against the real simulator, and episode rows
that name their episode by a column instead of a seed (custom_envs' episode_columns)."""

from __future__ import annotations

import doctest
import gc
import json
import shutil

import pytest

from posttrain.envs import trinity_sciworld
from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.trinity_sciworld import TrinitySciWorld, parse_task
from posttrain.errors import ConfigError
from posttrain.trainer.agentic import episodes

pytest.importorskip("scienceworld")
needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="no `java` on PATH: ScienceWorld's simulator runs in a JVM")

# find-living-thing, variation 1: the agent starts in the art studio, a butterfly egg waits outside
LIVING = json.dumps({"task_name": "find-living-thing", "var_num": 1, "jar_path": "/cluster/ScienceWorld/scienceworld.jar"})


def test_doctests():
    assert doctest.testmod(trinity_sciworld).failed == 0


def test_system_prompt_is_trinitys_word_for_word():
    # the start and end of Trinity-RFT's SCIWORLD_SYSTEM_PROMPT, its surrounding newlines included
    assert TrinitySciWorld.instruction.startswith("\nYou are an agent, your job is to do some scientific experiment")
    assert TrinitySciWorld.instruction.endswith("<think> Now I will check the bedroom ... </think><action>teleport to bedroom</action>\n")
    assert "    wait1: task no action for a step\n" in TrinitySciWorld.instruction


@needs_java
def test_an_episode_plays_trinitys_turns_and_rewards_the_best_score():
    env = TrinitySciWorld(task_desc=LIVING)  # a jar path this machine lacks: the package's bundled jar
    first = env.reset(seed=0)
    assert first.startswith("Observation: \nTask Description: Your task is to find a(n) living thing. First, focus on the thing.")
    assert "\nThis room is called the art studio." in first
    # score deltas 9 (outside) and 50 (the focus): the rises of the best score, over 100
    obs, reward, done, info = env.step("<think>outside</think><action>teleport to outside</action>")
    assert (obs, reward, done, info) == ("Observation: \nYou teleport to the outside.", 0.09, False, {"action_is_valid": True, "success": False})
    obs, reward, done, _ = env.step("<action> focus on butterfly </action>")
    assert (obs, reward, done) == ("Observation: \nYou focus on the butterfly egg.", 0.5, False)
    # a reply without <action> sends "" to the simulator, as Trinity does: no move, no reward
    obs, reward, done, info = env.step("I look around")
    assert (obs, reward, done, info["action_is_valid"]) == ("Observation: \nNo known action matches that input.", 0.0, False, False)
    # a new episode of the same environment: the task starts afresh
    assert env.reset(seed=0).startswith("Observation: \nTask Description: Your task is to find a(n) living thing.")
    _, first_reward, _, _ = env.step("<action>teleport to outside</action>")
    # focusing on the wrong thing fails the task (score -100, done): Trinity keeps the best so far, 9
    _, reward, done, _ = env.step("<action>focus on air</action>")
    assert (first_reward, reward, done) == (0.09, 0.0, True)
    env.close()


class _FakeSimulator:
    """Score deltas as ScienceWorld reports them (`step` -> observation, delta, done, info)."""

    def __init__(self, deltas):
        self.deltas, self.score = list(deltas), 0

    def step(self, action):
        self.score += self.deltas[0]
        return action, self.deltas.pop(0), False, {"score": self.score}


def test_step_rewards_telescope_to_trinitys_best_cumulative_score_over_100():
    env = TrinitySciWorld.__new__(TrinitySciWorld)
    env._held, env.score, env.best = [_FakeSimulator([25, 0, 33, -40, 30, 12, -158])], 0, 0
    env._finalizer = lambda: None
    rewards = [env.step("<action>x</action>")[1] for _ in range(7)]
    # cumulative 25 25 58 18 48 60 -98: Trinity's max(0, best) / 100 = 0.6; each step the best's rise
    assert rewards == pytest.approx([0.25, 0.0, 0.33, 0.0, 0.0, 0.02, 0.0])
    assert sum(rewards) == pytest.approx(0.6)


def test_task_desc_mistakes_and_a_missing_runtime_are_one_line(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="task_desc must be a JSON object"):
        TrinitySciWorld(task_desc="boil water")
    with pytest.raises(ValueError, match="var_num \\(an integer >= 0\\)"):
        TrinitySciWorld(task_desc='{"task_name": "boil"}')
    jar = tmp_path / "scienceworld.jar"
    jar.write_bytes(b"")
    assert parse_task({"task_name": "boil", "var_num": 0, "jar_path": str(jar)}) == ("boil", 0, str(jar))  # a jar that is here is played
    with pytest.raises(ConfigError, match="env.custom_envs.S.env_config: trinity_sciworld needs task_desc"):
        parse_custom_envs({"S": {"env_type": "trinity_sciworld"}})["S"].make({})
    monkeypatch.setattr(trinity_sciworld.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match=r"runs in Java and `java` is not on PATH: install a Java runtime \(e.g. apt-get install default-jre-headless\)"):
        TrinitySciWorld(task_desc=LIVING)
    monkeypatch.setattr(trinity_sciworld.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"pip install 'posttrain\[envs\]' \(or scienceworld\)"):
        TrinitySciWorld(task_desc=LIVING)


@needs_java
def test_a_dropped_environment_hands_its_simulator_to_the_next():
    env = TrinitySciWorld(task_desc=LIVING)
    env.reset(seed=0)
    simulator = env._held[0]
    idle = list(trinity_sciworld._IDLE.get(None, []))  # left by earlier tests of this process
    del env
    gc.collect()
    assert trinity_sciworld._IDLE[None] == idle + [simulator]  # garbage collection gave it back
    again = TrinitySciWorld(task_desc=LIVING)
    again.reset(seed=1)
    assert again._held[0] is simulator and trinity_sciworld._IDLE[None] == idle  # taken, not a second JVM
    again.close()
    assert trinity_sciworld.close_idle() == len(idle) + 1 and trinity_sciworld._IDLE[None] == []


def _rows(tmp_path, rows, name="tasks.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_rows_without_a_seed_are_seeded_by_their_position(tmp_path):
    tasks = [json.dumps({"task_name": "boil", "var_num": i, "jar_path": None}) for i in range(3)]
    files = [_rows(tmp_path, [{"task_desc": t, "targe": ""} for t in tasks[:2]], "a.jsonl"), _rows(tmp_path, [{"task_desc": tasks[2]}], "b.jsonl")]
    specs = parse_custom_envs({"S": {"env_type": "trinity_sciworld", "episode_files": files}})
    assert specs["S"].episodes == tuple({"seed": i, "task_desc": t} for i, t in enumerate(tasks))  # positions over the files in order
    assert [(seed, cfg["task_desc"]) for _, seed, cfg in episodes(specs, ["S", "S"], 0, "s", 2)] == [(2, tasks[2]), (0, tasks[0])]
    # a row naming neither a seed nor its task
    with pytest.raises(ConfigError, match=r"S.episode_files: .*c.jsonl row 1: the seed column must hold an integer >= 0 .*, or a task_desc column"):
        parse_custom_envs({"S": {"env_type": "trinity_sciworld", "episode_files": _rows(tmp_path, [{"task_desc": tasks[0]}, {"x": 1}], "c.jsonl")}})
    # a class without an episode_argument still needs the seed column
    with pytest.raises(ConfigError, match=r"L.episode_files: .*row 0: the seed column must hold an integer >= 0 \(the episode's reset seed\), got None"):
        parse_custom_envs({"L": {"env_type": "trinity_frozen_lake", "episode_files": _rows(tmp_path, [{"size": 3}], "d.jsonl")}})


def test_episode_columns_read_an_argument_from_another_column(tmp_path):
    boil, melt = (json.dumps({"task_name": n, "var_num": 0}) for n in ("boil", "melt"))
    files = _rows(tmp_path, [{"prompt": boil, "question": melt}])
    read = lambda column: parse_custom_envs({"S": {"env_type": "trinity_sciworld", "episode_files": files,
                                                   "episode_columns": {"task_desc": column}}})["S"].episodes[0]["task_desc"]
    assert (read("prompt"), read("question")) == (boil, melt)
    with pytest.raises(ConfigError, match=r"S.episode_files: .*tasks.jsonl row 0: no column 'task_desc' \(episode_columns reads it\)"):
        read("task_desc")
    with pytest.raises(ConfigError, match=r"S.episode_columns: \['task'\] are not constructor arguments of TrinitySciWorld"):
        parse_custom_envs({"S": {"env_type": "trinity_sciworld", "episode_files": files, "episode_columns": {"task": "prompt"}}})
    with pytest.raises(ConfigError, match=r"S.episode_columns: reads columns of episode_files rows, and the entry has no episode_files"):
        parse_custom_envs({"S": {"env_type": "trinity_sciworld", "episode_columns": {"task_desc": "prompt"}}})
