"""File mixing (data.interleave_probs): each data.train_files entry is drawn with its probability,
each entry's rows stream in their own seeded order, a resumed sampler continues exactly, and bad
settings are refused at load."""

from __future__ import annotations

import json
import pytest

from posttrain.config import load_config
from posttrain.data import build_rl_dataset
from posttrain.data.domains import DomainSampler
from posttrain.data.train_sampler import make_train_sampler
from posttrain.errors import ConfigError
from posttrain.models.tiny import build_tiny_tokenizer
from posttrain.tasks import write_task_data


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("interleave")
    write_task_data("sort", root / "sort", train=12, test=2, sft=0, dpo=0)
    write_task_data("arithmetic", root / "arith", train=6, test=2, sft=0, dpo=0)
    return root


def _config(root, *overrides):
    return load_config(None, [f"data.train_files=[{root}/sort/train.parquet, {root}/arith/train.parquet]",
                              "data.train_batch_size=4", "actor.ppo_mini_batch_size=4", "data.max_prompt_length=32", *overrides])


def _sampler(root, *overrides):
    cfg = _config(root, *overrides)
    dataset = build_rl_dataset(cfg.data, cfg.data.train_files, build_tiny_tokenizer())
    return make_train_sampler(cfg.data, dataset, {}), dataset


def test_rows_are_drawn_by_file_with_the_probabilities(two_files):
    sampler, dataset = _sampler(two_files, "data.interleave_probs='0.2,0.8'")
    assert isinstance(sampler, DomainSampler)
    assert list(sampler.domains.values()) == [list(range(12)), list(range(12, 18))]  # one stream per listed file
    drawn = [k for _ in range(300) for k in sampler.next_batch()]
    share = sum(k >= 12 for k in drawn) / len(drawn)
    assert abs(share - 0.8) < 4 * (0.8 * 0.2 / len(drawn)) ** 0.5  # vs 6/18 = 0.33 uniformly
    assert {dataset[k].data_source for k in drawn if k >= 12} == {"posttrain/arithmetic"}
    small = [k for k in drawn if k >= 12]
    for start in range(0, len(small) - 5, 6):  # the 6-row file repeats whole passes (all_exhausted)
        assert sorted(small[start:start + 6]) == list(range(12, 18))


def test_a_zero_probability_file_is_never_drawn_and_resume_is_exact(two_files):
    never, _ = _sampler(two_files, "data.interleave_probs='1,0'")
    assert all(k < 12 for _ in range(40) for k in never.next_batch())
    whole, _ = _sampler(two_files, "data.interleave_probs='0.5,0.5'")
    expected = [whole.next_batch() for _ in range(30)]
    first, _ = _sampler(two_files, "data.interleave_probs='0.5,0.5'")
    head = [first.next_batch() for _ in range(11)]
    resumed, _ = _sampler(two_files, "data.interleave_probs='0.5,0.5'")
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))  # as a checkpoint stores it
    assert head + [resumed.next_batch() for _ in range(19)] == expected
    other, _ = _sampler(two_files, "data.interleave_probs='0.5,0.5'", "data.seed=7")
    assert [other.next_batch() for _ in range(30)] != expected


@pytest.mark.parametrize("overrides, message", [
    (["data.interleave_probs='1.0'"], "1 probabilities for 2 entries of data.train_files"),
    (["data.interleave_probs='0.5,x'"], "not a comma-separated list of numbers"),
    (["data.interleave_probs='0,0'"], "at least one > 0"),
    (["data.interleave_probs='0.5,0.5'", "data.domain_interleave_probs={a: 1.0}"], "keep one of them"),
    (["data.interleave_probs='0.5,0.5'", "algorithm.kind=sft"], "algorithm.kind=sft samples its rows uniformly"),
])
def test_bad_settings_are_refused_with_the_config(two_files, overrides, message):
    with pytest.raises(ConfigError, match=message):
        _config(two_files, *overrides)


def test_a_custom_dataset_class_cannot_be_mixed_by_file(two_files, tmp_path):
    from posttrain.data.interleave import make_file_sampler

    cfg = _config(two_files, "data.interleave_probs='0.5,0.5'")
    with pytest.raises(ConfigError, match="data.custom_cls dataset does not say which file"):
        make_file_sampler(cfg.data, [object()] * 18)
    assert type(_sampler(two_files)[0]).__name__ == "BatchSampler"  # without the key: the uniform sampler
