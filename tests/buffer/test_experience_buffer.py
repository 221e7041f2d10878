"""The experience buffer and the published weights of a decoupled run, as components."""

from __future__ import annotations

import sqlite3
import threading

import pytest
import torch

from posttrain.buffer.experience import Experience
from posttrain.buffer.sqlite import BufferError, ExperienceBuffer
from posttrain.buffer.weights import WeightFiles
from posttrain.errors import UserError
from posttrain.records import RolloutBatch


def experience(policy_step: int = 0, rows: int = 4) -> Experience:
    g = torch.Generator().manual_seed(policy_step)
    batch = RolloutBatch(
        prompt_ids=torch.randint(0, 50, (rows, 3), generator=g), prompt_mask=torch.ones(rows, 3),
        response_ids=torch.randint(0, 50, (rows, 5), generator=g), response_mask=torch.ones(rows, 5),
        rollout_logprobs=torch.randn(rows, 5, generator=g), weights_version=torch.full((rows,), policy_step),
        group_index=[f"p{i // 2}" for i in range(rows)], data_source=["posttrain/sort"] * rows,
        ground_truth=["123", ["a", 1], None, {"x": 2.5}][:rows], extra_info=[{"i": i} for i in range(rows)],
        raw_prompt=[None] * rows,
    )
    return Experience(batch, torch.arange(rows, dtype=torch.float32), [f"t{i}" for i in range(rows)],
                      {"reward/failures": 0.0}, {"timing/gen_s": 0.5}, policy_step)


def test_an_experience_survives_its_byte_form():
    e = experience(3)
    back = Experience.from_bytes(e.to_bytes())
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "rollout_logprobs", "weights_version"):
        assert torch.equal(getattr(back.batch, name), getattr(e.batch, name)), name
    assert back.batch.ground_truth == e.batch.ground_truth and back.batch.extra_info == e.batch.extra_info
    assert back.batch.group_index == e.batch.group_index and back.batch.old_logprobs is None
    assert torch.equal(back.scores, e.scores) and back.texts == e.texts and back.policy_step == 3
    assert (back.reward_metrics, back.explore_metrics) == (e.reward_metrics, e.explore_metrics)


def test_a_value_json_cannot_hold_is_one_clear_error():
    e = experience()
    e.batch.extra_info[0] = {"when": object()}
    with pytest.raises(UserError, match="a per-row field holds a value JSON cannot write"):
        e.to_bytes()


def test_claims_are_released_after_the_resumed_step_and_nothing_is_claimed_twice(tmp_path):
    buf = ExperienceBuffer(tmp_path / "b.sqlite")
    for b in (1, 2, 3):
        buf.write(b, experience(b - 1))
    assert buf.explored() == 3
    assert buf.claim(1, 1.0).policy_step == 0 and buf.claim(2, 1.0).policy_step == 1
    assert buf.claimed() == [(1, 1), (2, 2), (3, None)]
    assert buf.release_after(1) == 1  # a trainer resumed from its checkpoint of step 1
    assert buf.claimed() == [(1, 1), (2, None), (3, None)]
    other = ExperienceBuffer(tmp_path / "b.sqlite")  # a second process sees the same rows
    assert other.claim(2, 1.0).policy_step == 1 and other.claimed()[1] == (2, 2)


def test_a_claim_waits_for_the_explorer_then_names_what_it_last_did(tmp_path):
    buf = ExperienceBuffer(tmp_path / "b.sqlite")
    buf.report("explorer", "exploring batch 1 with the weights of step 0")
    late = threading.Timer(0.3, lambda: ExperienceBuffer(tmp_path / "b.sqlite").write(1, experience()))
    late.start()
    assert buf.claim(1, 10.0).batch.group_index[0] == "p0"  # arrived while it waited
    with pytest.raises(BufferError, match=r"trainer step 2 waited 0.2 s for explored batch 2, .*1 written; explorer: "
                                          r"exploring batch 1 with the weights of step 0 \(\d+ s ago\)"):
        buf.claim(2, 0.2)


def test_another_database_or_an_unwritable_place_is_refused(tmp_path):
    foreign = tmp_path / "app.sqlite"
    db = sqlite3.connect(str(foreign))
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(BufferError, match=r"app.sqlite: an SQLite database of something else \(tables users\)"):
        ExperienceBuffer(foreign)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BufferError, match="cannot"):
        ExperienceBuffer(blocker / "sub" / "b.sqlite")
    old = tmp_path / "old.sqlite"
    ExperienceBuffer(old).close()
    db = sqlite3.connect(str(old))
    db.execute("UPDATE meta SET value='posttrain-experience-buffer-0'")
    db.commit()
    db.close()
    with pytest.raises(BufferError, match="of schema 'posttrain-experience-buffer-0'"):
        ExperienceBuffer(old)


def test_published_weights_name_the_newest_step_and_keep_two_older(tmp_path):
    files = WeightFiles(tmp_path / "w")
    assert files.latest() is None
    for step in range(5):
        files.publish({"w": torch.full((2,), float(step)), "tied": torch.zeros(2)}, step)
    assert files.latest() == 4 and files.steps() == [2, 3, 4]
    assert torch.equal(files.load(3)["w"], torch.full((2,), 3.0))
