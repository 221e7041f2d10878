"""The process-group weight channel of sync_method nccl / memory (posttrain.buffer.weight_channel):
the explorer receives exactly the tensors the trainer published, the trainer keeps a state until
every explorer process has taken it or a newer one, and a rerun's explorer finds the new trainer."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.buffer import weight_channel
from posttrain.buffer.sqlite import BufferError
from posttrain.buffer.weight_channel import CHANNEL, WeightClient, WeightServer, backend_for


def _state(shift: float = 0.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    tied = torch.randn(5, 3, generator=g) + shift
    return {
        "w": torch.randn(4, 3, generator=g) + shift,
        "b16": (torch.randn(7, generator=g) + shift).to(torch.bfloat16),
        "ids": torch.arange(6).reshape(2, 3) + int(shift),
        "mask": torch.tensor([True, False, True]),
        "embed": tied, "lm_head": tied,  # tied weights: two names, one tensor
        "scalar": torch.tensor(2.5 + shift),
    }


@pytest.fixture
def server(tmp_path):
    s = WeightServer(tmp_path, explorers=2, backend="gloo", device="cpu", timeout_s=20)
    yield s
    s.close()


def test_the_explorer_receives_exactly_what_the_trainer_published_and_nothing_is_written(server, tmp_path, monkeypatch):
    monkeypatch.setattr(weight_channel, "BUCKET_BYTES", 40)  # several buckets per dtype
    published = _state()
    server.publish(published, 3)
    client = WeightClient(tmp_path, 0, timeout_s=20)
    assert client.latest() == 3
    got = client.load(3)
    assert set(got) == set(published)
    for name, t in published.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape and torch.equal(got[name], t), name
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHANNEL, "latest.txt"]  # no tensor on disk
    published["w"].add_(1.0)  # the trainer trains on: what it published stays as it was
    assert torch.equal(client.load(3)["w"], _state()["w"])


def test_a_state_stays_until_every_explorer_process_has_taken_it_or_a_newer_one(server, tmp_path):
    first, second = WeightClient(tmp_path, 0, 20), WeightClient(tmp_path, 1, 20)
    for step in (0, 1, 2):
        server.publish(_state(step), step)
    assert server.steps() == [0, 1, 2]  # nobody has taken any
    assert torch.equal(first.load(2)["ids"], _state(2)["ids"])
    assert server.steps() == [0, 1, 2]  # explorer 1 may still ask for 0 or 1
    assert torch.equal(second.load(1)["ids"], _state(1)["ids"])
    assert server.steps() == [1, 2]
    server.publish(_state(3), 3)
    assert server.steps() == [1, 2, 3]
    second.load(3)
    assert server.steps() == [2, 3]  # explorer 0 last took 2
    with pytest.raises(BufferError, match=r"explorer process 1 asked for the weights of step 1: the trainer holds the weights of steps \[2, 3\]"):
        second.load(1)


def test_a_rerun_s_explorer_leaves_the_old_trainer_s_address_for_the_new_one(tmp_path):
    old = WeightServer(tmp_path, explorers=1, backend="gloo", device="cpu", timeout_s=20)
    old.publish(_state(), 1)
    stale = json.loads((tmp_path / CHANNEL).read_text())
    old.store = None  # the killed trainer's store goes with it
    old.close()
    import gc
    gc.collect()
    (tmp_path / CHANNEL).write_text(json.dumps({**stale, "token": "from-a-killed-run"}))
    new = WeightServer(tmp_path, explorers=1, backend="gloo", device="cpu", timeout_s=20)
    try:
        new.publish(_state(1.0), 1)
        assert torch.equal(WeightClient(tmp_path, 0, 20).load(1)["w"], _state(1.0)["w"])
    finally:
        new.close()


def test_no_trainer_is_one_message_naming_the_file_and_the_timeout(tmp_path):
    (tmp_path / CHANNEL).write_text(json.dumps({"host": "127.0.0.1", "port": 1, "token": "x", "backend": "gloo"}))
    with pytest.raises(BufferError, match=r"channel.json: no trainer to take the weights from within synchronizer.sync_timeout=0.5 s"):
        WeightClient(tmp_path, 0, timeout_s=0.5).load(1)


def test_nccl_moves_the_tensors_with_nccl_only_from_a_cuda_trainer():
    assert backend_for("nccl", "cpu") == backend_for("online", "cpu") == backend_for("memory", "cpu") == "gloo"
    assert backend_for("nccl", "cuda:0") == backend_for("online", "cuda") == "nccl"
    assert backend_for("memory", "cuda:0") == "gloo"  # host memory over TCP whatever the device
