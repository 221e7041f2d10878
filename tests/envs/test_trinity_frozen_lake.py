"""trinity_frozen_lake (Trinity-RFT's FrozenLake workflow) and custom_envs' episode_files."""

from __future__ import annotations

import doctest
import json

import pytest

from posttrain.envs import trinity_frozen_lake
from posttrain.envs.frozen_lake import random_map
from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.trinity_frozen_lake import TrinityFrozenLake, goal_within, trinity_map
from posttrain.errors import ConfigError
from posttrain.trainer.agentic import episodes

pytest.importorskip("gymnasium")


def test_doctests():
    assert doctest.testmod(trinity_frozen_lake).failed == 0


# Maps printed by Trinity-RFT's own generate_random_map (trinity/common/workflows/envs/frozen_lake/utils.py,
# run with gymnasium 1.x) for (size, p, seed, max_steps); the first three are rows 0-2 of the taskset
# its examples/grpo_frozen_lake/get_frozen_lake_data.py writes.
TRINITY_MAPS = {
    (4, 0.6052909534955095, 15795, 8): ["GFFF", "FFFH", "SFFF", "FFFH"],
    (5, 0.6841764172243834, 860, 8): ["SFFFF", "FFHFF", "HFFHG", "HHFHF", "FHFFF"],
    (5, 0.6361189241486513, 76820, 8): ["SFHFH", "GHFFH", "HFFFH", "FFHHF", "FHHHH"],
    (3, 0.8, 2, 2): ["SFH", "FFF", "FGF"],
    (5, 0.6, 2, 8): ["HFFFH", "FFHFF", "FFFFF", "FFFFH", "FHSGF"],
}


@pytest.mark.parametrize("args", list(TRINITY_MAPS))
def test_a_row_draws_the_map_trinitys_generator_draws(args):
    assert trinity_map(*args) == TRINITY_MAPS[args]


def test_the_map_differs_from_the_roll_layout_where_trinity_keeps_the_board():
    # seed 2: the first start and goal coincide; Trinity redraws only the two cells, ROLL's layout the board
    assert random_map(3, 0.8, 2) != trinity_map(3, 0.8, 2, 2)


def test_the_depth_first_check_follows_its_own_path_not_the_shortest():
    # G is three moves up from S, but the search pops "left" first and walks the long way round, marking
    # the cells it will later need as seen: Trinity's is_valid rejects this board for max_steps 3 too
    board = [list("FFHG"), list("HFFF"), list("HHFF"), list("FFFS")]
    assert not goal_within(board, 3) and goal_within(board, 5)


def test_episode_turns_read_as_trinitys_user_turns():
    lake = TrinityFrozenLake(size=3, p=0.8, agent_max_steps=3)
    first = lake.reset(seed=0)  # FFG / FHS / FFF: the player at (1, 2)
    assert first.startswith("Current Observation (0): \n _ \t _ \t G \t\n _ \t O \t P \t\n")
    assert first.endswith("Please give the next action.\nThe maximum number of steps remaining is 3.")
    obs, reward, done, info = lake.step("```Right```")  # the edge: nothing moves
    assert (reward, done, info) == (0.0, False, {"action_is_valid": True, "success": False})
    assert obs.startswith("Current Observation (1): ") and "Your last response is invalid." in obs
    assert obs.endswith("remaining is 2.")
    obs, reward, done, info = lake.step("go ```Down``` no, ```2```")  # the last block: 2 is Down
    assert info["action_is_valid"] and "P \t\n" in obs.split("\n")[3] + "\n" and "invalid" not in obs
    obs, reward, done, info = lake.step("Left")  # no block: invalid, the player stays
    assert (reward, done, info["action_is_valid"]) == (0.0, False, False)
    assert "invalid" in obs and "remaining" not in obs  # no step left
    lake.reset(seed=0)
    assert lake.step("```up```")[1:3] == (1.0, True)


def test_a_hole_ends_the_episode_with_nothing():
    lake = TrinityFrozenLake(size=3, p=0.8)
    lake.reset(seed=0)
    lake.step("```Down```")  # (2, 2)
    lake.step("```Left```")  # (2, 1)
    obs, reward, done, info = lake.step("```Up```")  # (1, 1): the hole
    assert (reward, done, info["success"]) == (0.0, True, False) and " X \t" in obs


def _tasks(tmp_path, rows):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_episode_files_give_each_group_a_row_in_order(tmp_path):
    rows = [{"seed": 10 + i, "size": 2 + i % 3, "p": 0.8, "index": i, "uid": f"u{i}"} for i in range(5)]
    specs = parse_custom_envs({"L": {"env_type": "trinity_frozen_lake", "env_config": {"is_slippery": False},
                                     "episode_files": [_tasks(tmp_path, rows)]}})
    assert specs["L"].episodes[1] == {"seed": 11, "size": 3, "p": 0.8}  # index and uid are not constructor arguments
    step = lambda s: [(seed, cfg["size"]) for _, seed, cfg in episodes(specs, ["L", "L"], 0, "s", s)]
    assert step(1) == [(10, 2), (11, 3)] and step(2) == [(12, 4), (13, 2)] and step(3) == [(14, 3), (10, 2)]  # wraps round
    assert [seed for _, seed, _ in episodes(specs, ["L", "L", "L"], 0, "val", 0)] == [10, 11, 12]
    assert all(cfg["is_slippery"] is False for _, _, cfg in episodes(specs, ["L"], 0, "s", 1))  # env_config kept under the row


def test_episode_files_mistakes_name_the_file_and_row(tmp_path):
    bad = _tasks(tmp_path, [{"seed": 1}, {"seed": "x"}])
    with pytest.raises(ConfigError, match=r"env.custom_envs.L.episode_files: .*tasks.jsonl row 1: the seed column must hold an integer"):
        parse_custom_envs({"L": {"env_type": "trinity_frozen_lake", "episode_files": bad}})
    with pytest.raises(ConfigError, match=r"env.custom_envs.L.episode_files: .*data file not found"):
        parse_custom_envs({"L": {"env_type": "trinity_frozen_lake", "episode_files": str(tmp_path / "none.jsonl")}})


def test_num_env_groups_zero_plays_every_row_once(tmp_path):
    from posttrain.config.sections.env import EnvManagerConfig
    from posttrain.envs.spec import tag_groups

    specs = parse_custom_envs({"L": {"env_type": "trinity_frozen_lake", "episode_files": _tasks(tmp_path, [{"seed": 1}, {"seed": 2}])},
                               "W": {"env_type": "walk"}})
    assert tag_groups(EnvManagerConfig(num_env_groups=0, tags=["L"]), specs, "k") == ["L", "L"]
    with pytest.raises(ConfigError, match=r"k.num_env_groups: 0 plays one group per row .* \['W'\] have none"):
        tag_groups(EnvManagerConfig(num_env_groups=0, tags=["L", "W"]), specs, "k")
