"""Exact resume of LoRA runs: a run training adapters on the actor and the critic (with the reference
as the adapters-off model), SIGKILLed mid-training and rerun, logs the same metrics and ends with the
same merged final model and adapter as an uninterrupted run; its checkpoints hold the adapters and
their optimizer state only. A checkpoint resumed with LoRA switched on or off is refused by name."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from posttrain.checkpoint import MARKER
from posttrain.cli import main as cli_main
from test_resume_exact import _assert_same_run, _train_in_process, _train_killed, _write, assets, one_thread  # noqa: F401

LORA_RL = """
data: {{train_files: {d}/train.parquet, val_files: {d}/test.parquet, train_batch_size: 8, max_prompt_length: 32, max_response_length: 6}}
model: {{path: {m}, lora_rank: 4, lora_alpha: 8, target_modules: [q_proj, v_proj, down_proj, lm_head]}}
rollout: {{n: 4}}
actor: {{ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 16, shuffle: true, use_kl_loss: true, optim: {{lr: 1e-2}}}}
critic: {{ppo_mini_batch_size: 4, model: {{lora_rank: 2}}, optim: {{lr: 1e-2}}}}
algorithm: {{adv_estimator: gae}}
trainer: {{total_training_steps: {steps}, test_freq: 2, save_freq: 1, logger: [jsonl], default_local_dir: {r}}}
"""


def test_a_lora_run_killed_mid_training_resumes_exactly(assets, one_thread, capsys):  # noqa: F811
    root, _ = assets
    _train_in_process(_write(root, "lora_ref", LORA_RL, 4), capsys)
    resumed = _write(root, "lora_killed", LORA_RL, 4)
    _train_killed(resumed, "main:2:after_step")
    ckpts = root / "lora_killed" / "checkpoints"
    assert (ckpts / MARKER).read_text().strip() == "2"
    for role in ("actor", "critic"):
        files = sorted(p.name for p in (ckpts / "global_step_2" / role).iterdir())
        assert "adapter_model.safetensors" in files and "optimizer.pt" in files and "model.safetensors" not in files
    out = _train_in_process(resumed, capsys)
    assert "global_step_2 (after step 2)" in out
    _assert_same_run(root / "lora_ref", root / "lora_killed")
    a = load_file(str(root / "lora_ref" / "final_model" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(root / "lora_killed" / "final_model" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


LORA_KEYS = "lora_rank: 4, lora_alpha: 8, target_modules: [q_proj, v_proj, down_proj, lm_head]"


@pytest.mark.parametrize("before, after, message", [
    (LORA_KEYS, "lora_rank: 0", "holds a LoRA adapter, but this run trains all weights"),
    (LORA_KEYS, "lora_rank: 4, lora_alpha: 8, target_modules: [q_proj]", "the adapter does not fit the model's"),
    ("lora_rank: 0", LORA_KEYS, "holds whole weights, but this run trains a LoRA adapter"),
], ids=["lora off", "other targets", "lora on"])
def test_resuming_across_a_lora_change_is_refused(assets, one_thread, capsys, tmp_path, before, after, message):  # noqa: F811
    root, _ = assets
    name = f"lora_change_{tmp_path.name}"
    config = _write(root, name, LORA_RL.replace(LORA_KEYS, before).replace("model: {{lora_rank: 2}}, ", ""), 3)
    _train_killed(config, "main:1:after_step")
    config.write_text(config.read_text().replace(before, after))
    capsys.readouterr()
    assert cli_main(["train", str(config)]) == 2
    assert message in capsys.readouterr().err
