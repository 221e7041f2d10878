"""The experience buffer as JSON-lines files (`storage_type: file`), with the SQLite buffer's contract.

A directory of append-only logs, each written by one side only, so no two processes ever write the
same file and no lock is needed:

    meta.json            the schema name (another directory, or another version, is refused)
    experiences.jsonl    explorer: one line per explored batch (its number, policy step, prompt
                         groups, decoded responses and scores to read, and the whole experience as
                         base64 of its byte form, `posttrain.buffer.experience`)
    evaluations.jsonl    explorer: its validations, by policy step
    claims.jsonl         trainer: {"step", "batch", "at"} per claim; {"release_after": s} undoes the
                         claims of steps after s; {"evict": b} drops batch b (replay past capacity)
    progress_<side>.json each side's last report, replaced atomically

Every line is flushed and fsynced before the call returns. A line cut by a crash (no newline at the
end) is ignored by readers and cut off by its writer before it appends again, so a batch is in the
buffer whole or not at all; a batch written twice (an explorer that died before recording it) is
read as its last line. The rules of what is trained when (claims, release on resume, replay,
capacity) are the SQLite buffer's (`posttrain.buffer.sqlite`).
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

from posttrain.buffer.experience import Experience
from posttrain.buffer.replay import Replay, Stored, pick
from posttrain.buffer.sqlite import BufferError, read_timed_out, wait_for_room
from posttrain.files import atomic_write_text

SCHEMA = "posttrain-experience-buffer-jsonl-1"


class _Log:
    """One append-only JSON-lines file: complete records in order, read incrementally."""

    def __init__(self, path: Path):
        self.path, self.offset, self.records, self.checked = path, 0, [], False

    def read(self) -> list[dict[str, Any]]:
        if self.path.is_file():
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line without its newline is still being written (or was cut)
            for line in data[:end].splitlines():
                if line.strip():
                    self.records.append(json.loads(line))
            self.offset += end
        return self.records

    def append(self, record: dict[str, Any]) -> None:
        if not self.checked:  # cut a line a crash left unfinished before appending after it
            if self.path.is_file():
                data = self.path.read_bytes()
                if data and not data.endswith(b"\n"):
                    with self.path.open("r+b") as f:
                        f.truncate(data.rfind(b"\n") + 1)
            self.checked = True
        with self.path.open("ab") as f:
            f.write(json.dumps(record).encode("utf-8") + b"\n")
            f.flush()
            os.fsync(f.fileno())


class JsonlBuffer:
    """A JSON-lines experience buffer in directory `path` (created when missing)."""

    def __init__(self, path: str | Path, *, poll_s: float = 0.05):
        self.path = Path(path).expanduser()
        self.poll_s = poll_s
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            meta = self.path / "meta.json"
            if not meta.is_file():
                others = sorted(p.name for p in self.path.iterdir())
                if others:
                    raise BufferError(f"{self.path}: a directory of other files ({', '.join(others[:3])}); give the experience buffer its own directory")
                atomic_write_text(meta, json.dumps({"schema": SCHEMA}))
            schema = json.loads(meta.read_text(encoding="utf-8")).get("schema")
        except OSError as err:
            raise BufferError(f"{self.path}: cannot create the experience buffer ({err.strerror or err})") from None
        except json.JSONDecodeError:
            raise BufferError(f"{self.path}/meta.json is not an experience buffer's; give another path") from None
        if schema != SCHEMA:
            raise BufferError(f"{self.path}: an experience buffer of schema {schema!r}, not {SCHEMA!r}; give a new path")
        self.experiences = _Log(self.path / "experiences.jsonl")
        self.evaluations = _Log(self.path / "evaluations.jsonl")
        self.claim_log = _Log(self.path / "claims.jsonl")

    def close(self) -> None:
        pass  # every write is complete and synced when it returns

    # ---------------------------------------------------------------- derived state
    def _batches(self) -> dict[int, dict[str, Any]]:
        return {int(r["batch"]): r for r in self.experiences.read()}  # a rewritten batch: its last line

    def _claims(self) -> tuple[dict[int, tuple[int, float]], set[int]]:
        """({step: (batch, at)} in force, evicted batches), replaying the claim log."""
        claims: dict[int, tuple[int, float]] = {}
        evicted: set[int] = set()
        for r in self.claim_log.read():
            if "release_after" in r:
                claims = {s: c for s, c in claims.items() if s <= r["release_after"]}
            elif "evict" in r:
                evicted.add(int(r["evict"]))
            else:
                claims[int(r["step"])] = (int(r["batch"]), float(r["at"]))
        return claims, evicted

    # ---------------------------------------------------------------- explorer side
    def write(self, batch: int, experience: Experience) -> None:
        self.experiences.append({
            "batch": batch, "policy_step": experience.policy_step, "created": time.time(),
            "groups": len(set(experience.batch.group_index)), "texts": experience.texts,
            "scores": experience.scores.tolist(), "experience": base64.b64encode(experience.to_bytes()).decode("ascii"),
        })

    def explored(self) -> int:
        return max(self._batches(), default=0)

    def unread_groups(self) -> int:
        claims, evicted = self._claims()
        read = {b for b, _ in claims.values()} | evicted
        return sum(int(r["groups"]) for b, r in self._batches().items() if b not in read)

    def wait_for_room(self, groups: int, capacity: int, timeout_s: float) -> float:
        return wait_for_room(self, groups, capacity, timeout_s)

    def read(self, batch: int) -> Experience:
        """Stored batch `batch`, unclaimed (the explorer's resume reads its last one)."""
        return Experience.from_bytes(base64.b64decode(self._batches()[batch]["experience"]))

    def write_evaluation(self, policy_step: int, metrics: dict[str, float]) -> None:
        self.evaluations.append({"policy_step": policy_step, "metrics": metrics})

    # ---------------------------------------------------------------- trainer side
    def claim(self, step: int, timeout_s: float, waiting_for: str = "the explorer", replay: Replay = Replay()) -> Experience:
        deadline = time.monotonic() + timeout_s
        while True:
            batch = self._choose(step, replay)
            if batch is not None:
                self.claim_log.append({"step": step, "batch": batch, "at": time.time()})
                data = base64.b64decode(self._batches()[batch]["experience"])
                return Experience.from_bytes(data)
            if time.monotonic() > deadline:
                raise read_timed_out(self, step, timeout_s, waiting_for, replay)
            time.sleep(self.poll_s)

    def _choose(self, step: int, replay: Replay) -> int | None:
        batches = self._batches()
        if not replay.enable:
            return step if step in batches else None
        claims, evicted = self._claims()
        uses: dict[int, list[float]] = {}
        for b, at in claims.values():
            uses.setdefault(b, []).append(at)
        items = [Stored(b, int(r["policy_step"]), int(r["groups"]), len(uses.get(b, [])), max(uses[b]) if b in uses else None)
                 for b, r in batches.items() if b not in evicted]
        batch, dropped = pick(items, replay, time.time())
        for b in dropped:
            self.claim_log.append({"evict": b})
        return batch

    def release_after(self, step: int) -> int:
        claims, _ = self._claims()
        released = sum(1 for s in claims if s > step)
        if released:
            self.claim_log.append({"release_after": step})
        return released

    def claims(self) -> list[tuple[int, int]]:
        return sorted((s, b) for s, (b, _) in self._claims()[0].items())

    def claimed(self) -> list[tuple[int, int | None]]:
        first: dict[int, int] = {}
        for s, b in self.claims():
            first.setdefault(b, s)
        return [(b, first.get(b)) for b in sorted(self._batches())]

    def evicted(self) -> list[int]:
        return sorted(self._claims()[1])

    def evaluations_through(self, policy_step: int) -> dict[int, dict[str, float]]:
        found = {int(r["policy_step"]): r["metrics"] for r in self.evaluations.read()}
        return {s: m for s, m in sorted(found.items()) if s <= policy_step}

    # ---------------------------------------------------------------- both sides
    def report(self, side: str, state: str) -> None:
        atomic_write_text(self.path / f"progress_{side}.json", json.dumps({"state": state, "at": time.time()}))

    def state(self, side: str) -> str:
        path = self.path / f"progress_{side}.json"
        if not path.is_file():
            return "not started"
        row = json.loads(path.read_text(encoding="utf-8"))
        return f"{row['state']} ({time.time() - row['at']:.0f} s ago)"
