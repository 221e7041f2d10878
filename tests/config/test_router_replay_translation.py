"""verl's actor_rollout_ref.actor.router_replay: R2 under its Megatron actor -> actor.router_replay.mode
R2; under its FSDP actor (which reads none of it) dropped; R3 refused with the reason; the file keys
(declared, read nowhere in verl) dropped. And the native key's refusals: R3 (not a choice), R2 beside reused rollout
log-probs (verl's bypass mode), turn rows, an SFT stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from test_launch_lines import line

RR = "actor_rollout_ref.actor.router_replay."
MEGATRON = "actor_rollout_ref.actor.strategy=megatron"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verl_router_replay")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=16, test=4)
    return root


@pytest.mark.parametrize("words, mode", [
    ([RR + "mode=R2", MEGATRON], "R2"),
    ([RR + "mode=R2"], "disabled"),  # verl's FSDP actor does not read router_replay
    ([RR + "mode=disabled", MEGATRON], "disabled"),
    ([RR + "mode=R2", MEGATRON, RR + "record_file=/tmp/routes.pt", RR + "replay_file=/tmp/routes.pt"], "R2"),
])
def test_verl_router_replay_translates(inputs, words, mode):
    assert load_config(None, [*line(inputs), *words], dialect="verl").actor.router_replay.mode == mode


def test_verl_r3_is_refused_with_the_reason(inputs):
    with pytest.raises(ConfigError, match="posttrain's engines record no routing"):
        load_config(None, [*line(inputs), RR + "mode=R3", MEGATRON], dialect="verl")


@pytest.mark.parametrize("words, message", [
    (["actor.router_replay.mode=R3"], "'R3' is not one of disabled, R2"),
    (["actor.router_replay.mode=R2", "actor.reuse_rollout_logprobs=always"], "the rollout's log-probs come with no routing"),
    (["actor.router_replay.mode=R2", "env.train_rows=turn"], "use train_rows episode"),
    (["actor.router_replay.mode=R2", "algorithm.kind=sft"], "RL stages only"),
])
def test_native_router_replay_refusals(inputs, words, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"model.path={inputs}/model", f"data.train_files={inputs}/data/train.parquet", *words])
    load_config(None, [f"model.path={inputs}/model", f"data.train_files={inputs}/data/train.parquet", "actor.router_replay.mode=R2"])
