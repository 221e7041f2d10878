"""Domain mixing (data.domain_interleave_probs): batch shares match the probabilities, the order is
a function of the seed, a restored sampler continues exactly, and bad domains are refused at load."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from posttrain.config import load_config
from posttrain.data import build_rl_dataset
from posttrain.data.domains import DomainSampler, domain_of_tags, make_train_sampler
from posttrain.errors import ConfigError, DataError
from posttrain.models.tiny import build_tiny_tokenizer
from posttrain.tasks import write_task_data

DOMAINS = {"a": list(range(0, 50)), "b": list(range(50, 60)), "c": list(range(60, 63))}
PROBS = {"a": 0.7, "b": 0.2, "c": 0.1}


def _domain(row: int) -> str:
    return next(name for name, rows in DOMAINS.items() if row in rows)


def test_domain_shares_of_1000_batches_match_the_probabilities():
    sampler = DomainSampler(DOMAINS, PROBS, batch_size=8, seed=3)
    counts = Counter(_domain(row) for _ in range(1000) for row in sampler.next_batch())
    for name, p in PROBS.items():
        share = counts[name] / 8000
        sigma = (p * (1 - p) / 8000) ** 0.5  # binomial standard error of one share
        assert abs(share - p) < 4 * sigma, (name, share, p)


def test_unnormalised_probabilities_are_shares_and_zero_is_never_drawn():
    sampler = DomainSampler({"a": [0, 1], "b": [2, 3]}, {"a": 3.0, "b": 1.0}, batch_size=4, seed=0)
    assert sampler.weights == [0.75, 0.25]
    counts = Counter(row < 2 for _ in range(500) for row in sampler.next_batch())
    assert abs(counts[True] / 2000 - 0.75) < 4 * (0.75 * 0.25 / 2000) ** 0.5


def test_each_domain_streams_its_rows_once_per_domain_epoch():
    sampler = DomainSampler(DOMAINS, PROBS, batch_size=8, seed=1)
    drawn = [row for _ in range(200) for row in sampler.next_batch()]
    small = [row for row in drawn if _domain(row) == "c"]
    for start in range(0, len(small) - 2, 3):  # c has 3 rows: each block of 3 draws is a permutation of them
        assert sorted(small[start:start + 3]) == [60, 61, 62]
    epoch, taken = sampler.streams["c"]
    assert epoch * 3 + taken == len(small)
    assert sampler.epoch == 200 * 8 // 63


def test_the_order_is_a_function_of_the_seed():
    first = [DomainSampler(DOMAINS, PROBS, 8, seed=5).next_batch() for _ in range(3)]
    again = DomainSampler(DOMAINS, PROBS, 8, seed=5)
    other = DomainSampler(DOMAINS, PROBS, 8, seed=6)
    assert [again.next_batch() for _ in range(3)][0] == first[0]
    assert [other.next_batch() for _ in range(20)] != [DomainSampler(DOMAINS, PROBS, 8, seed=5).next_batch() for _ in range(20)]


def test_a_restored_sampler_continues_the_same_sequence():
    uninterrupted = DomainSampler(DOMAINS, PROBS, batch_size=8, seed=2)
    expected = [uninterrupted.next_batch() for _ in range(120)]
    first = DomainSampler(DOMAINS, PROBS, batch_size=8, seed=2)
    head = [first.next_batch() for _ in range(37)]
    state = json.loads(json.dumps(first.state_dict()))  # as a checkpoint stores it
    resumed = DomainSampler(DOMAINS, PROBS, batch_size=8, seed=2)
    resumed.load_state_dict(state)
    assert head + [resumed.next_batch() for _ in range(83)] == expected


@pytest.mark.parametrize("change, message", [
    (dict(probs={"a": 0.5, "b": 0.4, "c": 0.1}), "weights: saved"),
    (dict(seed=9), "seed: saved 2, now 9"),
    (dict(batch_size=4), "batch_size: saved 8, now 4"),
])
def test_a_sampler_over_other_domains_or_settings_refuses_the_state(change, message):
    state = DomainSampler(DOMAINS, PROBS, batch_size=8, seed=2).state_dict()
    args = dict(domains=DOMAINS, probs=PROBS, batch_size=8, seed=2) | change
    with pytest.raises(DataError, match=message):
        DomainSampler(**args).load_state_dict(state)
    with pytest.raises(DataError, match="saved without data.domain_interleave_probs"):
        DomainSampler(DOMAINS, PROBS, 8).load_state_dict({"epoch": 0, "position": 3})


def test_worker_names_stand_for_their_tags_and_a_tag_in_two_domains_is_refused():
    assert domain_of_tags({"m": 1.0, "t": 1.0}, {"m": ["x", "y"]}) == {"x": "m", "y": "m", "t": "t"}
    with pytest.raises(ConfigError, match="tag 'x' belongs to both domains 'm' and 'x'"):
        domain_of_tags({"m": 1.0, "x": 1.0}, {"m": ["x"]})


@pytest.fixture(scope="module")
def two_tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("domains")
    write_task_data("sort", root / "sort", train=12, test=2, sft=0, dpo=0)
    write_task_data("arithmetic", root / "arith", train=6, test=2, sft=0, dpo=0)
    return root


def _sampler(root, *overrides, workers=None):
    cfg = load_config(None, [f"data.train_files=[{root}/sort/train.parquet, {root}/arith/train.parquet]",
                             "data.train_batch_size=4", "actor.ppo_mini_batch_size=4", "data.max_prompt_length=32", *overrides])
    dataset = build_rl_dataset(cfg.data, cfg.data.train_files, build_tiny_tokenizer())
    return make_train_sampler(cfg.data, dataset, workers or {}), dataset


def test_the_training_sampler_draws_by_domain_from_the_files(two_tasks):
    sampler, dataset = _sampler(two_tasks, "data.domain_interleave_probs={sorting: 0.25, posttrain/arithmetic: 0.75}",
                                workers={"sorting": ["posttrain/sort"]})
    assert isinstance(sampler, DomainSampler)
    assert sampler.domains == {"sorting": list(range(12)), "posttrain/arithmetic": list(range(12, 18))}
    tags = Counter(dataset[k].data_source for _ in range(300) for k in sampler.next_batch())
    assert abs(tags["posttrain/arithmetic"] / 1200 - 0.75) < 4 * (0.75 * 0.25 / 1200) ** 0.5
    plain, _ = _sampler(two_tasks)
    assert not isinstance(plain, DomainSampler)  # without probabilities: the uniform sampler
    never, _ = _sampler(two_tasks, "data.domain_interleave_probs={posttrain/sort: 1.0, posttrain/arithmetic: 0.0}")
    assert all(k < 12 for _ in range(50) for k in never.next_batch())


def test_rows_outside_every_domain_and_domains_without_rows_are_refused(two_tasks):
    with pytest.raises(DataError, match=r"arith/train.parquet: row 0, column 'data_source': tag 'posttrain/arithmetic' is in no domain"):
        _sampler(two_tasks, "data.domain_interleave_probs={posttrain/sort: 1.0}")
    with pytest.raises(DataError, match=r"no row of data.train_files has a tag of domain\(s\) ghost"):
        _sampler(two_tasks, "data.domain_interleave_probs={posttrain/sort: 1.0, posttrain/arithmetic: 1.0, ghost: 1.0}")


@pytest.mark.parametrize("overrides, message", [
    (["data.domain_interleave_probs={a: -0.5, b: 1.0}"], "probabilities must be >= 0"),
    (["data.domain_interleave_probs={a: 0.0}"], "at least one probability must be > 0"),
    (["data.domain_interleave_probs={a: 1.0}", "algorithm.kind=sft"], "algorithm.kind=sft samples its rows uniformly"),
])
def test_bad_probabilities_are_refused_with_the_config(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
