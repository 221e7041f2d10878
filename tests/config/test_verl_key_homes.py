"""Every key of verl's trainer trees has a home at any value, not only at its default: a launch line
that changes one is translated, dropped with the reason or refused with the reason, never "not a
verl key the schema knows" (issue 18, item 3)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest

from posttrain.config.dialects import translate, verl_launch
from posttrain.config.dialects.source import leaves, resolve
from posttrain.config.dialects.verl_release import reading
from posttrain.config.dialects.verl_trees import defaults_tree

UNKNOWN = "not a verl key the schema knows"


def _key_homes():
    """benchmarks/key_homes.py, whose way of changing a key's value this test shares."""
    spec = importlib.util.spec_from_file_location("key_homes", Path(__file__).resolve().parents[2] / "benchmarks" / "key_homes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_HOMES = _key_homes()
_changed, _key_homes_put = _HOMES.changed, _HOMES.put


@pytest.mark.parametrize("tree, release", [("ppo_trainer", "0.10"), ("ppo_trainer", "0.8"), ("ppo_megatron_trainer", "0.10"),
                                           ("ppo_megatron_trainer", "0.8"), ("ppo_veomni_trainer", "0.10")])
def test_every_key_of_verls_tree_has_a_home_when_changed(tree, release):
    resolved, _ = resolve(defaults_tree(tree, release))
    changed = copy.deepcopy(resolved)
    for key, value in leaves(resolved).items():
        new = _changed(value)
        if new is None or key.endswith(".strategy"):  # each role keeps the engine whose sections the tree holds
            continue
        _key_homes_put(changed, key, new)
    with reading(release):
        _, report = translate(changed, "verl")
    unknown = sorted(e.key for e in report.entries if e.status == "refused" and UNKNOWN in e.reason)
    assert unknown == []


def entry(*words):
    return verl_launch.launch(None, list(words))[1].entry(words[0].split("=")[0].lstrip("+~"))


@pytest.mark.parametrize("words, status, native, reason", [
    # Ray: posttrain starts its workers with Ray across nodes only
    (("ray_kwargs.ray_init.num_cpus=16", "trainer.nnodes=2"), "translated", "cluster.ray_num_cpus", ""),
    (("ray_kwargs.ray_init.num_cpus=16",), "dropped", None, "local subprocesses, with no Ray cluster"),
    (("ray_kwargs.timeline_json_file=/tmp/t.json", "trainer.nnodes=2"), "translated", "cluster.ray_timeline_file", ""),
    # the critic: what the estimator reads decides
    (("critic.enable=true", "algorithm.adv_estimator=gae"), "dropped", None, "gae reads the critic"),
    (("critic.enable=false", "algorithm.adv_estimator=grpo"), "dropped", None, "the estimator reads no values"),
    (("critic.enable=true", "algorithm.adv_estimator=grpo"), "refused", None, "a critic nothing uses"),
    (("critic.enable=false", "algorithm.adv_estimator=gae"), "refused", None, "needs the critic's values"),
    # the engine's seed: verl's default is left to posttrain's
    (("actor_rollout_ref.rollout.seed=7",), "translated", "rollout.seed", ""),
    (("actor_rollout_ref.rollout.seed=42",), "dropped", None, "verl's default (42)"),
    (("actor_rollout_ref.model.tokenizer_path=/tmp/tok",), "translated", "model.tokenizer_path", ""),
    (("critic.fsdp.ulysses_sequence_parallel_size=2", "algorithm.adv_estimator=gae"), "translated", "critic.ulysses_sequence_parallel_size", ""),
    # what changes the numbers is refused with the reason, what does not is dropped with it
    (("actor_rollout_ref.rollout.quantization=fp8",), "refused", None, "a quantized rollout"),
    (("actor_rollout_ref.actor.fsdp_config.dtype=float16",), "refused", None, "loss scaling"),
    (("actor_rollout_ref.actor.fsdp_config.qat.enable=true",), "refused", None, "quantization-aware training"),
    (("actor_rollout_ref.rollout.cudagraph_capture_sizes=[8,16]",), "dropped", None, "CUDA graphs"),
    (("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active=2",), "refused", None, "records each profiled step whole"),
    (("reward.reward_manager.source=importlib",), "refused", None, "a reward-manager class of the user's"),
    # a RolloutConfig field the tree leaves out, added with '+': TensorRT-LLM's MoE tensor parallelism
    (("+actor_rollout_ref.rollout.moe_tensor_parallel_size=1",), "dropped", None, "the default of verl's config dataclass"),
    (("+actor_rollout_ref.rollout.moe_tensor_parallel_size=2",), "refused", None, "the TensorRT-LLM engine is not provided"),
])
def test_changed_keys_land_where_they_mean(words, status, native, reason):
    got = entry(*words)
    assert got.status == status and (native is None or got.native == native) and reason in got.reason, (got.status, got.native, got.reason)


def test_a_0_8_line_drops_the_engine_sections_copies_its_legacy_workers_do_not_read():
    # reward_model.reward_manager is read by 0.8 only: the line is read as verl 0.8
    got = entry("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2", "reward_model.reward_manager=prime")
    assert got.status == "dropped" and "legacy workers read actor_rollout_ref.actor.ulysses_sequence_parallel_size" in got.reason


def test_a_users_file_that_keeps_verls_interpolated_copies_is_not_refused_for_them(tmp_path):
    # a file written from verl's own yaml keeps its interpolations: the copies follow the keys they copy
    (tmp_path / "mine.yaml").write_text(
        'hydra: {searchpath: ["file://verl/trainer/config"]}\n'
        "defaults: [ppo_trainer, _self_]\n"
        "actor_rollout_ref:\n"
        "  actor: {rollout_n: '${oc.select:actor_rollout_ref.rollout.n,1}'}\n"
        "  rollout: {n: 5, n_gpus_per_node: '${oc.select:trainer.n_gpus_per_node,8}'}\n"
        "trainer: {n_gpus_per_node: 4}\n"
        "critic: {rollout_n: '${oc.select:actor_rollout_ref.rollout.n,1}'}\n")
    _, report, _ = verl_launch.launch(str(tmp_path / "mine.yaml"), [])
    assert not report.refused
    assert report.entry("actor_rollout_ref.actor.rollout_n").status == "dropped"
    assert report.entry("actor_rollout_ref.rollout.n_gpus_per_node").status == "dropped"
    refused = verl_launch.launch(None, ["actor_rollout_ref.actor.rollout_n=3", "actor_rollout_ref.rollout.n=4"])[1].entry("actor_rollout_ref.actor.rollout_n")
    assert refused.status == "refused" and "another count than the responses per prompt" in refused.reason
