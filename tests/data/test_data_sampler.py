import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posttrain.config.sections.data import DataConfig
from posttrain.data import BatchSampler, make_sampler
from posttrain.errors import ConfigError, DataError


def _stream(sampler: BatchSampler, n: int) -> list[list[int]]:
    return [sampler.next_batch() for _ in range(n)]


def test_drop_last_and_every_epoch_is_a_permutation():
    s = BatchSampler(10, 3, seed=7)
    assert len(s) == 3  # 10 // 3, the last incomplete batch dropped
    epoch0 = list(s)
    assert len(epoch0) == 3 and all(len(b) == 3 for b in epoch0)
    assert len({i for b in epoch0 for i in b}) == 9
    epoch1 = list(s)
    assert epoch1 != epoch0  # a new order each epoch
    assert sorted(s.order(1)) == list(range(10))
    assert s.state_dict()["epoch"] == 1


def test_order_depends_only_on_seed_and_epoch():
    assert BatchSampler(50, 5, seed=3).order(4) == BatchSampler(50, 5, seed=3).order(4)
    assert BatchSampler(50, 5, seed=3).order(4) != BatchSampler(50, 5, seed=4).order(4)
    assert BatchSampler(5, 2, shuffle=False, drop_last=False).order(9) == [0, 1, 2, 3, 4]
    assert list(BatchSampler(5, 2, shuffle=False, drop_last=False)) == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("taken", [0, 1, 2, 3, 4, 5, 6, 7])  # 3 batches per epoch: 3 and 6 are epoch boundaries
def test_resume_gives_exactly_the_uninterrupted_batches(taken):
    reference = _stream(BatchSampler(11, 3, seed=5), 12)
    first = BatchSampler(11, 3, seed=5)
    assert _stream(first, taken) == reference[:taken]
    state = first.state_dict()
    resumed = BatchSampler(11, 3, seed=5)
    resumed.load_state_dict(state)
    assert _stream(resumed, 12 - taken) == reference[taken:]


def test_resume_inside_epoch_iteration():
    full = BatchSampler(11, 3, seed=1)
    reference = list(full) + list(full) + list(full)
    s = BatchSampler(11, 3, seed=1)
    it = iter(s)
    got = [next(it), next(it), next(it)]  # the whole of epoch 0, iterator not yet exhausted
    state = s.state_dict()
    assert (state["epoch"], state["position"]) == (0, 3)
    resumed = BatchSampler(11, 3, seed=1)
    resumed.load_state_dict(state)
    got += list(resumed)  # the rest of the epoch is empty: the next epoch starts
    got += list(resumed)
    assert got == reference


def test_resume_with_other_data_is_refused():
    state = BatchSampler(10, 2, seed=0).state_dict()
    with pytest.raises(DataError) as err:
        BatchSampler(12, 2, seed=0).load_state_dict(state)
    assert str(err.value) == (
        "cannot resume the data order: the checkpoint's sampler differs (size: saved 10, now 12); "
        "resume with the same data files and data settings"
    )


def test_make_sampler_from_config():
    train = make_sampler(DataConfig(train_batch_size=4, seed=9), 10)
    assert (train.batch_size, train.seed, train.shuffle, train.drop_last, len(train)) == (4, 9, True, True, 2)
    unshuffled = make_sampler(DataConfig(train_batch_size=4, shuffle=False), 10)
    assert list(unshuffled) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    val = make_sampler(DataConfig(), 5, split="val")
    assert list(val) == [[0, 1, 2, 3, 4]]  # val_batch_size null: one batch of everything
    val = make_sampler(DataConfig(val_batch_size=2), 5, split="val")
    assert list(val) == [[0, 1], [2, 3], [4]]
    shuffled_val = make_sampler(DataConfig(val_batch_size=5, validation_shuffle=True), 5, split="val")
    assert sorted(next(iter(shuffled_val))) == [0, 1, 2, 3, 4]
    assert shuffled_val.order(0) != [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match=r"data.train_batch_size=8 is larger than the 5 training examples"):
        make_sampler(DataConfig(), 5)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 40),
    batch_size=st.integers(1, 12),
    seed=st.integers(0, 10),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    taken=st.integers(0, 30),
)
def test_resume_is_exact_for_any_sampler(size, batch_size, seed, shuffle, drop_last, taken):
    if drop_last and size < batch_size:
        return
    kw = dict(seed=seed, shuffle=shuffle, drop_last=drop_last)
    reference = _stream(BatchSampler(size, batch_size, **kw), taken + 10)
    first = BatchSampler(size, batch_size, **kw)
    _stream(first, taken)
    resumed = BatchSampler(size, batch_size, **kw)
    resumed.load_state_dict(first.state_dict())
    assert _stream(resumed, 10) == reference[taken:]
