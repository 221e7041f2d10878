"""Task selectors (`data.selector`): which dataset rows each RL step trains on, Trinity-RFT's
data selectors (trinity/buffer/selector/selector.py) reproduced draw for draw.

A selector is asked for `batch` rows per step and may be told each step's mean reward per row
(`feedback`). Its position is one counter, the rows handed out so far (`taken`); every draw is
seeded by (data.seed, that counter), so a restored selector continues exactly, and an adaptive
one saves its posterior too. Unlike posttrain's own sampler they continue across epochs without
dropping a short tail: a batch that crosses the end of the rows takes the rest and then the first
rows of the next pass, as Trinity-RFT's do. The epoch is `taken // rows`.

- ``sequential``: rows 0, 1, 2, ... in file order, wrapping around.
- ``shuffle``: epoch e reads numpy's ``default_rng(seed + e).permutation(rows)``. Trinity-RFT
  regenerates the permutation before advancing its counter, so there the second epoch repeats the
  first one's order (and a resumed run takes another); posttrain gives every epoch its own, which
  is what Trinity's docstring and its resume describe. Epoch 0 is identical.
- ``random``: each batch is ``default_rng(seed + taken).choice(rows, batch, replace=False)``: no
  repeat inside a batch, none avoided across batches.
- ``offline_easy2hard``: rows sorted by their feature_keys columns (then by row number), highest
  first, read in that order and wrapping around (a higher value means an easier row).
- ``difficulty_based`` (BOTS): a Beta posterior of every row's pass rate (posttrain.data.difficulty),
  updated by `feedback` (mean rewards clipped to [0, 1], as pass rates); each row scores -|target_reward - p| with p its posterior mean or, with
  do_sample, a draw from ``default_rng(seed + taken)``; tau 0 takes the best-scored batch (ties to the
  lower row: Trinity's torch.topk leaves tie order to the kernel), tau > 0 draws rows without
  replacement from softmax(score / tau) with a torch generator seeded by seed + taken.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np
import torch

from posttrain.config.sections.data import TaskSelectorConfig
from posttrain.data.difficulty import BetaState, bots_update, predicted_pass_rates
from posttrain.errors import ConfigError, DataError

SELECTORS: dict[str, Callable[..., "Selector"]] = {}


def register_selector(name: str) -> Callable[[type], type]:
    def add(cls: type) -> type:
        if name in SELECTORS:
            raise ValueError(f"task selector {name!r} is registered twice")
        SELECTORS[name] = cls
        return cls
    return add


def _wrapped(order: np.ndarray | list[int], start: int, batch: int) -> list[int]:
    """`batch` entries of a cyclic `order` from `start` (mod its length)."""
    n = len(order)
    return [int(order[(start + k) % n]) for k in range(batch)]


class Selector:
    """Rows by a fixed rule of (seed, taken); subclasses set `pick`, adaptive ones `feedback`."""

    needs_features = 0  # feature columns it reads: 0 none, -1 one or more, 2 exactly two

    def __init__(self, size: int, cfg: TaskSelectorConfig, seed: int, features: np.ndarray | None):
        self.size, self.cfg, self.seed, self.features = size, cfg, seed, features
        self.taken = 0  # rows handed out so far

    def pick(self, batch: int) -> list[int]:
        raise NotImplementedError

    def next(self, batch: int) -> list[int]:
        rows = self.pick(batch)
        self.taken += batch
        return rows

    def feedback(self, indices: list[int], pass_rates: list[float]) -> None:
        """A step's mean reward per row; the fixed-order selectors ignore it."""

    def state_dict(self) -> dict[str, Any]:
        return {"taken": self.taken}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.taken = int(state["taken"])


@register_selector("sequential")
class SequentialSelector(Selector):
    def pick(self, batch: int) -> list[int]:
        return _wrapped(range(self.size), self.taken, batch)


@register_selector("shuffle")
class ShuffleSelector(Selector):
    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng(self.seed + epoch).permutation(self.size)  # (N,)

    def pick(self, batch: int) -> list[int]:
        rows = []
        for k in range(self.taken, self.taken + batch):
            epoch, at = divmod(k, self.size)
            if not rows or at == 0:  # the first row, or a new epoch inside this batch
                order = self._order(epoch)
            rows.append(int(order[at]))
        return rows


@register_selector("random")
class RandomSelector(Selector):
    def pick(self, batch: int) -> list[int]:
        return [int(i) for i in np.random.default_rng(self.seed + self.taken).choice(self.size, batch, replace=False)]


@register_selector("offline_easy2hard")
class OfflineEasy2HardSelector(Selector):
    needs_features = -1

    def __init__(self, size: int, cfg: TaskSelectorConfig, seed: int, features: np.ndarray | None):
        super().__init__(size, cfg, seed, features)
        # sorted by (feature 1, feature 2, ..., row) and reversed: easiest (highest) first, ties to the later row
        keyed = sorted((tuple(float(v) for v in features[i]) + (i,) for i in range(size)), reverse=True)
        self.order = [k[-1] for k in keyed]

    def pick(self, batch: int) -> list[int]:
        return _wrapped(self.order, self.taken, batch)


@register_selector("difficulty_based")
class DifficultyBasedSelector(Selector):
    needs_features = 2

    def __init__(self, size: int, cfg: TaskSelectorConfig, seed: int, features: np.ndarray | None):
        super().__init__(size, cfg, seed, features)
        self.posterior = BetaState.prior(size, cfg.rho)

    def scores(self) -> np.ndarray:
        """(N,) -|target_reward - p|: highest for rows whose pass rate is nearest the target."""
        p = predicted_pass_rates(self.posterior, np.random.default_rng(self.seed + self.taken), self.cfg.do_sample)
        return -np.abs(self.cfg.target_reward - p)

    def pick(self, batch: int) -> list[int]:
        scores = torch.from_numpy(self.scores())  # (N,) float64
        if self.cfg.tau == 0:
            return torch.sort(scores, descending=True, stable=True).indices[:batch].tolist()
        logits = scores / self.cfg.tau
        probs = torch.softmax(logits - logits.max(), dim=0)  # shifted: exp never overflows
        gen = torch.Generator().manual_seed(self.seed + self.taken)
        return torch.multinomial(probs, batch, replacement=False, generator=gen).tolist()

    def feedback(self, indices: list[int], pass_rates: list[float]) -> None:
        # a mean reward is read as a pass rate: outside [0, 1] (a penalty, a bonus) it would make
        # the Beta parameters negative, where Trinity-RFT's sampler fails; clip it into the range
        rates = np.clip(np.asarray(pass_rates, dtype=np.float64), 0.0, 1.0)
        self.posterior = bots_update(self.posterior, self.features, indices, rates, m=self.cfg.m, lamb=self.cfg.lamb,
                                     adaptive_rho=self.cfg.adaptive_rho)

    def state_dict(self) -> dict[str, Any]:
        return {"taken": self.taken, "posterior": self.posterior.to_json()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.taken = int(state["taken"])
        self.posterior = BetaState.from_json(state["posterior"])


def feature_matrix(dataset: Any, keys: list[str]) -> np.ndarray:
    """(N, K) the feature_keys columns of an RL dataset's rows (in dataset order), as numbers."""
    table, indices = getattr(dataset, "table", None), getattr(dataset, "indices", None)
    if table is None or indices is None:
        raise ConfigError("data.selector.feature_keys: a data.custom_cls dataset has no columns posttrain reads; "
                          "use posttrain's datasets with these columns, or a data.sampler class")
    out = np.zeros((len(indices), len(keys)), dtype=np.float64)
    for k, i in enumerate(indices):
        for j, key in enumerate(keys):
            value = table.get(i, key, setting="data.selector.feature_keys")
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
                raise DataError(f"{table.locate(i, key)}: {value!r} is not a number; data.selector.feature_keys names columns of numbers (e.g. a reference model's pass rate)")
            out[k, j] = float(value)
    return out


class SelectorSampler:
    """The trainer's sampler over a selector: next_batch(), epoch, len(), feedback(), state_dict()."""

    def __init__(self, selector: Selector, name: str, batch_size: int):
        self.selector, self.name, self.batch_size = selector, name, batch_size
        self.last_rows: list[int] = []

    @property
    def epoch(self) -> int:
        return self.selector.taken // self.selector.size

    @property
    def adaptive(self) -> bool:
        """Whether the order depends on feedback (replaying the draws would not reproduce it)."""
        return type(self.selector).feedback is not Selector.feedback

    def __len__(self) -> int:
        """Nominal batches per epoch: the rows over the batch size."""
        return max(1, self.selector.size // self.batch_size)

    def next_batch(self) -> list[int]:
        self.last_rows = self.selector.next(self.batch_size)
        return self.last_rows

    def feedback(self, uids: list[str], group_index: list[str], scores: list[float], data_source: list[str]) -> None:
        """Each row's mean reward over its responses in the last batch (Trinity-RFT's
        pass_rate_calculator), handed to the selector; `uids` are the batch's prompts in the order of
        `last_rows`, `group_index` the prompt each scored response answers (dropped groups absent)."""
        row_of = dict(zip(uids, self.last_rows))
        rewards: dict[int, list[float]] = {}
        for uid, score in zip(group_index, scores):
            rewards.setdefault(row_of[uid], []).append(float(score))
        if rewards:
            self.selector.feedback(list(rewards), [float(np.mean(r)) for r in rewards.values()])

    def state_dict(self) -> dict[str, Any]:
        return {"selector": self.name, "size": self.selector.size, "batch_size": self.batch_size, "seed": self.selector.seed,
                **self.selector.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`; a selector of another type, data, batch or seed cannot continue
        exactly, so a mismatch is a DataError naming what changed."""
        now = {"selector": self.name, "size": self.selector.size, "batch_size": self.batch_size, "seed": self.selector.seed}
        changed = [f"{k}: saved {state.get(k)!r}, now {v!r}" for k, v in now.items() if state.get(k) != v]
        if changed:
            raise DataError("cannot resume the data order: the checkpoint's data.selector state differs (" + "; ".join(changed)
                            + "); resume with the same data and data settings")
        self.selector.load_state_dict(state)


def make_selector_sampler(cfg: Any, dataset: Any) -> SelectorSampler:
    """The data.selector sampler over `dataset` (`cfg` is the data section)."""
    sel, size = cfg.selector, len(dataset)
    batch, key = (cfg.gen_batch_size, "data.gen_batch_size") if cfg.gen_batch_size else (cfg.train_batch_size, "data.train_batch_size")
    cls = SELECTORS[sel.type]
    if cls.needs_features == 0 and sel.feature_keys:
        raise ConfigError(f"data.selector.feature_keys: the {sel.type} selector reads no features; leave it empty")
    if cls.needs_features == -1 and not sel.feature_keys:
        raise ConfigError(f"data.selector.feature_keys: the {sel.type} selector sorts rows by these columns; name at least one")
    if cls.needs_features == 2 and len(sel.feature_keys) != 2:
        raise ConfigError(f"data.selector.feature_keys: the {sel.type} selector takes exactly two columns (a weaker and a stronger "
                          f"reference model's pass rates), got {list(sel.feature_keys)}")
    if sel.type in ("random", "difficulty_based") and batch > size:
        raise ConfigError(f"{key}={batch} is larger than the {size} training examples, and the {sel.type} selector draws a batch "
                          "without repeats; lower it or add data")
    features = feature_matrix(dataset, list(sel.feature_keys)) if sel.feature_keys else None
    return SelectorSampler(cls(size, sel, cfg.seed, features), sel.type, batch)
