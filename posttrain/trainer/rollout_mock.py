"""Dump and replay of a run's explored batches (`trainer.rollout_mock`, ROLL's `rollout_mock`).

A dump run writes each training step's experience (the rollouts with their rewards, in
`Experience.to_bytes`'s form: safetensors and JSON, nothing pickled) to
``<rollout_mock_dir>/train/step_<global step, 6 digits>.experience``. A replay run reads that file in
place of generating and scoring, so it trains on exactly the dumped rollouts: with the same
config and seeds its losses are the dumped run's, and a change to the learning code can be compared
on fixed data. A step that was not dumped fails with the path it looked for.
"""

from __future__ import annotations

from pathlib import Path

from posttrain.buffer.experience import Experience
from posttrain.errors import UserError


class RolloutMock:
    """Where a run's experiences are dumped to or replayed from; `mode` None does nothing."""

    def __init__(self, mode: str | None, folder: str | None, writes: bool):
        self.mode, self.writes = mode, writes  # writes: the main process (every rank holds the whole batch)
        self.folder = Path(folder) / "train" if folder else None

    @property
    def replays(self) -> bool:
        return self.mode == "replay"

    def path(self, step: int) -> Path:
        assert self.folder is not None
        return self.folder / f"step_{step:06d}.experience"

    def dump(self, step: int, experience: Experience) -> None:
        """Write a step's experience (dump mode on the main process; otherwise nothing)."""
        if self.mode != "dump" or not self.writes:
            return
        experience.settle()  # reward.launch_reward_fn_async: the scores must be in the file
        path = self.path(step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(experience.to_bytes())
        tmp.replace(path)  # a killed dump leaves no half-written step behind

    def load(self, step: int) -> Experience:
        """The dumped experience of `step`; a UserError naming the file when it is missing."""
        path = self.path(step)
        if not path.is_file():
            raise UserError(
                f"trainer.rollout_mock=replay: step {step} has no dumped rollouts ({path} does not exist); "
                f"run the same config with trainer.rollout_mock=dump and this trainer.rollout_mock_dir first, for at least {step} steps"
            )
        return Experience.from_bytes(path.read_bytes())
