"""The experience buffer on disk: one SQLite database shared by the explorer and the trainer.

One row per explored batch, numbered by the explorer (batch 1, 2, ...), written in one transaction
(a batch is in the buffer whole or not at all). The trainer claims batch k for its step k by
recording (step, batch) in `claims`; the claims of every step after the checkpoint a trainer
resumes from are undone (`release_after`). So an experience the explorer wrote is either trained on
in a checkpointed step or still in the buffer after a crash of either side, and nothing is trained
on twice unless the buffer replays (`posttrain.buffer.replay`: then the claims say which step read
which batch, and how often). The explorer resumes after its last written batch (`explored`); with
a `capacity` it waits for the trainer to read before it writes more (`wait_for_room`).

The file is in WAL mode (readers never block the writer; two processes on one machine, or on a
network file system that supports SQLite locking), and every connection waits for locks instead
of failing (`busy_timeout`). A `meta` table names the schema: a database of another program, or
of another version of this one, is refused with one message instead of being written over.

Alongside the experiences the explorer writes the evaluations it ran (`evaluations`), which the
trainer logs with its own metrics, and each side records its progress (`progress`) so the other
can say, when it gives up waiting, what it was waiting for.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Sequence

from posttrain.buffer.experience import Experience
from posttrain.buffer.replay import Replay, Stored, pick
from posttrain.errors import UserError

SCHEMA = "posttrain-experience-buffer-2"
_TABLES = (
    "CREATE TABLE IF NOT EXISTS experiences (batch INTEGER PRIMARY KEY, policy_step INTEGER NOT NULL, "
    "created REAL NOT NULL, groups INTEGER NOT NULL, evicted INTEGER NOT NULL DEFAULT 0, payload BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS claims (step INTEGER PRIMARY KEY, batch INTEGER NOT NULL, at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS evaluations (policy_step INTEGER PRIMARY KEY, metrics TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS progress (side TEXT PRIMARY KEY, state TEXT NOT NULL, at REAL NOT NULL)",
)


class BufferError(UserError):
    """The experience buffer cannot be used (another schema, not writable) or gave nothing in time."""


def open_store(path: Path, schema: str, tables: Sequence[str], what: str, error: type[UserError], hint: str = "",
               **connect: Any) -> sqlite3.Connection:
    """A WAL-mode SQLite file at `path` whose `meta` table names `schema`, with `tables` (CREATE TABLE
    IF NOT EXISTS statements) created when new. A database of another program or of another schema,
    or a file that cannot be opened or created, is one `error` naming `path` and `what` the file is
    for; `hint` (e.g. " (explorer.db_url)") says which key gives another path. `connect` goes to
    sqlite3.connect (e.g. check_same_thread)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), timeout=60.0, isolation_level=None, **connect)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA busy_timeout=60000")
        found = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if found and "meta" not in found:
            raise error(f"{path}: an SQLite database of something else (tables {', '.join(sorted(found))}); give the {what} "
                        f"its own file{hint}")
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (schema,))
            for statement in tables:
                db.execute(statement)
        (stored,) = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    except sqlite3.DatabaseError as err:
        raise error(f"{path}: cannot be used as the {what} ({err}); give another path{hint}") from None
    except OSError as err:
        raise error(f"{path}: cannot create the {what} ({err.strerror or err})") from None
    if stored != schema:
        db.close()
        raise error(f"{path}: a database of schema {stored!r}, not the {what}'s {schema!r}; give a new path{hint}")
    return db


class ExperienceBuffer:
    """A SQLite experience buffer at `path` (created when missing)."""

    def __init__(self, path: str | Path, *, poll_s: float = 0.05):
        self.path = Path(path).expanduser()
        self.poll_s = poll_s
        self.db = open_store(self.path, SCHEMA, _TABLES, "experience buffer", BufferError)

    def close(self) -> None:
        self.db.close()

    # ---------------------------------------------------------------- explorer side
    def write(self, batch: int, experience: Experience) -> None:
        """Store explored batch number `batch` (1-based); writing a number again replaces it (an
        explorer that died after writing it and before recording that it did)."""
        groups = len(set(experience.batch.group_index))
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO experiences (batch, policy_step, created, groups, evicted, payload) VALUES (?, ?, ?, ?, 0, ?)",
                (batch, experience.policy_step, time.time(), groups, sqlite3.Binary(experience.to_bytes())),
            )

    def unread_groups(self) -> int:
        """Prompt groups of the stored batches no step has read yet."""
        (n,) = self.db.execute(
            "SELECT COALESCE(SUM(groups), 0) FROM experiences WHERE evicted = 0 AND batch NOT IN (SELECT batch FROM claims)"
        ).fetchone()
        return int(n)

    def wait_for_room(self, groups: int, capacity: int, timeout_s: float) -> float:
        """Wait until `groups` more prompt groups fit under `capacity` unread ones; returns the seconds waited."""
        return wait_for_room(self, groups, capacity, timeout_s)

    def explored(self) -> int:
        """The last batch number written (0 when none)."""
        (last,) = self.db.execute("SELECT COALESCE(MAX(batch), 0) FROM experiences").fetchone()
        return int(last)

    def read(self, batch: int) -> Experience:
        """Stored batch `batch`, unclaimed (the explorer's resume reads its last one)."""
        (payload,) = self.db.execute("SELECT payload FROM experiences WHERE batch = ?", (batch,)).fetchone()
        return Experience.from_bytes(bytes(payload))

    def write_evaluation(self, policy_step: int, metrics: dict[str, float]) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO evaluations VALUES (?, ?)", (policy_step, json.dumps(metrics)))

    # ---------------------------------------------------------------- trainer side
    def claim(self, step: int, timeout_s: float, waiting_for: str = "the explorer", replay: Replay = Replay()) -> Experience:
        """The batch trainer step `step` trains on, waiting up to `timeout_s` for one: batch `step`,
        or with replay the highest-priority usable one (`posttrain.buffer.replay.pick`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.db:
                batch = self._choose(step, replay)
                if batch is not None:
                    (payload,) = self.db.execute("SELECT payload FROM experiences WHERE batch = ?", (batch,)).fetchone()
                    self.db.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?)", (step, batch, time.time()))
                    return Experience.from_bytes(bytes(payload))
            if time.monotonic() > deadline:
                raise read_timed_out(self, step, timeout_s, waiting_for, replay)
            time.sleep(self.poll_s)

    def _choose(self, step: int, replay: Replay) -> int | None:
        if not replay.enable:
            found = self.db.execute("SELECT batch FROM experiences WHERE batch = ?", (step,)).fetchone()
            return None if found is None else step
        rows = self.db.execute(
            "SELECT e.batch, e.policy_step, e.groups, COUNT(c.step), MAX(c.at) FROM experiences e "
            "LEFT JOIN claims c ON c.batch = e.batch WHERE e.evicted = 0 GROUP BY e.batch"
        ).fetchall()
        batch, evicted = pick([Stored(*r) for r in rows], replay, time.time())
        if evicted:  # past the capacity: dropped for good, as a full priority queue drops its lowest item
            self.db.executemany("UPDATE experiences SET evicted = 1 WHERE batch = ?", [(b,) for b in evicted])
        return batch

    def release_after(self, step: int) -> int:
        """Undo the claims of steps after `step` (a trainer resuming from its checkpoint of `step`
        trains them again); returns how many were released."""
        with self.db:
            cur = self.db.execute("DELETE FROM claims WHERE step > ?", (step,))
        return cur.rowcount

    def claimed(self) -> list[tuple[int, int | None]]:
        """(batch, first claiming step or None) of every stored batch, in batch order."""
        return [(int(b), s) for b, s in self.db.execute(
            "SELECT e.batch, MIN(c.step) FROM experiences e LEFT JOIN claims c ON c.batch = e.batch GROUP BY e.batch ORDER BY e.batch")]

    def claims(self) -> list[tuple[int, int]]:
        """(step, batch) of every claim, in step order: with replay a batch may appear more than once."""
        return [(int(s), int(b)) for s, b in self.db.execute("SELECT step, batch FROM claims ORDER BY step")]

    def evicted(self) -> list[int]:
        """Batches a replaying buffer dropped past its capacity."""
        return [int(b) for (b,) in self.db.execute("SELECT batch FROM experiences WHERE evicted = 1 ORDER BY batch")]

    def evaluations_through(self, policy_step: int) -> dict[int, dict[str, float]]:
        """The explorer's evaluations of the weights of steps <= `policy_step`, by step."""
        rows = self.db.execute("SELECT policy_step, metrics FROM evaluations WHERE policy_step <= ? ORDER BY policy_step", (policy_step,))
        return {int(s): json.loads(m) for s, m in rows}

    # ---------------------------------------------------------------- both sides
    def report(self, side: str, state: str) -> None:
        """Record what `side` (explorer/trainer) is doing, for the other side's messages."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO progress VALUES (?, ?, ?)", (side, state, time.time()))

    def state(self, side: str) -> str:
        row = self.db.execute("SELECT state, at FROM progress WHERE side = ?", (side,)).fetchone()
        if row is None:
            return "not started"
        return f"{row[0]} ({time.time() - row[1]:.0f} s ago)"


def read_timed_out(buffer, step: int, timeout_s: float, waiting_for: str, replay: Replay) -> BufferError:
    """The trainer's error (either storage) when no batch it may read arrived within `timeout_s`,
    naming what the explorer wrote and last did."""
    wanted = f"explored batch {step}" if not replay.enable else "a batch it may read (replay: none fresh, none out of its reuse cooldown)"
    return BufferError(
        f"{buffer.path}: trainer step {step} waited {timeout_s:g} s for {wanted}, which {waiting_for} has not written "
        f"({buffer.explored()} written; explorer: {buffer.state('explorer')}); "
        "raise buffer.trainer_input.experience_buffer.max_read_timeout or check the explorer"
    )


def wait_for_room(buffer, groups: int, capacity: int, timeout_s: float) -> float:
    """The explorer's wait (either storage) until `groups` more prompt groups fit under `capacity`
    unread ones; returns the seconds waited (0.0 when there was room at once), or raises naming what
    the trainer last did."""
    if buffer.unread_groups() + groups <= capacity:
        return 0.0
    start = time.monotonic()
    while buffer.unread_groups() + groups > capacity:
        if time.monotonic() - start > timeout_s:
            raise BufferError(
                f"{buffer.path}: the buffer holds {buffer.unread_groups()} unread prompt groups and the next batch's {groups} "
                f"exceed its capacity {capacity}; the explorer waited {timeout_s:g} s for the trainer to read "
                f"(trainer: {buffer.state('trainer')}); raise buffer.trainer_input.experience_buffer.capacity"
            )
        time.sleep(buffer.poll_s)
    return time.monotonic() - start
