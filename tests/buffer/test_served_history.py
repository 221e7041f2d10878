"""The served history (trainer.mode serve): records, feedback, commits, the experience pipeline at a
commit, and the recovery of a commit cut between marking and writing."""

from __future__ import annotations

import pytest
import torch

from posttrain.buffer.served import HistoryError, ServedHistory, UnknownCompletion
from posttrain.buffer.sqlite import ExperienceBuffer
from posttrain.config.load import load_config
from posttrain.records import RolloutBatch
from posttrain.trainer.serving import pipeline


def engine_rows(responses: list[list[int]], logprob: float) -> RolloutBatch:
    """What an engine returns for one prompt with len(responses) choices (right-padded)."""
    B, T = len(responses), max(len(r) for r in responses)
    ids = torch.tensor([r + [0] * (T - len(r)) for r in responses])  # (B, T)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (T - len(r)) for r in responses])  # (B, T)
    return RolloutBatch(prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2), response_ids=ids,
                        response_mask=mask, rollout_logprobs=mask * logprob, weights_version=torch.zeros(B, dtype=torch.long),
                        group_index=["u"] * B, data_source=[""] * B, ground_truth=[None] * B, extra_info=[{}] * B, raw_prompt=[""] * B)


@pytest.fixture
def history(tmp_path):
    h = ServedHistory(tmp_path / "history.sqlite")
    h.record("c1", [5, 6, 7], engine_rows([[1, 2, 3], [4]], -0.5), 0, "p1", ["abc", "d"])
    h.record("c2", [8], engine_rows([[9, 9]], -1.0), 3, "p2", ["ee"])
    yield h
    h.close()


def test_a_commit_writes_the_rewarded_completions_as_one_padded_batch(history, tmp_path):
    with pytest.raises(UnknownCompletion):
        history.feedback(1.0, ["c1", "nope"])
    assert history.counts()["ready"] == 0  # all or nothing
    assert history.feedback(2.0, ["c2"], task_id="t") == {"rewarded": 1, "already_rewarded": []}
    buffer = ExperienceBuffer(tmp_path / "buffer.sqlite")
    assert history.commit(buffer) == (1, 1)
    assert history.commit(buffer) == (0, 0)  # c1 has no reward yet
    history.feedback(0.5, ["c1"])
    assert history.commit(buffer) == (2, 2)
    e = buffer.claim(2, 0.0)
    assert e.batch.prompt_ids.tolist() == [[5, 6, 7], [5, 6, 7]] and e.batch.prompt_mask.tolist() == [[1.0] * 3] * 2
    assert e.batch.response_ids.tolist() == [[1, 2, 3], [4, 0, 0]]
    assert e.batch.response_mask.tolist() == [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    assert e.batch.rollout_logprobs.tolist() == [[-0.5, -0.5, -0.5], [-0.5, 0.0, 0.0]]
    assert e.scores.tolist() == [0.5, 0.5] and e.batch.group_index == ["c1", "c1"] and e.texts == ["abc", "d"]
    first = buffer.claim(1, 0.0)
    assert first.batch.prompt_ids.tolist() == [[8]] and first.policy_step == 3 and first.batch.group_index == ["t"]
    assert history.counts()["rollout/total_experience_count"] == 3 and history.counts()["explore_step_num"] == 2
    buffer.close()


def test_the_experience_pipeline_runs_at_the_commit(history, tmp_path):
    cfg = load_config(None, ["model.path=m", "data.train_files=x.parquet",
                             "data_processor.experience_pipeline.operators=[{name: response_length_filter, args: {min_length: 2}}]"])
    history.feedback(1.0, ["c1", "c2"])
    buffer = ExperienceBuffer(tmp_path / "buffer.sqlite")
    assert history.commit(buffer, pipeline(cfg)) == (1, 2)  # c1's one-token choice is dropped
    e = buffer.claim(1, 0.0)
    assert e.texts == ["abc", "ee"] and e.scores.tolist() == [1.0, 1.0]
    assert e.reward_metrics["experience_pipeline/0_response_length_filter/filtered"] == 1.0
    buffer.close()


def test_a_commit_cut_before_its_write_is_written_when_the_server_starts_again(history, tmp_path):
    history.feedback(1.0, ["c1"])
    history.db.execute("UPDATE calls SET batch = 1 WHERE reward IS NOT NULL")  # marked, then the process died
    buffer = ExperienceBuffer(tmp_path / "buffer.sqlite")
    assert buffer.explored() == 0
    assert history.recover(buffer) == [1] and buffer.explored() == 1 and history.recover(buffer) == []
    buffer.close()


def test_a_failed_write_leaves_the_completions_for_the_next_commit(history, tmp_path):
    class Full:
        def explored(self):
            return 0

        def write(self, batch, experience):
            raise OSError("no space left on device")

    history.feedback(1.0, ["c1"])
    with pytest.raises(OSError):
        history.commit(Full())
    assert history.counts()["ready"] == 1


def test_another_programs_database_is_refused(tmp_path):
    import sqlite3

    db = sqlite3.connect(str(tmp_path / "other.sqlite"))
    db.execute("CREATE TABLE users (name TEXT)")
    db.close()
    with pytest.raises(HistoryError, match="something else"):
        ServedHistory(tmp_path / "other.sqlite")
