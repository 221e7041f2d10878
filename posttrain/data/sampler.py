"""Batches of dataset indices, in an order fixed by (seed, epoch), whose position can be saved.

Why not torch's DataLoader + RandomSampler: resuming a run must give exactly the batches an
uninterrupted run would have given. Here the order of epoch e is a pure function of (seed, e),
and the state is two integers (epoch, batches already taken in it), so a restored sampler
rebuilds the same permutation and skips to the same place, including at an epoch boundary.

With ``drop_last`` (training, as in verl) the incomplete last batch of an epoch is dropped, so
every step sees exactly ``batch_size`` prompts; validation keeps it.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

from posttrain.config.sections.data import DataConfig
from posttrain.errors import ConfigError, DataError


class BatchSampler:
    """Index batches over ``range(size)``; `state_dict` holds the epoch and the position in it."""

    def __init__(self, size: int, batch_size: int, *, seed: int = 0, shuffle: bool = True, drop_last: bool = True):
        if size < 1 or batch_size < 1:
            raise ValueError(f"BatchSampler needs size >= 1 and batch_size >= 1, got {size} and {batch_size}")
        if drop_last and size < batch_size:
            raise ValueError(f"{size} examples make no full batch of {batch_size} (drop_last)")
        self.size, self.batch_size, self.seed = size, batch_size, seed
        self.shuffle, self.drop_last = shuffle, drop_last
        self.epoch = 0
        self.position = 0  # batches of `epoch` already handed out
        self._cache: tuple[int, list[int]] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(self.size, self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def order(self, epoch: int) -> list[int]:
        """The index order of `epoch`: a permutation seeded by (seed, epoch), or 0..size-1."""
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        indices = list(range(self.size))
        if self.shuffle:
            # A string seed goes through sha512 in `random.seed`: the same order on every
            # platform and Python version, and unrelated orders for neighbouring epochs.
            random.Random(f"posttrain-data:{self.seed}:{epoch}").shuffle(indices)
        self._cache = (epoch, indices)  # one shuffle per epoch, not per batch
        return indices

    def batch(self, epoch: int, position: int) -> list[int]:
        """Batch number `position` of `epoch`."""
        start = position * self.batch_size
        return self.order(epoch)[start : start + self.batch_size]

    def _roll_epoch(self) -> None:
        if self.position >= len(self):
            self.epoch += 1
            self.position = 0

    def next_batch(self) -> list[int]:
        """The next batch, moving into the next epoch when this one is used up (endless)."""
        self._roll_epoch()
        out = self.batch(self.epoch, self.position)
        self.position += 1
        return out

    def __iter__(self) -> Iterator[list[int]]:
        """The rest of the current epoch (all of it on a fresh sampler); the state advances as each
        batch is handed out, so a `state_dict` taken between batches resumes after the last one."""
        self._roll_epoch()
        epoch, order = self.epoch, self.order(self.epoch)
        while self.epoch == epoch and self.position < len(self):
            start = self.position * self.batch_size
            self.position += 1
            yield order[start : start + self.batch_size]

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly here, plus what must match on resume."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "size": self.size,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`. A sampler over other data or batches cannot continue exactly,
        so a mismatch is a DataError naming what changed."""
        changed = [f"{k}: saved {state[k]!r}, now {getattr(self, k)!r}" for k in ("size", "batch_size", "seed", "shuffle", "drop_last") if k in state and state[k] != getattr(self, k)]
        if changed:
            raise DataError("cannot resume the data order: the checkpoint's sampler differs (" + "; ".join(changed) + "); resume with the same data files and data settings")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def make_sampler(cfg: DataConfig, size: int, *, split: str = "train") -> BatchSampler:
    """The sampler `cfg` describes: training batches of train_batch_size, shuffled by `shuffle`
    and `seed`, last incomplete batch dropped; validation batches of val_batch_size (null: all
    rows at once), shuffled by `validation_shuffle`, nothing dropped."""
    if split == "train":
        # data.gen_batch_size: the prompts of a round of dynamic sampling (algorithm.filter_groups)
        batch, key = (cfg.gen_batch_size, "data.gen_batch_size") if cfg.gen_batch_size else (cfg.train_batch_size, "data.train_batch_size")
        if size < batch:
            raise ConfigError(f"{key}={batch} is larger than the {size} training examples; lower it or add data")
        return BatchSampler(size, batch, seed=cfg.seed, shuffle=cfg.shuffle, drop_last=True)
    if split == "val":
        return BatchSampler(size, cfg.val_batch_size or size, seed=cfg.seed, shuffle=cfg.validation_shuffle, drop_last=False)
    raise ValueError(f"unknown split {split!r}; expected 'train' or 'val'")
