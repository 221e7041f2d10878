"""ROLL's loss keys of the actor: rl_loss_coef, sft_loss_coef (and where they do not apply)."""

import pytest

from posttrain.config import load_config
from posttrain.config.dialects import translate
from posttrain.errors import ConfigError


def test_roll_s_loss_coefficients_land_on_the_actor():
    native, report = translate({"rl_loss_coef": 0.5, "sft_loss_coef": 0.1}, "roll")
    assert not report.refused
    assert native["actor"]["rl_loss_coef"] == 0.5 and native["actor"]["sft_loss_coef"] == 0.1


def test_the_rl_loss_weights_are_refused_for_a_supervised_stage():
    with pytest.raises(ConfigError, match=r"actor.sft_loss_coef=0.1: these weigh the RL loss's parts and algorithm.kind sft"):
        load_config(None, ["algorithm.kind=sft", "actor.sft_loss_coef=0.1"])
    with pytest.raises(ConfigError, match="algorithm.kind dpo has no RL loss"):
        load_config(None, ["algorithm.kind=dpo", "actor.rl_loss_coef=2.0"])
    assert load_config(None, ["actor.sft_loss_coef=0.1", "actor.rl_loss_coef=2.0"]).actor.rl_loss_coef == 2.0
