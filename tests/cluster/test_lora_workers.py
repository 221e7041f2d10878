"""LoRA on two gloo worker processes (`cluster.n_gpus_per_node=2`): the FSDP2-sharded actor and critic
train their adapters as one process does (SFT -> DPO -> GRPO with a critic and the KL loss, so the
reference runs as the sharded actor with its adapters off, and the engine gets merged weights
gathered one tensor at a time); checkpoints hold the whole adapter (no per-rank shards), so a run
killed on one process resumes on two; export merges the two-worker checkpoint's adapter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_run_helpers import posttrain
from safetensors.torch import load_file

from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from test_launch import assert_same_run, metrics, train

CONFIG = """
data: {{train_files: {d}/train.parquet, val_files: {d}/test.parquet, train_batch_size: 4, max_prompt_length: 32, max_response_length: 6}}
model: {{path: {m}, lora_rank: 4, lora_alpha: 8}}
rollout: {{n: 4}}
actor: {{ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 4, use_kl_loss: true, optim: {{lr: 1e-2}}}}
critic: {{ppo_mini_batch_size: 2, model: {{lora_rank: 2}}}}
algorithm: {{adv_estimator: gae}}
trainer: {{total_training_steps: 3, save_freq: 1, test_freq: 3, logger: [console, jsonl]}}
stages:
  - name: sft
    algorithm: {{kind: sft}}
    data: {{train_files: {d}/sft_train.parquet, val_files: [], train_batch_size: 8}}
    trainer: {{total_training_steps: 2}}
  - name: dpo
    algorithm: {{kind: dpo}}
    data: {{train_files: {d}/dpo_train.parquet, val_files: [], train_batch_size: 4}}
    trainer: {{total_training_steps: 2}}
  - name: rl
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lora_workers")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=16, test=4, sft=16, dpo=8)
    (root / "run.yaml").write_text(CONFIG.format(d=root / "data", m=root / "model"))
    return root


@pytest.fixture(scope="module")
def one_process(inputs: Path) -> str:
    out = train(inputs, "single", 0)
    assert out.returncode == 0, out.stderr[-3000:]
    return "single"


@pytest.mark.slow
def test_two_workers_train_the_adapters_as_one_process(inputs, one_process, tmp_path):
    out = train(inputs, "two", 2)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "posttrain: 2 worker processes on cpu" in out.stdout
    assert_same_run(inputs, one_process, "two")
    assert {r["dist/world_size"] for r in metrics(inputs, "two", "rl") if "dist/world_size" in r} == {2.0}
    checkpoint = inputs / "two" / "rl" / "checkpoints" / "global_step_3"
    for role in ("actor", "critic"):  # the whole adapter, written once, not one shard per rank
        assert (checkpoint / role / "adapter_model.safetensors").is_file() and not (checkpoint / role / "dcp").exists()
    final = load_file(str(inputs / "two" / "rl" / "final_model" / "model.safetensors"))
    single = load_file(str(inputs / one_process / "rl" / "final_model" / "model.safetensors"))
    assert final.keys() == single.keys() and all(torch.allclose(final[k], single[k], atol=1e-5) for k in final)
    merged = posttrain("export", str(checkpoint), str(tmp_path / "hf"), "--merge", cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr[-3000:]
    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert all(torch.allclose(exported[k], final[k], atol=1e-6) for k in final)


@pytest.mark.slow
def test_a_lora_run_killed_on_one_process_resumes_on_two(inputs, one_process):
    out = train(inputs, "from0to2", 0, "rl:2:after_step")
    assert out.returncode != 0
    again = train(inputs, "from0to2", 2)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "after step 2" in again.stdout
    assert_same_run(inputs, one_process, "from0to2")
