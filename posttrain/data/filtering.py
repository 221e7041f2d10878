"""Every example's token length, measured when a dataset is built, held against its limit.

The limit is `data.max_prompt_length` for RL prompts and `data.max_length` for SFT sequences and
each side of a DPO pair. What a longer example does is decided here, once, before training:

- `data.filter_overlong_prompts` (RL): the row is dropped; the build says how many were;
- `data.truncation: error`: the build fails on the first such row, naming file, row and length
  (so a long prompt cannot end a run when the sampler first draws it, steps in);
- `left` / `right` / `middle`: the example is cut when it is read (`prompts.kept_ends`), and the
  build says once how many rows are cut and which part of them is kept.

Measuring means templating and tokenising every row, which is slow for big files in one process;
`data.filter_overlong_prompts_workers > 1` splits the rows into contiguous chunks handled by that
many processes. The result is the same whatever the number of workers. Processes are forked where
the platform can (the dataset and tokenizer are inherited, not pickled); elsewhere they are spawned
and receive the dataset pickled once each.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Protocol, Sequence

from posttrain.data.prompts import kept_ends, too_long
from posttrain.errors import DataError

logger = logging.getLogger(__name__)

_WORKER_DATASET: Any = None  # set in each worker process by `_init_worker`

# What the kept part of a cut example is, by data.truncation.
KEPT = {"left": "the last {n}", "right": "the first {n}", "middle": "the first {head} and the last {tail}"}


class Measured(Protocol):
    """A dataset whose rows have a token length to hold against a limit (the three in `dataset`)."""

    indices: list[int]
    limit_key: str  # the config key of the limit
    limit: int
    unit: str  # what one row is: "prompts", "sequences", "pairs"
    hint: str  # extra fix to offer in the error ("" or the filter_overlong_prompts hint)

    def length(self, i: int) -> tuple[int, str]: ...  # (tokens, column) of global row i, untruncated

    def locate(self, i: int, column: str) -> str: ...

    def select(self, indices: Sequence[int]) -> Any: ...


def _init_worker(dataset: Measured) -> None:
    global _WORKER_DATASET
    _WORKER_DATASET = dataset


def _chunk_lengths(rows: Sequence[int]) -> list[tuple[int, str]]:
    assert _WORKER_DATASET is not None
    return [_WORKER_DATASET.length(i) for i in rows]


def row_lengths(dataset: Measured, rows: Sequence[int], workers: int = 1) -> list[tuple[int, str]]:
    """(untruncated length, column) of each global row in `rows`, in order."""
    if workers <= 1 or len(rows) < 2:
        return [dataset.length(i) for i in rows]
    workers = min(workers, len(rows))
    size = -(-len(rows) // workers)  # ceil: one contiguous chunk per worker
    chunks = [list(rows[s : s + size]) for s in range(0, len(rows), size)]
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(dataset,)) as pool:
        return [n for part in pool.map(_chunk_lengths, chunks) for n in part]


def prompt_lengths(dataset: Measured, rows: Sequence[int], workers: int = 1) -> list[int]:
    """Untruncated length of each global row in `rows`, in order."""
    return [n for n, _ in row_lengths(dataset, rows, workers)]


def check_lengths(dataset: Measured, truncation: str, *, drop: bool = False, workers: int = 1,
                  setting: str = "data.train_files") -> Any:
    """Measure every row of `dataset` and apply the policy above; returns the dataset to use."""
    lengths = row_lengths(dataset, dataset.indices, workers)
    over = [(i, n, column) for i, (n, column) in zip(dataset.indices, lengths) if n > dataset.limit]
    if not over:
        return dataset
    i, n, column = over[0]
    total, limit = len(dataset.indices), dataset.limit
    if drop:
        dropped = {i for i, _, _ in over}
        kept = dataset.select([k for k in dataset.indices if k not in dropped])
        check_not_empty(kept, setting)
        logger.warning("%s: dropped %d of %d %s longer than %s=%d tokens (data.filter_overlong_prompts)",
                       setting, len(over), total, dataset.unit, dataset.limit_key, limit)
        return kept
    if truncation == "error":
        more = f" ({len(over) - 1} more rows of {setting} are too long as well)" if len(over) > 1 else ""
        raise DataError(too_long(dataset.locate(i, column), n, limit, dataset.limit_key, dataset.hint) + more)
    head, tail = kept_ends(n, limit, truncation)
    logger.warning(
        "%s: %d of %d %s are longer than %s=%d tokens (longest %d; first at %s); data.truncation=%s keeps %s tokens of each",
        setting, len(over), total, dataset.unit, dataset.limit_key, limit, max(m for _, m, _ in over),
        dataset.locate(i, column), truncation, KEPT[truncation].format(n=limit, head=head, tail=tail),
    )
    return dataset


def check_not_empty(dataset: Sequence[Any], setting: str) -> None:
    """An empty dataset is a DataError (used after filtering)."""
    if len(dataset) == 0:
        raise DataError(f"{setting}: no examples left; every prompt is longer than data.max_prompt_length (raise it, or turn off data.filter_overlong_prompts)")
