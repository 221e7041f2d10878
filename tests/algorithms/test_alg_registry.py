import pytest
import torch

import posttrain.algorithms as A
from posttrain.algorithms import registry
from posttrain.errors import ConfigError, UserError

REQUIRED_ESTIMATORS = {"gae", "grpo", "grpo_passk", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                       "remax", "opo", "gpg", "reinforce", "opmd"}
REQUIRED_LOSSES = {"vanilla", "gspo", "cispo", "topr", "clip_cov", "kl_cov", "gpg", "sft", "dpo"}


@pytest.fixture
def clean_registries():
    """Restore both registries after a test registers its own entries."""
    saved = (dict(A.ADVANTAGE_ESTIMATORS), dict(A.POLICY_LOSSES),
             {k: list(v) for k, v in registry._CANONICAL.items()})
    yield
    A.ADVANTAGE_ESTIMATORS.clear()
    A.ADVANTAGE_ESTIMATORS.update(saved[0])
    A.POLICY_LOSSES.clear()
    A.POLICY_LOSSES.update(saved[1])
    for k, v in saved[2].items():
        registry._CANONICAL[k][:] = v


def test_all_required_names_and_aliases_are_registered():
    assert REQUIRED_ESTIMATORS <= set(A.advantage_estimator_names())
    assert REQUIRED_LOSSES <= set(A.policy_loss_names())
    assert A.ADVANTAGE_ESTIMATORS["reinforceplusplus"] is A.ADVANTAGE_ESTIMATORS["reinforce_plus_plus"]
    assert A.ADVANTAGE_ESTIMATORS["ppo"] is A.ADVANTAGE_ESTIMATORS["gae"]
    assert "reinforceplusplus" not in A.advantage_estimator_names()


def test_unknown_name_is_a_config_error_listing_valid_names():
    with pytest.raises(ConfigError) as err:
        A.get_advantage_estimator("grp")
    msg = str(err.value)
    assert "algorithm.adv_estimator" in msg and "'grpo'" in msg and "rloo" in msg
    assert isinstance(err.value, UserError)
    with pytest.raises(ConfigError, match="valid names: .*vanilla"):
        A.get_policy_loss("nope")


def test_user_can_register_and_duplicates_are_rejected(clean_registries):
    @A.register_advantage_estimator("constant_one", aliases=("one",))
    def constant_one(*, token_level_rewards, response_mask, **_):
        ones = torch.ones_like(token_level_rewards) * response_mask
        return A.AdvantageOutput(ones, ones)

    assert A.get_advantage_estimator("one") is constant_one
    adv, _ = A.get_advantage_estimator("constant_one")(token_level_rewards=torch.zeros(1, 2),
                                                       response_mask=torch.ones(1, 2), gamma=1.0)
    assert adv.sum().item() == 2.0
    A.register_advantage_estimator("constant_one")(constant_one)  # same function again: idempotent

    with pytest.raises(ValueError, match="already registered"):
        @A.register_advantage_estimator("grpo")
        def other(**_):
            pass

    @A.register_policy_loss("zero")
    def zero(*, old_logprob, logprob, advantages, response_mask, loss_agg_mode="token-mean", scale: float = 1.0):
        return A.LossOutput(logprob.sum() * 0 * scale, {"pg_clipfrac": 0.0, "ppo_kl": 0.0, "pg_clipfrac_lower": 0.0})

    assert A.policy_loss_options("zero") == frozenset({"scale"})
    with pytest.raises(ValueError, match="already registered"):
        A.register_policy_loss("vanilla")(zero)


def test_register_rejects_bad_arguments():
    with pytest.raises(TypeError):
        A.register_policy_loss("")
    with pytest.raises(TypeError, match="tuple"):
        A.register_policy_loss("x", aliases="y")
