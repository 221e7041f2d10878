"""A verl line or ROLL file that leaves the per-node device count to its framework's default (8) runs
on this machine's GPUs, one process without any (posttrain.config.dialects.machine); a size that
must divide the worker processes and fails only for that reason is the machine's lack."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from posttrain.config.dialects import foreign_native, translate, verl_launch
from posttrain.config.dialects.machine import LEFT_TO_MACHINE
from posttrain.errors import ConfigError
from posttrain.trainer.smoke import machine_refusal

SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "foreign_corpus.py"
ULYSSES_2 = "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"


@pytest.fixture
def machine_gpus(monkeypatch):
    """Set the CUDA device count torch reports here (the conftest's pin to 0 is off for this test)."""
    return lambda n: monkeypatch.setattr(torch.cuda, "device_count", lambda: n)


def _cluster(overrides: list[str]) -> tuple[dict, object]:
    native, report, _ = verl_launch.launch(None, overrides)
    return native.get("cluster", {}), report


def test_a_verl_line_without_the_count_runs_on_this_machines_gpus(machine_gpus):
    machine_gpus(8)
    cluster, report = _cluster(["algorithm.adv_estimator=grpo"])
    assert cluster.get("n_gpus_per_node") == 8 and cluster.get("nnodes", 1) == 1
    entry = report.entry("trainer.n_gpus_per_node")
    assert (entry.status, entry.native, entry.value) == ("translated", "cluster.n_gpus_per_node", 8)
    assert "this machine's GPUs" in entry.reason and "verl's default 8 describes verl's machine" in entry.reason
    assert report.devices_from_machine == 8

    machine_gpus(0)  # no GPU: one process, nothing set (today's translation)
    cluster, report = _cluster(["algorithm.adv_estimator=grpo"])
    assert "n_gpus_per_node" not in cluster and report.entry("trainer.n_gpus_per_node") is None
    assert report.devices_from_machine == 0


def test_a_count_the_line_names_is_kept(machine_gpus):
    machine_gpus(8)
    cluster, report = _cluster(["trainer.n_gpus_per_node=2"])
    assert cluster["n_gpus_per_node"] == 2 and report.devices_from_machine is None
    assert "machine" not in report.entry("trainer.n_gpus_per_node").reason


@pytest.mark.parametrize("gpus, per_process", [(4, 2), (0, 16)])
def test_verl_nodes_multiply_the_machines_gpus(machine_gpus, gpus, per_process):
    # a global micro-batch is divided by nnodes x the devices per node (verl's workers do the same)
    machine_gpus(gpus)
    native, _, _ = verl_launch.launch(None, ["trainer.nnodes=2", "actor_rollout_ref.actor.ppo_micro_batch_size=16"])
    assert native["cluster"]["nnodes"] == 2
    assert native["cluster"].get("n_gpus_per_node", 0) == gpus
    assert native["actor"]["ppo_micro_batch_size_per_gpu"] == per_process


ROLL = {"actor_train": {"device_mapping": "list(range(0,16))"}, "actor_infer": {"device_mapping": "list(range(0,16))"}}


@pytest.mark.parametrize("gpus, nodes, per_node", [(8, 2, 8), (4, 4, 4), (0, 2, None)])
def test_roll_nodes_follow_the_mapping_over_the_machines_gpus(machine_gpus, gpus, nodes, per_node):
    # ROLL: as many nodes of this machine's GPUs as the highest mapped device needs; without GPUs its
    # default 8 reads the mapping (2 nodes) and the run is one process
    machine_gpus(gpus)
    native, report = translate(ROLL, "roll")
    assert native["cluster"]["nnodes"] == nodes
    assert native["cluster"].get("n_gpus_per_node") == per_node
    assert native["cluster"]["device_mapping"]["actor"] == []  # every device of the cluster: colocated
    assert report.devices_from_machine == gpus
    if gpus:
        assert "ROLL's default 8 describes ROLL's machine" in report.entry("num_gpus_per_node").reason


def test_roll_count_the_file_names_is_kept(machine_gpus):
    machine_gpus(8)
    native, report = translate({**ROLL, "num_gpus_per_node": 16}, "roll")
    assert (native["cluster"].get("nnodes", 1), native["cluster"]["n_gpus_per_node"]) == (1, 16)
    assert report.devices_from_machine is None


def _problems(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        foreign_native("verl", None, overrides)
    return [p for p in err.value.problems if "ulysses" in p]


def _sweep_lacks(problem: str) -> list[str]:
    spec = importlib.util.spec_from_file_location("foreign_corpus", SWEEP)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)  # the corpus sweep's patterns of what a machine lacks (MACHINE)
    return [name for name, pattern in sweep.MACHINE if pattern.search(problem)]


def test_a_size_the_machines_processes_do_not_meet_is_the_machines_lack(machine_gpus):
    machine_gpus(0)
    (problem,) = _problems([ULYSSES_2])
    assert ("actor.ulysses_sequence_parallel_size=2 needs a multiple of 2 worker processes; this machine gives 1 "
            "(no GPU here; the file leaves the device count to the machine)") in problem
    assert machine_refusal(problem)
    assert "GPUs for its parallel sizes" in _sweep_lacks(problem)

    machine_gpus(1)  # one GPU here: still fewer processes than the size
    (problem,) = _problems([ULYSSES_2])
    assert "this machine gives 1 (1 GPU per node here; the file leaves the device count to the machine)" in problem

    machine_gpus(8)  # the user's node: the size divides the 8 processes
    assert foreign_native("verl", None, [ULYSSES_2])["cluster"]["n_gpus_per_node"] == 8


def test_a_count_the_line_names_that_a_size_does_not_divide_stays_a_config_error(machine_gpus):
    machine_gpus(8)
    (problem,) = _problems([ULYSSES_2, "trainer.n_gpus_per_node=1"])
    assert "actor.ulysses_sequence_parallel_size=2 does not divide the 1 worker process(es)" in problem
    assert LEFT_TO_MACHINE not in problem
    assert not machine_refusal(problem) and _sweep_lacks(problem) == []


def test_smoke_runs_the_size_the_machine_lacks_as_one_process(machine_gpus, tmp_path):
    from posttrain.config.load import load_config
    from posttrain.trainer.smoke import smoke_config

    machine_gpus(0)
    config, lines = smoke_config(None, [ULYSSES_2], "verl", tmp_path / "w")
    assert "actor.ulysses_sequence_parallel_size: 2 -> 1 (one process splits no sequence)" in lines
    cfg = load_config(str(config))
    assert (cfg.cluster.n_gpus_per_node, cfg.actor.ulysses_sequence_parallel_size) == (0, 1)
    with pytest.raises(ConfigError, match="does not divide the 1 worker process"):  # the user's own count: theirs to fix
        smoke_config(None, [ULYSSES_2, "trainer.n_gpus_per_node=1"], "verl", tmp_path / "x")


def test_a_size_no_cluster_of_the_framework_could_run_stays_a_config_error(machine_gpus):
    # 3 divides neither this machine's 1 process nor the 8 of verl's default node: the line's to fix
    machine_gpus(0)
    (problem,) = _problems(["actor_rollout_ref.actor.ulysses_sequence_parallel_size=3"])
    assert "does not divide the 1 worker process" in problem and LEFT_TO_MACHINE not in problem
    assert not machine_refusal(problem)


def test_machine_doctests():
    import doctest

    from posttrain.config.dialects import machine

    assert doctest.testmod(machine).attempted >= 2 and doctest.testmod(machine).failed == 0
