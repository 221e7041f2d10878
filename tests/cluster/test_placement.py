"""Placement from the config: how many workers, on what, started by what, and the layouts refused
before anything starts (each with the numbers that do not fit)."""

from __future__ import annotations

import pytest

from posttrain.config.access import explorer_processes, rollout_placement, training_devices, world_size
from posttrain.trainer.decoupled import explorer_devices, is_decoupled
import torch

from posttrain.cluster.placement import WorldPlan, plan_world
from posttrain.config.load import load_config
from posttrain.errors import ConfigError


def plan(*overrides: str) -> WorldPlan:
    return plan_world(load_config(None, list(overrides)))


def test_one_process_by_default_and_n_local_workers_per_device(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert plan() == WorldPlan(1, "cpu", "local")
    assert plan("cluster.n_gpus_per_node=1") == WorldPlan(1, "cpu", "local")
    assert plan("cluster.n_gpus_per_node=2") == WorldPlan(2, "cpu", "local")
    assert plan("cluster.n_gpus_per_node=2", "cluster.launcher=ray") == WorldPlan(2, "cpu", "ray")
    assert plan("cluster.nnodes=2", "cluster.n_gpus_per_node=4") == WorldPlan(8, "cpu", "ray")  # auto: several nodes
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert plan("cluster.n_gpus_per_node=2") == WorldPlan(2, "cpu", "ray", "10.0.0.1:6379")
    assert plan("cluster.n_gpus_per_node=2", "cluster.launcher=local") == WorldPlan(2, "cpu", "local")


def test_a_colocated_device_mapping_is_the_same_placement_as_devices_per_node(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    roll = [f"cluster.device_mapping.{role}=[0,1]" for role in ("actor", "rollout", "ref", "critic")]
    assert plan("cluster.n_gpus_per_node=8", *roll) == plan("cluster.n_gpus_per_node=2") == WorldPlan(2, "cpu", "local")
    cfg = load_config(None, ["cluster.n_gpus_per_node=8", *roll, "data.train_batch_size=6", "actor.ppo_mini_batch_size=3",
                             "rollout.n=2", "actor.ppo_micro_batch_size_per_gpu=3"])
    assert cfg.cluster.device_mapping.actor == [0, 1]  # 6 responses per mini-batch split over 2 workers, not 8


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0,1]", "cluster.device_mapping.critic=[2,3]"],
         "cluster.device_mapping puts training roles on different devices (actor [0, 1]; critic [2, 3])"),
        (["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0,1]", "cluster.device_mapping.rollout=[1,2]"],
         "cluster.device_mapping: the rollout's devices 1..2 beside training on 0..1: posttrain runs the engines on the training devices, on the first m of them"),
        (["cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0,1]", "cluster.device_mapping.rollout=[2,3]"],
         "cluster.device_mapping: device 3 is past the 3 of cluster.nnodes × cluster.n_gpus_per_node"),
        (["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[1,1]"],
         "cluster.device_mapping: the training roles' devices [1, 1] name a device twice"),
        (["cluster.n_gpus_per_node=4", "actor.fsdp_config.fsdp_size=3"],
         "actor.fsdp_config.fsdp_size=3 does not divide the 4 worker processes"),
        (["actor.fsdp_config.forward_prefetch=true", "ref.fsdp_config.fsdp_size=2"],
         "actor.fsdp_config.forward_prefetch: only act on a model sharded over several worker processes"),
        (["cluster.n_gpus_per_node=2", "trainer.save_hf_checkpoint=never"],
         "trainer.save_hf_checkpoint=never keeps the final policy only in the last checkpoint, but with 2 worker processes"),
        (["cluster.n_gpus_per_node=2", "actor.use_torch_compile=true"],
         "actor.use_torch_compile with 2 worker processes: the compiled lean forward reads each layer's parameters directly"),
    ],
)
def test_layouts_that_cannot_work_are_refused_at_load(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        load_config(None, overrides)


def test_the_rollout_on_some_workers_or_on_devices_of_its_own_is_a_placement(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    colocated = load_config(None, ["cluster.n_gpus_per_node=4", "cluster.device_mapping.rollout=[0,1,2,3]"])
    subset = load_config(None, ["cluster.n_gpus_per_node=4", "cluster.device_mapping.rollout=[0,1]"])
    split = load_config(None, ["cluster.n_gpus_per_node=4", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.rollout=[1,2,3]"])
    assert [rollout_placement(c) for c in (colocated, subset, split)] == ["colocated", "subset", "split"]
    assert [world_size(c) for c in (colocated, subset, split)] == [4, 4, 1]  # trainer processes
    assert [explorer_processes(c) for c in (colocated, subset, split)] == [1, 2, 3]  # a decoupled explorer's engines
    assert [is_decoupled(c) for c in (colocated, subset, split)] == [False, False, True]  # split: explorer and trainer
    assert explorer_devices(split) == [1, 2, 3]  # each explorer process on its own device
    # any devices: the engines before the trainer's (ROLL's actor_infer on 1, actor_train on 2)
    before = load_config(None, ["cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[2]", "cluster.device_mapping.rollout=[1]"])
    assert (rollout_placement(before), world_size(before), training_devices(before), explorer_devices(before)) == ("split", 1, [2], [1])


def test_offload_with_one_cpu_process_is_accepted():
    # parameters, gradients and optimizer state of a CPU run are in CPU memory already
    cfg = load_config(None, ["actor.fsdp_config.param_offload=true", "ref.fsdp_config.optimizer_offload=true"])
    assert cfg.actor.fsdp_config.param_offload and cfg.ref.fsdp_config.optimizer_offload


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["cluster.nnodes=2", "cluster.n_gpus_per_node=2", "cluster.launcher=local"], "subprocesses run on this machine only"),
        (["cluster.ray_timeline_file=/tmp/t.json"], "only act when Ray starts the workers, and this run has one process"),
        (["cluster.n_gpus_per_node=2", "cluster.register_timeout_s=5"], "started as local subprocesses"),
        (["cluster.n_gpus_per_node=2", "cluster.ray_address=10.0.0.1:6379", "cluster.ray_num_cpus=4"],
         "sizes an embedded Ray cluster, but the run joins the one at 10.0.0.1:6379"),
    ],
)
def test_launchers_that_cannot_start_the_run_are_refused(monkeypatch, overrides, message):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match=message):
        plan(*overrides)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_is_refused_without_a_gpu():
    with pytest.raises(ConfigError, match="cluster.device=cuda, but torch sees no CUDA device"):
        plan("cluster.device=cuda", "cluster.n_gpus_per_node=2")
