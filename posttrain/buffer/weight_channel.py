"""Trainer -> explorer weights over a process group: `synchronizer.sync_method` nccl and memory.

The trainer's rank 0 keeps each state it publishes in host memory and serves it to every explorer
process over a process group of two (itself, rank 0, and that explorer, rank 1), which a TCP store
on the trainer joins. `memory` moves the tensors with gloo, from host memory over TCP; `nccl` with
NCCL, from the trainer's GPU to the explorer's, when the trainer runs on CUDA (on a CPU run gloo,
as `memory`). The announcements stay files beside them (`latest.txt`, the sync requests of
`posttrain.trainer.sync`), as with `checkpoint` (`posttrain.buffer.weights`), so the synchronizer
is the same for every method: only the tensors travel another way, and none is written to disk.

One request: the explorer sets ``req/<i>/<n>`` to the step it wants in the store; the trainer's
serving thread for explorer i answers ``meta/<i>/<n>`` (the tensors' names, shapes and dtypes, by
dtype bucket, or why it cannot) and broadcasts the buckets as bytes. A state is kept until every
explorer process has taken it or a newer one (the newest always), so an explorer never asks for
weights the trainer has dropped: the explorer's rank 0 takes a step, then orders its other ranks to
take the same one (`posttrain.trainer.explorer_crew`).

A rerun finds the files of the run it resumes: the trainer writes a new ``channel.json`` (address
and a token the store holds) before a new ``latest.txt``, and an explorer that reaches a store with
another token, or none, reads the file again until the new trainer is there.
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from posttrain.buffer.sqlite import BufferError
from posttrain.buffer.weights import WeightFiles
from posttrain.files import atomic_write_text

CHANNEL = "channel.json"
BUCKET_BYTES = 256 << 20  # bytes per broadcast: few calls for a large model, a bounded extra copy
_POLL_S = 0.005  # how often a serving thread looks for a request (a blocking store wait logs each timeout)


def backend_for(method: str, device: torch.device | str) -> str:
    """The process group's backend: NCCL for `nccl` (alias online) on a CUDA trainer, gloo otherwise."""
    return "nccl" if method in ("nccl", "online") and torch.device(device).type == "cuda" else "gloo"


def pair_group(store, rank: int, backend: str, timeout_s: float, device: torch.device):
    """A process group of two over `store` (this process is `rank`): the trainer's end and one other
    process's (an explorer process here, the reference crew's rank 0 in posttrain.trainer.reference_crew)."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        torch.cuda.set_device(device)
        return dist.ProcessGroupNCCL(store, rank, 2, options)
    return dist.ProcessGroupGloo(store, rank, 2, timeout)


def broadcast(group, tensor: torch.Tensor, root: int = 0) -> None:
    """`tensor` from the pair's rank `root` to the other (in place on the receiving end)."""
    options = dist.BroadcastOptions()
    options.rootRank = root
    group.broadcast([tensor], options).wait()


def _buckets(state: dict[str, torch.Tensor]) -> list[list[str]]:
    """The names in broadcast order: by dtype, in runs of at most BUCKET_BYTES (a larger tensor alone)."""
    out: list[list[str]] = []
    for dtype in dict.fromkeys(t.dtype for t in state.values()):
        run, size = [], 0
        for name, t in state.items():
            if t.dtype != dtype:
                continue
            nbytes = t.numel() * t.element_size()
            if run and size + nbytes > BUCKET_BYTES:
                out.append(run)
                run, size = [], 0
            run.append(name)
            size += nbytes
        if run:
            out.append(run)
    return out


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))


class WeightServer:
    """The trainer's side. Every trainer rank holds one (the synchronizer reads `dir` and `latest()`);
    rank 0 alone publishes, and its first `publish` opens the store and the serving threads."""

    def __init__(self, directory: str | Path, explorers: int, backend: str, device: torch.device | str, timeout_s: float):
        self.files = WeightFiles(directory)
        self.dir = self.files.dir
        self.explorers, self.backend, self.device, self.timeout_s = explorers, backend, torch.device(device), timeout_s
        self.held: dict[int, dict[str, torch.Tensor]] = {}
        self.taken = [-1] * explorers  # the newest step each explorer process has taken
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.store = None
        self.threads: list[threading.Thread] = []
        self.error: BaseException | None = None  # a serving thread's failure, raised on the next publish

    # ---- the WeightFiles interface the synchronizer uses
    def latest(self) -> int | None:
        return self.files.latest()

    def steps(self) -> list[int]:
        with self.lock:
            return sorted(self.held)

    def publish(self, state: dict[str, torch.Tensor], step: int) -> None:
        """Make the weights after trainer step `step` the newest: kept in host memory, announced in
        `latest.txt` (written after the state is ready to serve)."""
        if self.error is not None:
            raise BufferError(f"{self.dir}: serving the weights to an explorer process failed: {self.error}") from self.error
        copy = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}
        with self.lock:
            self.held[step] = copy
            self._prune()
        if self.store is None:
            self._open()
        self.files.announce(step)

    def close(self) -> None:
        self.closed.set()
        for thread in self.threads:
            thread.join(timeout=5)
        self.held.clear()

    # ---- serving
    def _open(self) -> None:
        self.store = open_channel(self.dir / CHANNEL, self.timeout_s, backend=self.backend)
        for i in range(self.explorers):
            thread = threading.Thread(target=self._serve, args=(i,), name=f"weights-to-explorer-{i}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def _prune(self) -> None:
        """Drop the states older than every explorer's last take, keeping the newest."""
        newest, floor = max(self.held), min(self.taken)
        for step in [s for s in self.held if s < floor and s != newest]:
            del self.held[step]

    def _wait(self, key: str) -> bool:
        """Wait for `key` in the store; False once the server is closed."""
        while not self.closed.is_set():
            if self.store.check([key]):
                return True
            time.sleep(_POLL_S)
        return False

    def _serve(self, i: int) -> None:
        try:
            if not self._wait(f"hello/{i}"):
                return
            group = pair_group(dist.PrefixStore(f"pair/{i}/", self.store), 0, self.backend, self.timeout_s, self.device)
            n = 0
            while self._wait(f"req/{i}/{n}"):
                self._answer(group, i, n, int(self.store.get(f"req/{i}/{n}")))
                n += 1
        except BaseException as err:  # noqa: BLE001 - reported on the trainer's next publish
            if not self.closed.is_set():
                self.error = err

    def _answer(self, group, i: int, n: int, step: int) -> None:
        with self.lock:
            state = self.held.get(step)
            if state is not None:
                self.taken[i] = max(self.taken[i], step)
                self._prune()
            held = sorted(self.held)
        if state is None:
            self.store.set(f"meta/{i}/{n}", json.dumps({"error": f"the trainer holds the weights of steps {held}, not of step {step}"}))
            return
        buckets = _buckets(state)
        meta = [[[name, list(state[name].shape)] for name in names] + [str(state[names[0]].dtype)] for names in buckets]
        self.store.set(f"meta/{i}/{n}", json.dumps({"step": step, "buckets": meta}))
        for names in buckets:
            flat = torch.cat([state[name].reshape(-1) for name in names]).view(torch.uint8)
            broadcast(group, flat.to(self.device) if self.backend == "nccl" else flat)


class WeightClient:
    """An explorer process's side: `load(step)` takes the weights of a published step from the
    trainer; `latest()` and `dir` are the announcements' (files)."""

    def __init__(self, directory: str | Path, index: int, timeout_s: float, device: torch.device | str = "cpu"):
        self.files = WeightFiles(directory)
        self.dir = self.files.dir
        self.index, self.timeout_s, self.device = index, timeout_s, torch.device(device)
        self.store = self.group = self.backend = None
        self.n = 0

    def latest(self) -> int | None:
        return self.files.latest()

    def load(self, step: int) -> dict[str, torch.Tensor]:
        self._connect()
        i, n = self.index, self.n
        self.store.set(f"req/{i}/{n}", str(step))
        try:
            self.store.wait([f"meta/{i}/{n}"], datetime.timedelta(seconds=self.timeout_s))
        except dist.DistStoreError:
            raise BufferError(f"{self.dir}: the trainer did not answer the request for the weights of step {step} within "
                              f"synchronizer.sync_timeout={self.timeout_s:g} s; check the trainer's log") from None
        meta = json.loads(self.store.get(f"meta/{i}/{n}"))
        self.n += 1
        if "error" in meta:
            raise BufferError(f"{self.dir}: explorer process {i} asked for the weights of step {step}: {meta['error']}")
        state: dict[str, torch.Tensor] = {}
        on = self.device if self.backend == "nccl" else torch.device("cpu")
        for *entries, dtype_name in meta["buckets"]:
            dtype = _dtype(dtype_name)
            sizes = [int(torch.Size(shape).numel()) for _, shape in entries]
            flat = torch.empty(sum(sizes), dtype=dtype, device=on)
            broadcast(self.group, flat.view(torch.uint8))
            for (name, shape), part in zip(entries, flat.split(sizes)):
                state[name] = part.view(shape)
        return state

    def _connect(self) -> None:
        """Join the current trainer's store and open this process's pair group (once)."""
        if self.group is not None:
            return
        deadline = time.monotonic() + self.timeout_s
        seen = None
        while True:
            info = read_channel(self.dir / CHANNEL)
            if info is not None:
                seen = info
                store = reach_store(info, self.timeout_s)
                if store is not None:
                    break
            if time.monotonic() > deadline:
                raise BufferError(f"{self.dir / CHANNEL}: no trainer to take the weights from within synchronizer.sync_timeout="
                                  f"{self.timeout_s:g} s (last address: {seen}); check the trainer's log")
            time.sleep(0.2)
        self.store, self.backend = store, info["backend"]
        store.set(f"hello/{self.index}", "1")
        self.group = pair_group(dist.PrefixStore(f"pair/{self.index}/", store), 1, self.backend, self.timeout_s, self.device)



def open_channel(path: Path, timeout_s: float, **extra) -> dist.TCPStore:
    """A TCP store on this process, its address written to the json file `path` with a fresh token
    the store holds (and `extra`'s entries): what the other end of a channel reads to join it. A
    rerun writes a new file, and an end that reaches an older address finds another token there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    host = os.environ.get("POSTTRAIN_SYNC_HOST") or os.environ.get("MASTER_ADDR") or "127.0.0.1"
    store = dist.TCPStore(host, 0, None, is_master=True, timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    token = secrets.token_hex(8)
    store.set("token", token)
    atomic_write_text(path, json.dumps({"host": host, "port": store.port, "token": token, **extra}))
    return store


def read_channel(path: Path) -> dict | None:
    """The json `open_channel` wrote at `path`; None while there is none (or it is being replaced)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def reach_store(info: dict, timeout_s: float):
    """The store at `info`'s address (a channel file's json) if it is the one that wrote `info` (a
    rerun's trainer replaces an older file), else None."""
    try:
        wait = datetime.timedelta(seconds=min(5.0, timeout_s))  # one try: the caller's loop tries again
        store = dist.TCPStore(info["host"], int(info["port"]), None, is_master=False, timeout=wait)
        return store if store.get("token").decode() == info["token"] else None
    except (RuntimeError, dist.DistStoreError):  # nobody there (a finished or killed trainer's address)
        return None
