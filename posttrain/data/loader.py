"""Reading a batch's examples, in this process or in `data.dataloader_num_workers` others.

An example is templated and tokenised when it is read (`posttrain.data.dataset`), so a batch of
train_batch_size prompts is that many chat-template renders and tokenizer calls. With workers > 0
a pool of that many processes, started once by the first batch, reads each batch in contiguous
chunks, one per worker, and the examples come back in the batch's order: the same examples as in
one process, made elsewhere. The pool only reads the batch the sampler has already chosen; it
never reads ahead, so the sampler's saved state stays the exact point a resume continues from
(verl's DataLoader workers prefetch, which its resumable sampler state then has to account for).
Processes are forked where the platform can (the dataset is inherited), else spawned; a worker only
renders and tokenises text, so being forked after the models loaded is safe (it touches no device).
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Sequence

_WORKER_DATASET: Any = None  # set in each worker process by `_init_worker`


def _init_worker(dataset: Any) -> None:
    global _WORKER_DATASET
    _WORKER_DATASET = dataset


def _read_chunk(rows: Sequence[int]) -> list[Any]:
    assert _WORKER_DATASET is not None
    return [_WORKER_DATASET[k] for k in rows]


class ExampleReader:
    """``reader(rows)`` -> ``[dataset[k] for k in rows]``, in `workers` processes when workers > 0."""

    def __init__(self, dataset: Any, workers: int = 0):
        self.dataset, self.workers = dataset, workers
        self.pool: ProcessPoolExecutor | None = None  # started by the first batch: a role that reads none starts none

    def __call__(self, rows: Sequence[int]) -> list[Any]:
        if self.workers == 0 or len(rows) < 2:
            return [self.dataset[k] for k in rows]
        if self.pool is None:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context(method),
                                            initializer=_init_worker, initargs=(self.dataset,))
        size = -(-len(rows) // self.workers)  # ceil: one contiguous chunk per worker
        chunks = [list(rows[s : s + size]) for s in range(0, len(rows), size)]
        return [example for part in self.pool.map(_read_chunk, chunks) for example in part]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
