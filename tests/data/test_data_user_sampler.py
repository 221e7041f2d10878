"""data.sampler: a user's sampler class (verl's interface) chooses the RL rows, a curriculum's
update() sees each step's positions and scores, resume continues the order, and a bad class path
or class is one ConfigError."""

from __future__ import annotations

import json
import textwrap

import pytest

from posttrain.config import load_config
from posttrain.data.train_sampler import make_train_sampler
from posttrain.data.user_sampler import SamplerFeedback, UserSampler
from posttrain.errors import ConfigError, DataError

SAMPLERS = '''
import random

class Reverse:
    """Every pass: the positions last to first."""
    def __init__(self, data_source, data_config):
        self.n = len(data_source)
    def __iter__(self):
        return iter(range(self.n - 1, -1, -1))

class Seeded:
    """A seeded shuffle per pass, counting its passes (no state_dict: posttrain replays)."""
    def __init__(self, data_source, data_config):
        self.n, self.seed, self.passes = len(data_source), data_config.seed, 0
    def __iter__(self):
        order = list(range(self.n))
        random.Random(self.seed * 1000 + self.passes).shuffle(order)
        self.passes += 1
        return iter(order)

class Hardest:
    """A curriculum: the positions with the lowest mean score first."""
    def __init__(self, data_source, data_config):
        self.n, self.seen = len(data_source), {}
        self.updates = []
    def update(self, batch):
        self.updates.append(batch)
        for k, s in zip(batch.positions, batch.scores):
            self.seen.setdefault(k, []).append(s)
    def __iter__(self):
        mean = {k: sum(v) / len(v) for k, v in self.seen.items()}
        return iter(sorted(range(self.n), key=lambda k: (mean.get(k, 0.5), k)))
    def state_dict(self):
        return {"seen": {str(k): v for k, v in self.seen.items()}}
    def load_state_dict(self, state):
        self.seen = {int(k): v for k, v in state["seen"].items()}

class Broken:
    def __init__(self, data_source, data_config):
        raise RuntimeError("no curriculum today")
'''


@pytest.fixture(scope="module")
def sampler_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("samplers") / "samplers.py"
    path.write_text(textwrap.dedent(SAMPLERS))
    return path


def _make(path, name, size=10, batch=4):
    cfg = load_config(None, [f"data.sampler={{class_path: {path}, class_name: {name}}}", f"data.train_batch_size={batch}",
                             f"actor.ppo_mini_batch_size={batch}"])
    return make_train_sampler(cfg.data, list(range(size)), {})


def test_the_users_order_is_taken_a_batch_at_a_time_and_a_short_tail_starts_the_next_pass(sampler_file):
    sampler = _make(sampler_file, "Reverse")
    assert isinstance(sampler, UserSampler)
    assert [sampler.next_batch() for _ in range(3)] == [[9, 8, 7, 6], [5, 4, 3, 2], [9, 8, 7, 6]]  # 1, 0 dropped
    assert sampler.epoch == 1 and len(sampler) == 2
    with pytest.raises(DataError, match="a whole pass yielded 3 positions, fewer than data.train_batch_size=4"):
        _make(sampler_file, "Reverse", size=3).next_batch()


def test_a_curriculum_sees_each_steps_positions_and_scores_and_reorders(sampler_file):
    sampler = _make(sampler_file, "Hardest")
    assert sampler.next_batch() == [0, 1, 2, 3]
    # two responses per prompt; the prompts of positions 0 and 1 were easy, 2 was hard, 3 filtered out
    sampler.feedback(["s1-a", "s1-b", "s1-c", "s1-d"], ["s1-a", "s1-a", "s1-b", "s1-c"], [1.0, 1.0, 0.9, 0.0], ["t"] * 4)
    update = sampler.sampler.updates[-1]
    assert update == SamplerFeedback([0, 0, 1, 2], [1.0, 1.0, 0.9, 0.0], ["t"] * 4)
    sampler.epoch, sampler.position, sampler._iter = 1, 0, None  # a new pass reads the scores
    assert sampler.next_batch() == [2, 3, 4, 5]  # the hard one first, then the unseen (0.5)


def test_resume_replays_a_stateless_sampler_and_restores_a_stateful_one(sampler_file):
    whole = _make(sampler_file, "Seeded")
    expected = [whole.next_batch() for _ in range(7)]
    first = _make(sampler_file, "Seeded")
    head = [first.next_batch() for _ in range(3)]
    resumed = _make(sampler_file, "Seeded")
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert head + [resumed.next_batch() for _ in range(4)] == expected
    curriculum = _make(sampler_file, "Hardest")
    curriculum.next_batch()
    curriculum.feedback(["u0"], ["u0"], [0.0], ["t"])
    state = json.loads(json.dumps(curriculum.state_dict()))
    restored = _make(sampler_file, "Hardest")
    restored.load_state_dict(state)
    assert restored.sampler.seen == {0: [0.0]} and restored.position == 4
    with pytest.raises(DataError, match="batch_size: saved 4, now 2"):
        _make(sampler_file, "Reverse", batch=2).load_state_dict(state)
    restored.sampler.seen = {0: {1, 2}}  # a set is not JSON: the checkpoint could not hold it
    with pytest.raises(DataError, match=r"Hardest from .*: state_dict\(\) must return JSON data"):
        restored.state_dict()


@pytest.mark.parametrize("spec, message", [
    ("{class_path: /no/such/file.py, class_name: X}", r"data.sampler.class_path: file not found: /no/such/file.py"),
    ("{class_path: SAMPLERS, class_name: Missing}", r"data.sampler.class_name: .* defines no class 'Missing'; its classes are \['Broken', 'Hardest'"),
    ("{class_path: SAMPLERS, class_name: Broken}", r"Broken\(data_source=dataset, data_config=data\) failed: RuntimeError: no curriculum today"),
    ("{class_path: SAMPLERS, name: Reverse}", r"data.sampler: unknown key\(s\) \['name'\]"),
])
def test_a_bad_class_path_or_class_is_one_config_error(sampler_file, spec, message):
    cfg = load_config(None, [f"data.sampler={spec.replace('SAMPLERS', str(sampler_file))}"])
    with pytest.raises(ConfigError, match=message):
        make_train_sampler(cfg.data, list(range(10)), {})


def test_a_sampler_with_another_row_chooser_is_refused_and_with_workers_is_not(sampler_file):
    spec = f"data.sampler={{class_path: {sampler_file}, class_name: Reverse}}"
    # verl refuses loader workers with a curriculum (they would read batches ahead of update());
    # posttrain's read only the batch the sampler has just chosen
    assert load_config(None, [spec, "data.dataloader_num_workers=2"]).data.dataloader_num_workers == 2
    with pytest.raises(ConfigError, match="data.sampler and data.domain_interleave_probs each choose"):
        load_config(None, [spec, "data.domain_interleave_probs={a: 1.0}"])


class _Pids:
    """A dataset whose examples say which process made them."""

    def __len__(self):
        return 8

    def __getitem__(self, k):
        import os

        return (k, os.getpid())


def test_dataloader_workers_read_a_batch_in_other_processes_in_its_order():
    import os

    from posttrain.data.loader import ExampleReader

    here = ExampleReader(_Pids(), 0)
    assert here([5, 1, 7]) == [(5, os.getpid()), (1, os.getpid()), (7, os.getpid())] and here.pool is None
    pool = ExampleReader(_Pids(), 2)
    try:
        made = pool([5, 1, 7, 0])
    finally:
        pool.close()
    assert [k for k, _ in made] == [5, 1, 7, 0]
    assert os.getpid() not in {pid for _, pid in made}
