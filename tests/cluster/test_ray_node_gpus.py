"""Ray workers whose sglang engine spans several processes' GPUs see their node's GPUs.

Ray is started here with 4 declared GPUs on this CPU machine: Ray hands them out (and, unless told
not to, sets each actor's CUDA_VISIBLE_DEVICES) as on a GPU node, so which GPUs each worker sees and
which one it takes (LOCAL_RANK) is checked without a GPU. Each worker runs a stand-in for the
`posttrain` command's main that writes down its environment.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from posttrain.cluster.placement import WorldPlan
from posttrain.cluster.ray_launch import NOSET, _run_actors, visible_index
from posttrain.config import load_config
from posttrain.config.access import engine_spans_workers


def test_a_ray_gpu_id_is_found_among_the_devices_the_process_sees():
    assert visible_index("3", None) == 3
    assert visible_index("6", "4,5,6,7") == 2  # the node's Ray was started under CUDA_VISIBLE_DEVICES=4,5,6,7
    assert visible_index("2", "4,5,6,7") is None


def test_only_an_sglang_engine_shared_by_worker_processes_needs_them_to_see_the_node():
    def cfg(*overrides):
        return load_config(None, ["cluster.n_gpus_per_node=4", "cluster.device_mapping.rollout=[0,1]", *overrides])

    assert engine_spans_workers(cfg("rollout.name=sglang", "rollout.tensor_model_parallel_size=2"))
    assert not engine_spans_workers(cfg("rollout.name=sglang"))
    assert not engine_spans_workers(cfg("rollout.name=vllm", "rollout.tensor_model_parallel_size=2"))
    # an explorer process holds a whole engine over GPUs Ray gives its actor alone
    assert not engine_spans_workers(cfg("rollout.name=sglang", "rollout.tensor_model_parallel_size=2", "trainer.mode=explore"))


def _record(out: str):
    def entry(argv: list[str]) -> int:  # pickled by value into each actor
        import os

        keys = ("POSTTRAIN_RANK", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES")
        with open(f"{out}/{argv[0]}-{os.environ['POSTTRAIN_RANK']}.json", "w") as f:
            json.dump({k: os.environ.get(k) for k in keys}, f)
        return 0

    return entry


@pytest.mark.slow
def test_ray_workers_see_their_own_gpu_or_with_a_shared_sglang_engine_their_node_s(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is in the test extra")
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, namespace="node-gpus-test", configure_logging=False)
    try:
        plan = WorldPlan(size=4, device="cuda", launcher="ray", ray_address=None)
        cluster = types.SimpleNamespace(env_vars={})
        bundle = {"CPU": 1, "GPU": 1}
        for label, node_gpus in (("own", False), ("node", True)):
            group = placement_group([bundle] * 4, strategy="PACK")
            ray.get(group.ready(), timeout=60)
            try:
                code = _run_actors(ray, group, bundle, _record(str(tmp_path)), [label], plan, tmp_path, cluster,
                                   PlacementGroupSchedulingStrategy, None, node_gpus=node_gpus)
            finally:
                remove_placement_group(group)
            assert code == 0
    finally:
        ray.shutdown()
    seen = {label: [json.loads(Path(tmp_path, f"{label}-{r}.json").read_text()) for r in range(4)] for label in ("own", "node")}
    # by default Ray shows each actor its one GPU, which it uses as device 0
    assert sorted(s["CUDA_VISIBLE_DEVICES"] for s in seen["own"]) == ["0", "1", "2", "3"]
    assert {s["LOCAL_RANK"] for s in seen["own"]} == {"0"}
    # shared engine: every actor sees the node's GPUs, ranks follow the GPUs, and each takes its own
    assert [s["CUDA_VISIBLE_DEVICES"] for s in seen["node"]] == [None] * 4
    assert [s[NOSET] for s in seen["node"]] == ["1"] * 4
    assert [(s["POSTTRAIN_RANK"], s["LOCAL_RANK"]) for s in seen["node"]] == [("0", "0"), ("1", "1"), ("2", "2"), ("3", "3")]
