"""Text renders of finished episodes, one file per episode (ROLL's `render_save_dir`).

ROLL saved the frames its environments render (RGB arrays) of every validation episode as a GIF
named ``<env>_<tag>_<score>.gif``. posttrain's environments render as text (the FrozenLake or
Sokoban map is the observation), so an episode's frames are its observations, written in order
with the action between each two: the first frame is the prompt (instruction and first
observation), each later one what the environment answered an action.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from posttrain.rollout.trajectory import Trajectory


def episode_text(traj: Trajectory, decode: Callable[[list[int]], str]) -> str:
    """One episode as text frames: a header, the prompt, then each action and the observation after it."""
    head = (f"# tag {traj.tag}, seed {traj.seed}, group {traj.group}: reward {traj.reward:g}, success {traj.success}, "
            f"{len(traj.turns)} actions" + (", truncated" if traj.truncated else "") + (f", failed: {traj.failed}" if traj.failed else ""))
    out = [head, "", "## frame 0", decode(traj.prompt_ids).strip()]
    for i, turn in enumerate(traj.turns, 1):
        out += ["", f"## action {i} (reward {turn.reward:g}{'' if turn.valid else ', invalid'})", turn.action_text.strip()]
        start, end = turn.observation
        if traj.turn_prompts and i < len(traj.observations):  # a window prompt mode: the response holds actions only
            out += ["", f"## frame {i}", traj.observations[i].strip()]
        elif end > start:  # the last action gets no answer
            out += ["", f"## frame {i}", decode(traj.response_ids[start:end]).strip()]
    return "\n".join(out) + "\n"


def write_episode_renders(directory: Path, trajs: Sequence[Trajectory], decode: Callable[[list[int]], str]) -> list[Path]:
    """Write every episode to ``<directory>/<index>_<tag>_<reward>.txt`` (ROLL's file names, as text)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, traj in enumerate(trajs):
        path = directory / f"{i:03d}_{traj.tag}_{traj.reward:.1f}.txt"
        path.write_text(episode_text(traj, decode), encoding="utf-8")
        paths.append(path)
    return paths
