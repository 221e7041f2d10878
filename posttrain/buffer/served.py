"""The history of a served policy's chat completions (trainer.mode serve, Trinity-RFT's proxy history).

Every completion the server gives is recorded here before its answer leaves: the prompt's token ids,
each choice's token ids and the log-probs the engine sampled them with, and the weights step that
served it. A completion waits until feedback gives it a reward (`feedback`: one reward for the listed
completion ids, all their choices, with the caller's task id as the group), and a commit turns every
rewarded, uncommitted completion into one explored batch of the experience buffer (`commit`), the
rows a `trainer.mode: train` run claims as its next step's batch:

    prompt_ids      the templated prompt, left-padded           (B, P)
    response_ids    the tokens the endpoint returned            (B, T)
    response_mask   1.0 on each of them (EOS included)          (B, T)
    rollout_logprobs the engine's log-probs of them             (B, T)
    scores          the feedback's reward                       (B,)
    group_index     the feedback's task_id (else the completion id: its n choices are one group)

One SQLite file (WAL, shared by the server's threads under one lock). A commit first marks its rows
with the batch number it is about to write, then writes the batch (writing a number again replaces
it); a server that died between the two rewrites the marked batch when it starts again (`recover`),
so a rewarded completion reaches the buffer exactly once. A buffer that cannot be written unmarks the
rows: they wait for the next commit.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch

from posttrain.buffer.experience import Experience
from posttrain.buffer.sqlite import open_store
from posttrain.errors import UserError
from posttrain.records import RolloutBatch

SCHEMA = "posttrain-served-history-1"
_CALLS = ("CREATE TABLE IF NOT EXISTS calls (id TEXT PRIMARY KEY, created REAL NOT NULL, policy_step INTEGER NOT NULL, "
          "prompt TEXT NOT NULL, n INTEGER NOT NULL, choices TEXT NOT NULL, raw_prompt TEXT NOT NULL, reward REAL, task_id TEXT, "
          "run_id INTEGER, batch INTEGER)")


class HistoryError(UserError):
    """The history file cannot be used (another program's, not writable)."""


class UnknownCompletion(KeyError):
    """Feedback named completion ids this history never recorded."""


class ServedHistory:
    """The served completions at `path` (created when missing); safe to call from several threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.lock = threading.Lock()
        self.db = open_store(self.path, SCHEMA, (_CALLS,), "served history", HistoryError, " (explorer.db_url)", check_same_thread=False)

    def close(self) -> None:
        self.db.close()

    def record(self, call_id: str, prompt_ids: list[int], out: RolloutBatch, policy_step: int, raw_prompt: str,
               texts: list[str]) -> None:
        """Keep completion `call_id`: its prompt and each of its choices' tokens, log-probs and text."""
        choices = []
        for i in range(len(out)):
            n = int(out.response_mask[i].sum())  # right-padded after EOS: the first n tokens are the response
            choices.append({"ids": out.response_ids[i, :n].tolist(), "logprobs": out.rollout_logprobs[i, :n].tolist(), "text": texts[i]})
        with self.lock, self.db:
            self.db.execute("INSERT INTO calls (id, created, policy_step, prompt, n, choices, raw_prompt) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (call_id, time.time(), policy_step, json.dumps(prompt_ids), len(choices), json.dumps(choices), raw_prompt))

    def feedback(self, reward: float, call_ids: list[str], task_id: str | None = None, run_id: int = 0) -> dict[str, Any]:
        """Reward the completions `call_ids` (all or none: an unknown id raises `UnknownCompletion`);
        one already rewarded keeps its first reward (Trinity-RFT's rule) and is listed as such."""
        with self.lock, self.db:
            marks = ",".join("?" * len(call_ids))
            found = dict(self.db.execute(f"SELECT id, reward IS NOT NULL FROM calls WHERE id IN ({marks})", call_ids).fetchall())
            unknown = [c for c in call_ids if c not in found]
            if unknown:
                raise UnknownCompletion(unknown)
            fresh = [c for c in dict.fromkeys(call_ids) if not found[c]]
            self.db.executemany("UPDATE calls SET reward = ?, task_id = ?, run_id = ? WHERE id = ?",
                                [(float(reward), task_id, int(run_id), c) for c in fresh])
        return {"rewarded": len(fresh), "already_rewarded": [c for c in dict.fromkeys(call_ids) if found[c]]}

    def counts(self) -> dict[str, int]:
        """Completions recorded, rewarded and waiting for a commit, and committed; with Trinity-RFT's
        names for its /metrics: experiences (choices) recorded and rewarded, and commits made."""
        with self.lock:
            total, ready, committed, choices, rewarded, commits = self.db.execute(
                "SELECT COUNT(*), COALESCE(SUM(reward IS NOT NULL AND batch IS NULL), 0), COALESCE(SUM(batch IS NOT NULL), 0), "
                "COALESCE(SUM(n), 0), COALESCE(SUM(CASE WHEN reward IS NOT NULL THEN n END), 0), "
                "COUNT(DISTINCT batch) FROM calls"
            ).fetchone()
        return {"recorded": int(total), "ready": int(ready), "committed": int(committed),
                "rollout/total_experience_count": int(choices), "rollout/ready_experience_count": int(rewarded),
                "explore_step_num": int(commits), "rollout/model_0/total_request_count": int(total)}

    def commit(self, buffer, transform: Callable[[Experience], Experience] = lambda e: e) -> tuple[int, int]:
        """Write every rewarded, uncommitted completion as the buffer's next batch, through
        `transform` (the experience pipeline); (batch number, rows written), or (0, 0) when none
        waits. A failing write leaves them uncommitted and raises."""
        with self.lock:
            batch = buffer.explored() + 1
            with self.db:
                self.db.execute("UPDATE calls SET batch = ? WHERE reward IS NOT NULL AND batch IS NULL", (batch,))
            experience = self._experience(batch)
            if experience is None:
                return 0, 0
            try:
                experience = transform(experience)
                buffer.write(batch, experience)
            except BaseException:
                with self.db:
                    self.db.execute("UPDATE calls SET batch = NULL WHERE batch = ?", (batch,))
                raise
            return batch, len(experience.batch)

    def recover(self, buffer, transform: Callable[[Experience], Experience] = lambda e: e) -> list[int]:
        """Write again the batches a commit marked but did not write (a crash between the two)."""
        with self.lock:
            lost = [int(b) for (b,) in self.db.execute("SELECT DISTINCT batch FROM calls WHERE batch > ? ORDER BY batch", (buffer.explored(),))]
            for b in lost:
                buffer.write(b, transform(self._experience(b)))
        return lost

    def _experience(self, batch: int) -> Experience | None:
        rows = self.db.execute(
            "SELECT id, policy_step, prompt, choices, raw_prompt, reward, task_id, run_id FROM calls WHERE batch = ? ORDER BY created, id",
            (batch,)).fetchall()
        if not rows:
            return None
        groups: dict[str, list[tuple]] = {}  # the rows of one group sit next to each other (GRPO's groups)
        for row in rows:
            groups.setdefault(row[6] if row[6] is not None else row[0], []).append(row)
        prompts, responses, logprobs, steps, meta, scores, texts = [], [], [], [], [], [], []
        for group, members in groups.items():
            for call_id, step, prompt, choices, raw_prompt, reward, task_id, run_id in members:
                for choice in json.loads(choices):
                    prompts.append(json.loads(prompt))
                    responses.append(choice["ids"])
                    logprobs.append(choice["logprobs"])
                    steps.append(step)
                    scores.append(reward)
                    texts.append(choice["text"])
                    meta.append((group, raw_prompt, {"completion_id": call_id, "task_id": task_id, "run_id": run_id}))
        out = RolloutBatch(
            prompt_ids=_pad(prompts, 0, left=True, dtype=torch.long),  # (B, P)
            prompt_mask=_pad([[1.0] * len(p) for p in prompts], 0.0, left=True, dtype=torch.float32),  # (B, P)
            response_ids=_pad(responses, 0, left=False, dtype=torch.long),  # (B, T)
            response_mask=_pad([[1.0] * len(r) for r in responses], 0.0, left=False, dtype=torch.float32),  # (B, T)
            rollout_logprobs=_pad(logprobs, 0.0, left=False, dtype=torch.float32),  # (B, T)
            weights_version=torch.tensor(steps, dtype=torch.long),  # (B,)
            group_index=[m[0] for m in meta], data_source=["serve"] * len(meta), ground_truth=[None] * len(meta),
            extra_info=[m[2] for m in meta], raw_prompt=[m[1] for m in meta],
        )
        score_t = torch.tensor(scores, dtype=torch.float32)  # (B,)
        metrics = {"serve/rows": float(len(meta)), "serve/completions": float(len(rows))}
        # the oldest weights in the batch: the trainer's async/staleness counts from them
        return Experience(out, score_t, texts, reward_metrics=metrics, policy_step=min(steps))


def _pad(rows: list[list[Any]], value: Any, left: bool, dtype: torch.dtype) -> torch.Tensor:
    width = max(1, max(len(r) for r in rows))  # an empty response still has one (masked) column
    return torch.tensor([([value] * (width - len(r)) + r) if left else (r + [value] * (width - len(r))) for r in rows], dtype=dtype)
