"""The built-in environments: seeded reproducibility, step semantics and rendering of frozen_lake,
sokoban and the single-turn task adapter; every generated map or room can be solved by its expert."""

from __future__ import annotations

import doctest

import pytest

from posttrain.envs import base, frozen_lake, sokoban, task_env, walk
from posttrain.envs.frozen_lake import FrozenLake
from posttrain.envs.sokoban import Sokoban, solve
from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.task_env import TaskEnv
from posttrain.errors import ConfigError
from posttrain.tasks import compute_score


@pytest.mark.parametrize("module", [base, walk, frozen_lake, sokoban, task_env])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


def play(env, seed: int, limit: int = 40) -> tuple[float, bool, int]:
    """Follow the env's expert from reset(seed); (total reward, success, actions)."""
    env.reset(seed)
    total, done, info, n = 0.0, False, {}, 0
    while not done and n < limit:
        _, reward, done, info = env.step(env.expert_action())
        total, n = total + reward, n + 1
    return total, bool(info.get("success")), n


def test_frozen_lake_maps_are_reproducible_by_seed_and_always_solvable():
    maps = [FrozenLake(size=4, is_slippery=False).reset(s) for s in range(30)]
    assert maps == [FrozenLake(size=4, is_slippery=False).reset(s) for s in range(30)] and len(set(maps)) == 30
    for board in maps:
        assert set(board) <= set("_OGP\n") and board.count("P") == board.count("G") == 1
        assert board.split("\n") and all(len(row) == 4 for row in board.split("\n"))
    for seed in range(30):  # the map generator only keeps lakes with a way to the goal
        total, success, n = play(FrozenLake(size=4, is_slippery=False), seed)
        assert (total, success) == (1.0, True) and 1 <= n <= 15  # holes may force a detour


def test_frozen_lake_gymnasium_layout_starts_top_left_with_the_goal_bottom_right():
    for seed in range(5):
        rows = FrozenLake(size=4, random_start=False, is_slippery=False).reset(seed).split("\n")
        assert rows[0][0] == "P" and rows[-1][-1] == "G"
    random_rows = [FrozenLake(size=4).reset(s).split("\n") for s in range(10)]
    assert any(r[0][0] != "P" for r in random_rows)  # ROLL's layout moves the start


def test_frozen_lake_steps_holes_walls_and_invalid_actions():
    lake = FrozenLake(size=3, is_slippery=False)
    assert lake.reset(0) == "__G\n_OP\n___"
    assert lake.step("Right") == ("__G\n_OP\n___", 0.0, False, {"action_is_valid": True, "success": False})  # the edge
    assert lake.step("jump") == ("__G\n_OP\n___", 0.0, False, {"action_is_valid": False, "success": False})
    assert lake.step("LEFT") == ("__G\n_X_\n___", 0.0, True, {"action_is_valid": True, "success": False})  # a hole ends it
    lake.reset(0)
    assert lake.state() == "__G\n_OP\n___" and lake.expert_action() == "Up"


def test_slippery_lakes_slip_alike_by_seed_and_sometimes_slip():
    def run(seed: int) -> list[str]:
        lake = FrozenLake(size=4, is_slippery=True)
        lake.reset(seed)
        out = []
        for _ in range(6):
            obs, _, done, _ = lake.step("Down")
            out.append(obs)
            if done:
                break
        return out

    assert [run(s) for s in range(10)] == [run(s) for s in range(10)]
    straight = [FrozenLake(size=4, is_slippery=False) for _ in range(10)]
    unslipped = [(lake.reset(s), lake.step("Down")[0])[1] for s, lake in enumerate(straight)]
    assert any(run(s)[0] != unslipped[s] for s in range(10))  # a third of the moves go sideways


def room(rows: list[str]) -> Sokoban:
    """A Sokoban room written by hand in the rendered symbols."""
    env = Sokoban(dim_room=(len(rows), len(rows[0])), num_boxes=sum(r.count("X") + r.count("√") for r in rows))
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    env.floor = {p for p, ch in cells.items() if ch != "#"}
    env.targets = frozenset(p for p, ch in cells.items() if ch in "O√S")
    env.boxes = frozenset(p for p, ch in cells.items() if ch in "X√")
    env.player = next(p for p, ch in cells.items() if ch in "PS")
    assert env.render() == "\n".join(rows)
    return env


def test_sokoban_push_semantics_and_rewards():
    env = room(["#######", "#P_X_O#", "#__XX_#", "#######"])
    assert env.step("Up") == ("#######\n#P_X_O#\n#__XX_#\n#######", -0.1, False, {"action_is_valid": True, "success": False})
    assert env.step("Right")[0] == "#######\n#_PX_O#\n#__XX_#\n#######"
    assert env.step("Right")[:3] == ("#######\n#__PXO#\n#__XX_#\n#######", -0.1, False)  # pushed onto floor
    assert env.step("Right")[:3] == ("#######\n#___P√#\n#__XX_#\n#######", 0.9, False)  # onto its target: +1
    assert env.step("Right")[0] == "#######\n#___P√#\n#__XX_#\n#######"  # a box against the wall does not move
    env.step("Left"), env.step("Left"), env.step("Down")
    assert env.render() == "#######\n#____√#\n#_PXX_#\n#######"
    assert env.step("Right")[0] == "#######\n#____√#\n#_PXX_#\n#######"  # two boxes in a row do not move
    off = room(["#####", "#S√_#", "#####"])  # player on a target; a box pushed off its target costs 1
    assert off.step("Right")[:3] == ("#####\n#OSX#\n#####", -1.1, False) and off.boxes == frozenset({(1, 3)})


def test_sokoban_win_and_invalid_actions():
    env = room(["#####", "#PXO#", "#####"])
    assert env.step("north") == ("#####\n#PXO#\n#####", -0.1, False, {"action_is_valid": False, "success": False})
    assert env.step("right") == ("#####\n#_P√#\n#####", 10.9, True, {"action_is_valid": True, "success": True})


def test_sokoban_rooms_are_reproducible_and_solvable():
    rooms = [Sokoban(dim_room=(6, 6)).reset(s) for s in range(20)]
    assert rooms == [Sokoban(dim_room=(6, 6)).reset(s) for s in range(20)] and len(set(rooms)) == 20
    for seed in range(20):
        env = Sokoban(dim_room=(6, 6), num_boxes=2 if seed % 2 else 1)
        env.reset(seed)
        assert not env.boxes <= env.targets and solve(env.floor, env.targets, env.boxes, env.player)
        total, success, n = play(env, seed)
        assert success and n == len(solve(env.floor, env.targets, *Sokoban.state(reset_again(env, seed))))
        assert total <= 10 + len(env.targets) - 0.1 * n + 1e-9  # +1 per box placed, -1 per box taken off
    assert env.state() == (env.boxes, env.player)


def reset_again(env: Sokoban, seed: int) -> Sokoban:
    env.reset(seed)
    return env


def test_task_env_scores_like_the_task_and_checks_options():
    env = TaskEnv(task="sort", length=3)
    prompt = env.reset(7)
    assert prompt == TaskEnv(task="sort", length=3).reset(7) and prompt.startswith(":") and len(prompt) == 5
    wrong = "".join(reversed(env.expert_action())) + "0"
    expected = compute_score("posttrain/sort", wrong, env.expert_action())
    assert env.step(wrong) == ("", expected["score"], True, {"action_is_valid": True, "success": False})
    assert env.step(env.expert_action())[1:] == (1.0, True, {"action_is_valid": True, "success": True})
    spec = parse_custom_envs({"T": {"env_type": "task", "env_config": {"task": "arithmetic", "digits": 1}}})["T"]
    assert spec.cls is TaskEnv and spec.cls(**spec.env_config).reset(0).endswith("=")
    from posttrain.envs.registry import make_env

    with pytest.raises(ConfigError, match=r"env.custom_envs.T.env_config: task 'sort' has no option 'width'; its options are: length"):
        make_env(TaskEnv, {"task": "sort", "width": 2}, "env.custom_envs.T")
    with pytest.raises(ConfigError, match=r"env.custom_envs.T.env_config: unknown task 'nope'; known tasks: arithmetic, colour, countdown, sort"):
        make_env(TaskEnv, {"task": "nope"}, "env.custom_envs.T")
