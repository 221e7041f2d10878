"""`data.sampler`: a user's sampler (curriculum) class, with verl's interface.

The class comes from a Python file (`class_path`) by name (`class_name`) and is built as
``cls(data_source=dataset, data_config=data_config)``, the training dataset and posttrain's `data`
section, as verl builds its `AbstractSampler`s. Like a torch `Sampler[int]` it is iterable: each
pass yields dataset positions 0..len-1 in the order it chooses, and one pass is one epoch. posttrain
takes `data.train_batch_size` positions per step from it (the last short batch of a pass dropped,
as with drop_last), and starts a new pass when one ends.

A class with an ``update(batch)`` method is a curriculum sampler (verl's
`AbstractCurriculumSampler`): after each step's rollouts are scored, posttrain calls it with a
`SamplerFeedback` holding the dataset position and the score of every response, so the sampler can
reorder what comes next (verl hands its whole batch; posttrain hands these typed fields). The
sampler is asked for positions one batch at a time, after the previous step's update, so it
always decides with the latest scores; data.dataloader_num_workers only reads the batch it chose,
never one ahead, so unlike verl it may be combined with a curriculum.

Resume: a sampler with ``state_dict()`` / ``load_state_dict(state)`` is saved and restored through
them (JSON data, kept in the checkpoint's trainer_state.json; its state must say where its current pass stands, as torchdata's stateful samplers do: its
next ``iter()`` continues there); without them posttrain rebuilds it and replays the passes and
positions already taken, which is exact for a sampler whose order depends only on how it was built
(a seeded shuffle), not on updates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator

from posttrain.config.sections.data import DataConfig
from posttrain.data.custom import load_class
from posttrain.errors import ConfigError, DataError


@dataclass(frozen=True)
class SamplerFeedback:
    """What a curriculum sampler's ``update`` gets after a step: one entry per scored response."""

    positions: list[int]  # dataset position of the prompt each response answers (what the sampler yielded)
    scores: list[float]  # the response's reward
    data_source: list[str]  # the prompt's tag (data.reward_fn_key)


class UserSampler:
    """Batches of positions from a user's sampler class (module docstring); resumable."""

    def __init__(self, sampler: Any, size: int, batch_size: int, where: str):
        self.sampler, self.size, self.batch_size, self.where = sampler, size, batch_size, where
        self.epoch = 0
        self.position = 0  # positions of this pass already handed out
        self.last_rows: list[int] = []
        self._iter: Iterator[Any] | None = None

    @property
    def adaptive(self) -> bool:
        """A curriculum that saves its state: its order depends on the updates it got."""
        return hasattr(self.sampler, "update") and hasattr(self.sampler, "state_dict")

    def __len__(self) -> int:
        """Nominal batches per pass: the dataset's rows over the batch size (drop_last)."""
        return max(1, self.size // self.batch_size)

    def _take(self) -> int | None:
        if self._iter is None:
            self._iter = iter(self.sampler)
        try:
            k = next(self._iter)
        except StopIteration:
            return None
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < self.size:
            raise DataError(f"{self.where}: yielded {k!r}; a sampler yields dataset positions, integers in 0..{self.size - 1}")
        self.position += 1
        return k

    def next_batch(self) -> list[int]:
        """The next train_batch_size positions; a pass that cannot fill the batch ends the epoch."""
        rows: list[int] = []
        fresh_pass = self.position == 0
        while len(rows) < self.batch_size:
            k = self._take()
            if k is None:  # the pass is over; its short tail is dropped
                if fresh_pass:  # this whole pass could not fill one batch: no pass ever will
                    raise DataError(f"{self.where}: a whole pass yielded {len(rows)} positions, fewer than data.train_batch_size={self.batch_size}")
                self.epoch, self.position, self._iter, rows, fresh_pass = self.epoch + 1, 0, None, [], True
                continue
            rows.append(k)
        self.last_rows = rows
        return rows

    def feedback(self, uids: list[str], group_index: list[str], scores: list[float], data_source: list[str]) -> None:
        """Hand the scored responses of the last batch to the sampler's ``update``, if it has one.
        `uids` are the batch's prompt uids in the order of `last_rows`; `group_index` the uid each
        response answers (rows a filter dropped are simply absent)."""
        update = getattr(self.sampler, "update", None)
        if update is None:
            return
        position_of = dict(zip(uids, self.last_rows))
        update(SamplerFeedback([position_of[g] for g in group_index], list(scores), list(data_source)))

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"epoch": self.epoch, "position": self.position, "size": self.size, "batch_size": self.batch_size}
        if hasattr(self.sampler, "state_dict"):
            state["user"] = self.sampler.state_dict()
            try:  # it is written into the checkpoint's trainer_state.json
                json.dumps(state["user"])
            except (TypeError, ValueError) as e:
                raise DataError(f"{self.where}: state_dict() must return JSON data (lists, dicts, numbers, strings) for the "
                                f"checkpoint's trainer_state.json: {e}") from e
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`: through the sampler's own load_state_dict, else by replaying."""
        changed = [f"{k}: saved {state.get(k)!r}, now {getattr(self, k)!r}" for k in ("size", "batch_size") if state.get(k) != getattr(self, k)]
        if changed or "position" not in state:
            raise DataError("cannot resume the data order: the checkpoint's data.sampler state differs (" + "; ".join(changed) + "); resume with the same data and data settings")
        self.epoch, self._iter = int(state["epoch"]), None
        if "user" in state and hasattr(self.sampler, "load_state_dict"):
            # the sampler's own state says where its pass stands (torchdata's stateful samplers
            # count what they yielded): its next iter() continues there, nothing is skipped here
            self.sampler.load_state_dict(state["user"])
            self.position = int(state["position"])
            return
        for _ in range(self.epoch):  # replay whole passes, then the taken part of this one
            for _ in iter(self.sampler):
                pass
        self.position = 0
        for _ in range(int(state["position"])):
            self._take()


def make_user_sampler(cfg: DataConfig, dataset: Any) -> UserSampler:
    """The data.sampler class built over `dataset`; a bad path, name or object is a ConfigError."""
    spec = dict(cfg.sampler)
    unknown = sorted(set(spec) - {"class_path", "class_name"})
    if unknown:
        raise ConfigError(f"data.sampler: unknown key(s) {unknown}; it takes class_path (a Python file) and class_name")
    path, name = spec.get("class_path"), spec.get("class_name")
    if not path:
        raise ConfigError("data.sampler.class_path: empty; give the Python file that defines the sampler class, or leave data.sampler empty")
    cls = load_class(path, name, key="data.sampler", keys=("class_path", "class_name"), what="sampler")
    where = f"data.sampler: {name} from {path}"
    try:
        sampler = cls(data_source=dataset, data_config=cfg)
    except Exception as e:  # the user's constructor: one line naming it, not a traceback
        raise ConfigError(f"{where}: building it as {name}(data_source=dataset, data_config=data) failed: {type(e).__name__}: {e}") from e
    if not hasattr(sampler, "__iter__"):
        raise ConfigError(f"{where}: a sampler must be iterable (yield dataset positions), like torch.utils.data.Sampler")
    return UserSampler(sampler, len(dataset), cfg.train_batch_size, where)
