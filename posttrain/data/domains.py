"""Domain mixing: training batches drawn by domain with fixed probabilities (`data.domain_interleave_probs`).

A run over several domains (math, code, sort, ...) reads all their files into one dataset; each row
has a tag (the `data.reward_fn_key` column: verl's data_source, ROLL's tag). A domain is a key of
`domain_interleave_probs`: the name of a reward worker (standing for every tag in its tag_included,
as ROLL's domains are its reward workers) or a tag itself. Each prompt of a batch picks its domain
at random with those probabilities (normalised to sum to 1), then takes the next row of that
domain's own shuffled stream; a stream that runs out starts its next epoch, so a small domain
repeats while a large one is still in its first pass.

Why a draw per prompt rather than ROLL's fixed count per batch (int(p x batch) for every domain but
the last, which takes the rest): with small batches the fixed count rounds far from the requested
share (0.7/0.3 of 4 prompts gives 2/2), while independent draws match the shares on average at any
batch size. Everything is a pure function of (seed, batch number, domain epoch), so the state is a
few integers: a resumed run draws exactly the batches an uninterrupted one would have drawn.
"""

from __future__ import annotations

import random
from typing import Any

from posttrain.config.sections.data import DataConfig
from posttrain.data import rows
from posttrain.data.sampler import BatchSampler, make_sampler
from posttrain.errors import ConfigError, DataError


def row_tags(dataset: Any, setting: str) -> list[tuple[str, str]]:
    """(tag, where) of every example of an RL dataset, in dataset order: posttrain's datasets read
    the tag column and name file and row; a data.custom_cls dataset is asked for each example."""
    table, cfg = getattr(dataset, "table", None), getattr(dataset, "cfg", None)
    if table is not None and isinstance(cfg, DataConfig) and hasattr(dataset, "indices"):
        return [(rows.data_source(table, i, cfg), table.locate(i, cfg.reward_fn_key)) for i in dataset.indices]
    return [(dataset[k].data_source, f"{setting}: example {k} of the data.custom_cls dataset") for k in range(len(dataset))]


def tag_locations(dataset: Any, setting: str) -> dict[str, str]:
    """Each tag of a dataset and where it first occurs ("<file>: row 3, column 'data_source'")."""
    out: dict[str, str] = {}
    for tag, where in row_tags(dataset, setting):
        out.setdefault(tag, where)
    return out


def domain_of_tags(probs: dict[str, float], worker_tags: dict[str, list[str]]) -> dict[str, str]:
    """tag -> domain: a domain named like a reward worker stands for that worker's tags, any other
    domain for the tag of its name. A tag in two domains is a ConfigError.

    >>> domain_of_tags({"math": 0.5, "posttrain/sort": 0.5}, {"math": ["gsm8k", "aime"]})
    {'gsm8k': 'math', 'aime': 'math', 'posttrain/sort': 'posttrain/sort'}
    """
    out: dict[str, str] = {}
    for domain in probs:
        for tag in worker_tags.get(domain, [domain]):
            if tag in out:
                raise ConfigError(
                    f"data.domain_interleave_probs: tag {tag!r} belongs to both domains {out[tag]!r} and {domain!r} "
                    "(a domain named like a reward worker stands for its tag_included); keep it in one"
                )
            out[tag] = domain
    return out


class DomainSampler:
    """Batches of dataset positions drawn by domain (module docstring); `state_dict` resumes exactly."""

    def __init__(self, domains: dict[str, list[int]], probs: dict[str, float], batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 setting: str = "data.domain_interleave_probs"):
        if batch_size < 1 or any(not rows_ for rows_ in domains.values()) or set(domains) != set(probs):
            raise ValueError("DomainSampler needs batch_size >= 1 and rows for every domain it has a probability for")
        self.domains = {name: list(positions) for name, positions in domains.items()}
        total = sum(probs.values())
        self.names = list(probs)
        self.weights = [probs[n] / total for n in self.names]  # normalised: the shares of a batch
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle
        self.setting = setting  # the key that asked for this sampler, named in resume errors
        self.size = sum(len(v) for v in self.domains.values())
        self.batches = 0  # batches handed out
        self.streams = {name: [0, 0] for name in self.names}  # domain -> [epoch, rows taken in it]
        self._orders: dict[str, tuple[int, list[int]]] = {}

    def __len__(self) -> int:
        """Batches per (nominal) epoch: the dataset's rows over the batch size, as with drop_last."""
        return max(1, self.size // self.batch_size)

    @property
    def epoch(self) -> int:
        """Nominal epochs done: rows handed out over the dataset's rows (domains cycle on their own)."""
        return self.batches * self.batch_size // self.size

    def next_batch(self) -> list[int]:
        """The next batch: a domain per prompt, then the next row of each picked domain's stream."""
        # A string seed goes through sha512: the same draws on every platform, unrelated per batch.
        rng = random.Random(f"posttrain-domains:{self.seed}:{self.batches}")
        picks = rng.choices(self.names, weights=self.weights, k=self.batch_size)
        self.batches += 1
        return [self._next_row(name) for name in picks]

    def _next_row(self, name: str) -> int:
        stream = self.streams[name]
        if stream[1] >= len(self.domains[name]):  # this domain's pass is over: its next epoch
            stream[0], stream[1] = stream[0] + 1, 0
        row = self._order(name, stream[0])[stream[1]]
        stream[1] += 1
        return row

    def _order(self, name: str, epoch: int) -> list[int]:
        cached = self._orders.get(name)
        if cached is not None and cached[0] == epoch:
            return cached[1]
        order = list(self.domains[name])
        if self.shuffle:
            random.Random(f"posttrain-domain:{self.seed}:{name}:{epoch}").shuffle(order)
        self._orders[name] = (epoch, order)
        return order

    def state_dict(self) -> dict[str, Any]:
        """The position (batches, each domain's epoch and offset) and what must match on resume."""
        return {
            "batches": self.batches,
            "streams": {n: list(s) for n, s in self.streams.items()},
            "domains": {n: len(v) for n, v in self.domains.items()},
            "weights": dict(zip(self.names, self.weights)),
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`; a sampler over other domains, shares or batches cannot, so a
        mismatch is a DataError naming what changed."""
        now = self.state_dict()
        if "streams" not in state:
            raise DataError(f"cannot resume the data order: the checkpoint was saved without {self.setting}; resume with the same data settings")
        changed = [f"{k}: saved {state[k]!r}, now {now[k]!r}" for k in ("domains", "weights", "batch_size", "seed", "shuffle") if state.get(k) != now[k]]
        if changed:
            raise DataError(f"cannot resume the data order: the checkpoint's {self.setting} sampler differs (" + "; ".join(changed) + "); resume with the same data files and data settings")
        self.batches = int(state["batches"])
        self.streams = {n: [int(e), int(p)] for n, (e, p) in state["streams"].items()}


def make_train_sampler(cfg: DataConfig, dataset: Any, worker_tags: dict[str, list[str]]) -> BatchSampler | DomainSampler:
    """The training sampler: by domain when `cfg.domain_interleave_probs` is set (every row's tag must
    belong to a domain, every domain must have rows), else `make_sampler`'s."""
    probs = dict(cfg.domain_interleave_probs)
    if not probs:
        return make_sampler(cfg, len(dataset), split="train")
    domain_of = domain_of_tags(probs, worker_tags)
    domains: dict[str, list[int]] = {name: [] for name in probs}
    for k, (tag, where) in enumerate(row_tags(dataset, "data.train_files")):
        if tag not in domain_of:
            raise DataError(
                f"{where}: tag {tag!r} is in no domain of data.domain_interleave_probs ({', '.join(probs)}); "
                "add it (or the reward worker that claims it) with a probability, 0 to never draw it"
            )
        domains[domain_of[tag]].append(k)
    empty = [name for name, positions in domains.items() if not positions]
    if empty:
        raise DataError(f"data.domain_interleave_probs: no row of data.train_files has a tag of domain(s) {', '.join(empty)}; check the tags (data.reward_fn_key column) or drop the domain")
    drawn = {name: p for name, p in probs.items() if p > 0}  # a domain at 0 is never drawn
    return DomainSampler({n: domains[n] for n in drawn}, drawn, cfg.gen_batch_size or cfg.train_batch_size, seed=cfg.seed, shuffle=cfg.shuffle)


def worker_tag_map(workers: dict[str, Any]) -> dict[str, list[str]]:
    """reward.workers as {worker name: its tag_included}."""
    return {name: list(w.tag_included) for name, w in workers.items()}
