"""data.selector: Trinity-RFT's task selectors pick each step's rows in exactly Trinity's order (the
index lists below are what its selector classes return for the same rows, batch and seed), BOTS's
difficulty-based posterior moves as its update rule says, and a restored selector continues exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from posttrain.config import load_config
from posttrain.config.sections.data import DataConfig, TaskSelectorConfig
from posttrain.data.difficulty import BetaState, bots_update
from posttrain.data.files import RowTable
from posttrain.data.selectors import SelectorSampler
from posttrain.data.train_sampler import make_train_sampler
from posttrain.errors import ConfigError, DataError

FEATURES = [[0.5, 0.1], [0.9, 0.2], [0.5, 0.3], [0.1, 0.0], [0.9, 0.2]]


class Tasks:
    """An RL dataset's shape as the selectors read it: rows with feature columns a and b."""

    def __init__(self, n: int, features=None):
        rows = [{"a": f[0], "b": f[1]} for f in features] if features else [{} for _ in range(n)]
        self.table = RowTable(rows=rows, paths=["tasks.jsonl"], starts=[0], entries=[0])
        self.indices = list(range(len(rows)))

    def __len__(self):
        return len(self.indices)


def sampler(*overrides, n=10, batch=4, features=None) -> SelectorSampler:
    """The training sampler of a data section with these `data.` overrides (built directly: load_config
    is checked in test_bad_selector_settings_are_one_clear_error)."""
    data, selector = {"train_batch_size": batch}, {}
    for override in overrides:
        key, _, value = override.partition("=")
        into, name = (selector, key.removeprefix("data.selector.")) if key.startswith("data.selector.") else (data, key.removeprefix("data."))
        into[name] = yaml.safe_load(value)
    made = make_train_sampler(DataConfig(**data, selector=TaskSelectorConfig(**selector)), Tasks(n, features), {})
    assert isinstance(made, SelectorSampler)
    return made


def batches(s: SelectorSampler, k: int) -> list[list[int]]:
    return [s.next_batch() for _ in range(k)]


def test_fixed_order_selectors_draw_trinitys_rows():
    assert batches(sampler("data.selector.type=sequential"), 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]  # wraps, nothing dropped
    # numpy default_rng(42).permutation(10) for epoch 0; the batch crossing into epoch 1 continues with default_rng(43)'s
    shuffle = sampler("data.selector.type=shuffle", "data.seed=42")
    assert batches(shuffle, 3) == [[5, 6, 0, 7], [3, 2, 4, 9], [1, 8, 2, 8]] and shuffle.epoch == 1
    # default_rng(42 + rows taken).choice(10, 4, replace=False) per batch
    assert batches(sampler("data.selector.type=random", "data.seed=42"), 3) == [[4, 0, 5, 6], [7, 0, 3, 1], [8, 5, 6, 9]]
    # highest feature first, ties by the next feature, then the later row; wrapping around
    easy = sampler("data.selector.type=offline_easy2hard", "data.selector.feature_keys=[a, b]", n=5, batch=3, features=FEATURES)
    assert batches(easy, 2) == [[4, 1, 2], [0, 3, 4]]


def test_a_changed_key_changes_the_rows():
    assert batches(sampler("data.selector.type=shuffle", "data.seed=43"), 1) == [[2, 8, 9, 5]]
    assert batches(sampler("data.selector.type=random", "data.seed=7"), 1) != [[4, 0, 5, 6]]
    easy = sampler("data.selector.type=offline_easy2hard", "data.selector.feature_keys=[b, a]", n=5, batch=3, features=FEATURES)
    assert easy.next_batch() == [2, 4, 1]


def test_the_bots_update_matches_hand_computed_posteriors():
    f = np.array([[0.2, 0.6], [0.4, 0.8], [0.0, 1.0]])
    # step 1 ran row 0, pass rate 0.5: c = (0.5 - 0.2) / (0.6 - 0.2) = 0.75, so rows 1 and 2 interpolate to
    # 0.4 + 0.4 * 0.75 = 0.7 and 0 + 1 * 0.75 = 0.75; alpha = 0.5 * 1 + 0.5 + 0.5 * 4 * s + 0.5 * 4 * p
    one = bots_update(BetaState.prior(3, 0.5), f, [0], [0.5], m=4, lamb=0.5, adaptive_rho=False)
    assert one.alphas == pytest.approx([3.0, 2.4, 2.5], rel=1e-5) and one.betas == pytest.approx([3.0, 1.6, 1.5], rel=1e-5)
    assert one.cap_coef == pytest.approx(0.75, rel=1e-5)
    # step 2 ran rows 1 (all right) and 2 (all wrong): c = 0.9 * 0.75 + 0.1 * (0.5 - 0.2) / (0.9 - 0.2) = 0.717857;
    # row 0 interpolates to 0.2 + 0.4 c = 0.487143; rows with evidence count m * rate in full
    two = bots_update(one, f, [1, 2], [1.0, 0.0], m=4, lamb=0.5, adaptive_rho=False)
    assert two.cap_coef == pytest.approx(0.717857, rel=1e-5) and two.rho == 0.5
    assert two.alphas == pytest.approx([2.974286, 5.7, 1.75], rel=1e-5) and two.betas == pytest.approx([3.025714, 1.3, 5.25], rel=1e-5)
    # the interpolation missed by (0.312857 + 0.717857) / 2 >= 0.25: adaptive_rho halves rho for the unobserved row
    half = bots_update(one, f, [1, 2], [1.0, 0.0], m=4, lamb=0.5, adaptive_rho=True)
    assert half.rho == 0.25 and half.alphas == pytest.approx([2.487143, 5.7, 1.75], rel=1e-5)


def test_difficulty_based_picks_rows_near_the_target_from_the_step_mean_rewards():
    keys = ("data.selector.type=difficulty_based", "data.selector.feature_keys=[a, b]", "data.selector.m=4",
            "data.selector.lamb=0.5", "data.selector.rho=0.5", "data.selector.tau=0")
    features = [[0.2, 0.6], [0.4, 0.8], [0.0, 1.0]]
    for target, after in ((0.5, [0, 1]), (1.0, [2, 1])):
        s = sampler(*keys, f"data.selector.target_reward={target}", n=3, batch=1, features=features)
        assert s.next_batch() == [0]  # the prior is 0.5 everywhere: the tie goes to the first row
        # row 0's prompt had responses scoring 1 and 0 (the group of another uid was filtered out)
        s.feedback(["p0"], ["p0", "p0"], [1.0, 0.0], ["t", "t"])
        assert s.selector.posterior.alphas == pytest.approx([3.0, 2.4, 2.5], rel=1e-5)  # as hand-computed above
        s.batch_size = 2  # posterior means 0.5, 0.6, 0.625
        assert s.next_batch() == after


def test_a_restored_selector_continues_exactly():
    def run(s: SelectorSampler, steps: int) -> list[list[int]]:
        out = []
        for step in range(steps):
            rows = s.next_batch()
            uids = [f"s{step}-{k}" for k in range(len(rows))]
            s.feedback(uids, [u for u in uids for _ in range(2)], [float(r % 3 == 0) for r in rows for _ in range(2)], ["t"] * 2 * len(rows))
            out.append(rows)
        return out

    for keys in (("data.selector.type=shuffle",), ("data.selector.type=difficulty_based", "data.selector.feature_keys=[a, b]",
                                                    "data.selector.do_sample=true", "data.selector.tau=0.5", "data.selector.target_reward=0.5")):
        make = lambda: sampler(*keys, n=5, batch=2, features=FEATURES)  # noqa: E731
        whole = run(make(), 6)
        first = make()
        head = run(first, 3)
        state = json.loads(json.dumps(first.state_dict()))  # as trainer_state.json holds it
        resumed = make()
        resumed.load_state_dict(state)
        assert head + run(resumed, 3) == whole, keys
    with pytest.raises(DataError, match="batch_size: saved 2, now 1"):
        sampler("data.selector.type=shuffle", n=5, batch=1).load_state_dict(state)


def test_bad_selector_settings_are_one_clear_error():
    with pytest.raises(ConfigError, match="takes exactly two columns"):
        sampler("data.selector.type=difficulty_based", "data.selector.feature_keys=[a]", n=5, features=FEATURES)
    with pytest.raises(ConfigError, match=r"data.selector.tau: read by the difficulty_based selector only"):
        load_config(None, ["data.selector.type=shuffle", "data.selector.tau=0"])
    with pytest.raises(ConfigError, match="data.sampler and data.selector each choose"):
        load_config(None, ["data.selector.type=shuffle", "data.sampler={class_path: s.py, class_name: S}"])
    with pytest.raises(ConfigError, match="larger than the 3 training examples"):
        sampler("data.selector.type=random", n=3, batch=4)
    bad = [list(f) for f in FEATURES]
    bad[3][1] = "easy"
    with pytest.raises(DataError, match=r"tasks.jsonl: row 3, column 'b': 'easy' is not a number"):
        sampler("data.selector.type=offline_easy2hard", "data.selector.feature_keys=[a, b]", n=5, features=bad)


@pytest.mark.parametrize("change", ["data.selector.m=4", "data.selector.lamb=0.5", "data.selector.rho=0.5", "data.selector.adaptive_rho=true",
                                    "data.selector.tau=1.0", "data.selector.do_sample=true", "data.selector.target_reward=0.5"])
def test_each_bots_argument_changes_the_posterior_or_the_rows(change):
    def trace(*extra):
        s = sampler("data.selector.type=difficulty_based", "data.selector.feature_keys=[a, b]", "data.selector.tau=0", *extra,
                    n=5, batch=2, features=FEATURES)
        rows = []
        for step in range(3):
            rows.append(s.next_batch())
            # even rows solved, odd ones failed: far from what the reference models' features predict
            s.feedback([f"u{step}0", f"u{step}1"], [f"u{step}0", f"u{step}1"], [float(r % 2 == 0) for r in rows[-1]], ["t", "t"])
        return rows, s.selector.posterior.alphas.tolist(), s.selector.posterior.rho

    assert trace(change) != trace()


def test_a_restarted_decoupled_explorer_loads_the_state_of_the_last_batch_in_the_buffer(tmp_path):
    from posttrain.trainer.explorer_order import STATE_FILE, OrderLog, learns, restore_order

    keys = ("data.selector.type=difficulty_based", "data.selector.feature_keys=[a, b]", "data.selector.do_sample=true", "data.selector.tau=0")
    make = lambda: sampler(*keys, n=5, batch=2, features=FEATURES)  # noqa: E731

    def explore(s: SelectorSampler, b: int) -> list[int]:
        rows = s.next_batch()
        s.feedback([f"b{b}0", f"b{b}1"], [f"b{b}0", f"b{b}1"], [float(r % 2 == 0) for r in rows], ["t", "t"])
        return rows

    whole = make()
    expected = [explore(whole, b) for b in range(1, 7)]
    path = tmp_path / STATE_FILE
    first = make()
    assert learns(first) and not learns(sampler("data.selector.type=shuffle", n=5, batch=2))
    log = OrderLog(path, first, 0)
    for b in range(1, 4):
        explore(first, b)
        log.explored(b)  # batch 3's state is saved; the crash comes before or after it is written
    for in_buffer in (2, 3):
        resumed = make()
        restore_order(resumed, path, in_buffer)
        assert [explore(resumed, b) for b in range(in_buffer + 1, 7)] == expected[in_buffer:]
    replayed = make()
    restore_order(replayed, tmp_path / "none.json", 3)  # no saved state: the draws are replayed without feedback
    assert [explore(replayed, b) for b in range(4, 7)] != expected[3:]


def test_a_mean_reward_outside_0_1_counts_as_a_pass_rate_at_the_bound():
    def posterior(score: float) -> list[float]:
        s = sampler("data.selector.type=difficulty_based", "data.selector.feature_keys=[a, b]", n=5, batch=2, features=FEATURES)
        s.next_batch()
        s.feedback(["u0", "u1"], ["u0", "u1"], [score, score], ["t", "t"])
        return s.selector.posterior.alphas.tolist() + s.selector.posterior.betas.tolist()

    # a length penalty (-0.1) would make the Beta parameters negative; it reads as no success at all
    assert posterior(-0.1) == posterior(0.0) and posterior(1.5) == posterior(1.0)
