"""`data.filter_overlong_prompts`: drop prompts longer than `max_prompt_length` at build time.

Every prompt must be templated and tokenised to know its length, which is slow for big files in
one process; `workers > 1` splits the rows into contiguous chunks handled by that many processes.
The result is the same whatever the number of workers: the kept rows keep their order.
Processes are forked where the platform can (the dataset and tokenizer are inherited, not
pickled); elsewhere they are spawned and receive the dataset pickled once each.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Sequence

from posttrain.data.dataset import RLDataset, check_not_empty

_WORKER_DATASET: RLDataset | None = None  # set in each worker process by `_init_worker`


def _init_worker(dataset: RLDataset) -> None:
    global _WORKER_DATASET
    _WORKER_DATASET = dataset


def _chunk_lengths(rows: Sequence[int]) -> list[int]:
    assert _WORKER_DATASET is not None
    return [_WORKER_DATASET.prompt_length(i) for i in rows]


def prompt_lengths(dataset: RLDataset, rows: Sequence[int], workers: int = 1) -> list[int]:
    """Untruncated prompt length of each global row in `rows`, in order."""
    if workers <= 1 or len(rows) < 2:
        return [dataset.prompt_length(i) for i in rows]
    workers = min(workers, len(rows))
    size = -(-len(rows) // workers)  # ceil: one contiguous chunk per worker
    chunks = [list(rows[s : s + size]) for s in range(0, len(rows), size)]
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(dataset,)) as pool:
        return [n for part in pool.map(_chunk_lengths, chunks) for n in part]


def filter_overlong(dataset: RLDataset, max_prompt_length: int, *, workers: int = 1, setting: str = "data.train_files") -> RLDataset:
    """A dataset over the same rows without those whose prompt exceeds `max_prompt_length`."""
    lengths = prompt_lengths(dataset, dataset.indices, workers)
    kept = [i for i, n in zip(dataset.indices, lengths) if n <= max_prompt_length]
    filtered = dataset.select(kept)
    check_not_empty(filtered, setting)
    return filtered
