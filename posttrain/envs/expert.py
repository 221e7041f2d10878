"""Expert trajectories for an SFT warm-up: an environment's planner plays it, and each episode
becomes one chat conversation (`posttrain make-env-data`).

An environment with an expert has a method ``expert_action() -> str``: the action a planner picks
in the current state (FrozenLake and Sokoban search a shortest path breadth-first; the task
adapter answers with the task's correct response). One episode is written as the agent loop
renders it: the instruction as the system message, each observation a user message, each action
an assistant message. SFT on these rows (``data.messages_key: messages``, loss on every assistant
turn) teaches the model the action format and the planner's moves on exactly the token layout the
agent loop will show it, so the RL stage that follows starts from a policy that acts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain.envs.registry import make_env
from posttrain.errors import ConfigError


@dataclass(frozen=True)
class ExpertEpisode:
    seed: int
    observations: list[str]  # the observation before each action
    actions: list[str]
    reward: float
    success: bool

    def messages(self, instruction: str) -> list[dict[str, str]]:
        """The episode as a conversation; the final observation (after the last action) is left
        out, as the agent loop leaves it out of a trajectory."""
        head = [{"role": "system", "content": instruction}] if instruction else []
        turns = [m for obs, act in zip(self.observations, self.actions)
                 for m in ({"role": "user", "content": obs}, {"role": "assistant", "content": act})]
        return head + turns


def play_expert(env: Any, seed: int, max_steps: int) -> ExpertEpisode:
    """One episode of `env` from `reset(seed)` with its own `expert_action` for every move."""
    observations, actions, reward, info, done = [env.reset(seed)], [], 0.0, {}, False
    while not done and len(actions) < max_steps:
        action = env.expert_action()
        observation, r, done, info = env.step(action)
        actions.append(action)
        reward += r
        observations.append(observation)
    return ExpertEpisode(seed, observations[:-1], actions, reward, bool(info.get("success", False)))


def expert_rows(cls: type, env_config: dict[str, Any], instruction: str, *, episodes: int, seed: int,
                max_steps: int, successful_only: bool = True, name: str = "",
                exclude: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """`episodes` SFT rows (columns data_source, messages, extra_info) from distinct episode seeds
    drawn by `random.Random(seed)`; with `successful_only`, episodes the expert fails are skipped
    and others drawn in their place (a slippery lake can throw the expert into a hole). Episodes
    whose first observation is in `exclude` (held-out validation boards) are skipped too."""
    if not callable(getattr(cls, "expert_action", None)):
        raise ConfigError(f"environment {name or cls.__name__} has no expert_action(): it cannot write expert trajectories")
    rng, rows, seen = random.Random(seed), [], set()
    while len(rows) < episodes:
        episode_seed = rng.randrange(2**31)
        if episode_seed in seen:
            continue
        seen.add(episode_seed)
        if len(seen) > 20 * episodes + 100:
            raise ConfigError(f"the expert of {name or cls.__name__} succeeded in only {len(rows)} of {len(seen)} episodes")
        episode = play_expert(make_env(cls, env_config, "env_config"), episode_seed, max_steps)
        if (successful_only and not episode.success) or episode.observations[0] in exclude:
            continue
        rows.append({
            "data_source": f"env/{name or cls.__name__}",
            "messages": episode.messages(instruction),
            "extra_info": {"seed": episode_seed, "turns": len(episode.actions), "reward": episode.reward, "success": episode.success},
        })
    return rows


def write_expert_data(rows: list[dict[str, Any]], out_dir: str | Path) -> Path:
    """Write the rows to OUT_DIR/sft_train.parquet; returns the path."""
    import pyarrow as pa  # imported here, as posttrain.tasks.writing does
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sft_train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path
