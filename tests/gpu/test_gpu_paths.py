"""The CUDA path of one process: roles built on the GPU in bf16 by default, the engine's samples and
log-probs there, and a GRPO run through the CLI with `cluster.n_gpus_per_node=1` that learns.

Skipped where torch sees no GPU (CI and the development machines); run on a GPU machine with
`python -m pytest -n 0 tests/gpu`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posttrain.cluster.world import World
from posttrain.config import derive, load_config
from posttrain.models.loading import tokenizer_from_config
from posttrain.models.tiny import make_tiny_model
from posttrain.records import PromptBatch
from posttrain.rollout import SamplingParams
from posttrain.trainer.rl_build import build_roles

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none here)")


def gpu_roles(tmp_path: Path, *overrides: str):
    model_dir = make_tiny_model(tmp_path / "m", layers=2, hidden=64, heads=4)
    cfg = load_config(None, [f"model.path={model_dir}", "rollout.response_length=8", "cluster.n_gpus_per_node=1",
                             "actor.use_kl_loss=true", *overrides])
    return build_roles(cfg, derive(cfg, 64), tokenizer_from_config(cfg.model), World(device="cuda"))


def test_roles_live_on_the_gpu_and_compute_in_bf16_by_default(tmp_path):
    r = gpu_roles(tmp_path)
    assert r.actor.s.compute_dtype == "bf16"  # param_dtype auto on a GPU
    assert {p.device.type for p in r.actor.model.parameters()} == {"cuda"}
    assert {p.dtype for p in r.actor.model.parameters()} == {torch.float32}  # fp32 master weights
    assert {p.dtype for p in r.engine.model.parameters()} == {torch.bfloat16}  # rollout.dtype auto follows
    assert r.engine.device.type == "cuda" and r.engine.model is not r.actor.model


def test_engine_samples_on_the_gpu_and_its_log_probs_match_the_actor(tmp_path):
    r = gpu_roles(tmp_path)
    prompts = PromptBatch(torch.tensor([[5, 6, 7], [8, 9, 10]], device="cuda"), torch.ones(2, 3, device="cuda"), uid=["p", "q"])
    out = r.engine.generate(prompts, SamplingParams(n=4, max_new_tokens=8), expected_version=0)
    assert out.response_ids.device.type == "cuda" and out.response_ids.shape[0] == 8
    actor = r.actor.compute_logprobs(out)  # fp32 weights under bf16 autocast vs the engine's bf16 copy
    real = out.response_mask > 0
    gap = (actor - out.rollout_logprobs)[real].abs().max().item()
    assert gap < 0.1, gap  # bf16 rounding apart, the same distribution
    ref = r.reference.compute_logprobs(out)
    torch.testing.assert_close(ref[real], actor[real], atol=0.05, rtol=0)  # no update yet: the same policy


def test_update_then_sync_changes_the_engine_weights_on_the_gpu(tmp_path):
    r = gpu_roles(tmp_path)
    before = next(r.engine.model.parameters()).detach().clone()
    with torch.no_grad():
        for p in r.actor.model.parameters():
            p.add_(0.01)
    r.sync.push(1)
    after = next(r.engine.model.parameters())
    assert r.engine.weights_version == 1 and not torch.equal(before, after)
    torch.testing.assert_close(after, next(r.actor.model.parameters()).to(torch.bfloat16))


CONFIG = """
data: {{train_files: data/train.parquet, val_files: data/test.parquet, train_batch_size: 16, max_prompt_length: 32, max_response_length: 8}}
model: {{path: model}}
rollout: {{n: 8}}
actor: {{ppo_mini_batch_size: 16, ppo_micro_batch_size_per_gpu: 128, optim: {{lr: 1e-4}}}}
cluster: {{n_gpus_per_node: 1}}
trainer: {{total_training_steps: 80, test_freq: -1, val_before_train: false, logger: [console, jsonl], default_local_dir: run}}
stages:
  - name: sft
    algorithm: {{kind: sft}}
    data: {{train_files: data/sft_train.parquet, val_files: [], train_batch_size: 64}}
    actor: {{optim: {{lr: 1e-3}}, ppo_micro_batch_size_per_gpu: 64}}
    trainer: {{total_training_steps: 30}}
  - name: grpo
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "posttrain", *args], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def test_sft_then_grpo_on_one_gpu_raises_the_training_reward(tmp_path):
    _cli("make-model", "tiny", "model", cwd=tmp_path)
    _cli("make-data", "sort", "data", "--train", "2000", "--test", "50", "--seed", "1", cwd=tmp_path)
    (tmp_path / "run.yaml").write_text(CONFIG.format())
    out = _cli("train", "run.yaml", cwd=tmp_path)
    assert "posttrain: 1 process on cuda:0" in out.stdout
    rows = [json.loads(line) for line in (tmp_path / "run" / "grpo" / "metrics.jsonl").read_text().splitlines()]
    scores = [r["critic/score/mean"] for r in rows if "critic/score/mean" in r]
    assert sum(scores[-10:]) / 10 > sum(scores[:10]) / 10 + 0.05, scores
    peaks = [v for r in rows for k, v in r.items() if k.startswith("perf/peak_memory_gb_by_role/")]
    assert peaks and max(peaks) > 0
