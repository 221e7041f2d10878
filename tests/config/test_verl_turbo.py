"""verl 0.10's FSDP-Turbo engine (strategy fsdp_turbo) read onto posttrain's FSDP2: what each key
of a role's turbo_config becomes (posttrain.config.dialects.verl_turbo)."""

from __future__ import annotations

import pytest

from posttrain.config.dialects import verl_launch

T = "actor_rollout_ref.actor.fsdp_config.turbo_config."
RT = "actor_rollout_ref.ref.fsdp_config.turbo_config."
TURBO = ("actor_rollout_ref.actor.strategy=fsdp_turbo", "actor_rollout_ref.ref.strategy=fsdp_turbo")


def report(*words):
    return verl_launch.launch(None, list(words))


def test_a_turbo_line_lands_on_fsdp2_with_its_sharding_precision_and_recomputation():
    native, rep, _ = report(*TURBO, T + "distributed.fully_shard_parallel_size=4", T + "distributed.expert_parallel_size=4",
                            T + "distributed.ulysses_parallel_size=2", RT + "distributed.ulysses_parallel_size=2",
                            T + "distributed.fsdp_plan.param_dtype=fp32", T + "distributed.fsdp_plan.output_dtype=fp32",
                            "+" + T + "memory.recompute=True", "+" + T + "memory.recompute_plan=['model.layers.{*}']",
                            "actor_rollout_ref.model.enable_gradient_checkpointing=False",
                            "+" + T + "distributed.ep_plan.dispatcher=eager", "+" + T + "module_patches=[{target:a.b,replacement:c.d}]")
    assert native["actor"]["strategy"] == "fsdp2" and native["ref"]["strategy"] == "fsdp2"
    assert native["actor"]["fsdp_config"]["fsdp_size"] == 4
    assert native["ref"]["fsdp_config"]["fsdp_size"] == 16  # FSDP-Turbo's default, which the line leaves for the reference
    assert native["actor"]["ulysses_sequence_parallel_size"] == 2
    assert native["actor"]["fsdp_config"]["mixed_precision"]["param_dtype"] == "fp32"
    assert native["model"]["enable_gradient_checkpointing"] is True
    status = {e.key: e.status for e in rep.entries}
    for key in (T + "distributed.expert_parallel_size", T + "distributed.fsdp_plan.output_dtype", T + "memory.recompute_plan",
                T + "distributed.ep_plan.dispatcher", T + "module_patches", RT + "distributed.ulysses_parallel_size",
                "actor_rollout_ref.model.enable_gradient_checkpointing"):
        assert status[key] == "dropped", key
    assert not rep.refused


@pytest.mark.parametrize("words, key, reason", [
    ((T + "distributed.tensor_parallel_size=2",), T + "distributed.tensor_parallel_size", "reserves tensor parallelism"),
    ((T + "distributed.fsdp_plan.param_dtype=fp16",), T + "distributed.fsdp_plan.param_dtype", "fp16 needs loss scaling"),
    ((T + "distributed.fsdp_plan.output_dtype=fp32",), T + "distributed.fsdp_plan.output_dtype", "another dtype than the compute dtype bf16"),
    (("+" + T + "distributed.no_such=1",), T + "distributed.no_such", "not a key of verl's FSDP-Turbo config"),
])
def test_what_turbo_would_compute_differently_is_refused(words, key, reason):
    _, rep, _ = report(*TURBO, *words)
    entry = rep.entry(key)
    assert entry.status == "refused" and reason in entry.reason, entry.reason


def test_turbo_keys_beside_another_strategy_are_dropped_as_verl_ignores_them():
    native, rep, _ = report(T + "distributed.fully_shard_parallel_size=4", "+" + T + "memory.recompute=True")
    assert rep.entry(T + "distributed.fully_shard_parallel_size").status == "dropped"
    assert "only with actor_rollout_ref.actor.strategy fsdp_turbo" in rep.entry(T + "memory.recompute").reason
    assert native.get("actor", {}).get("fsdp_config", {}).get("fsdp_size") is None


def test_the_critics_turbo_section_takes_fsdp_turbos_defaults_too():
    native, rep, _ = report("critic.strategy=fsdp_turbo", "algorithm.adv_estimator=gae", "critic.fsdp.turbo_config.distributed.fsdp_plan.output_dtype=bf16")
    assert native["critic"]["fsdp_config"]["fsdp_size"] == 16 and native["critic"]["strategy"] == "fsdp2"
    assert rep.entry("critic.fsdp.turbo_config.distributed.fsdp_plan.output_dtype").status == "dropped"
    assert not rep.refused
