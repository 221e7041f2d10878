"""What each trainer checkpoint option changes, on short in-process SFT runs (the shared fit loop)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from posttrain.checkpoint import CheckpointError
from posttrain.config import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from posttrain.trainer.run import run


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("options")
    model = make_tiny_model(root / "model", layers=1, hidden=32, seed=0)
    paths = write_task_data("sort", root / "data", train=8, test=8, sft=24, dpo=0, seed=0)
    return root, model, paths


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def sft(assets, run_dir, *extra):
    root, model, paths = assets
    return load_config(None, [
        f"model.path={model}", f"data.train_files=[{paths['sft']}]", "algorithm.kind=sft", "data.train_batch_size=8",
        "actor.ppo_micro_batch_size_per_gpu=8", "actor.optim.lr=1e-3", "trainer.total_training_steps=3",
        "trainer.logger=[jsonl]", "data.max_length=64", f"trainer.default_local_dir={run_dir}", *extra,
    ])


def losses(run_dir):
    return [json.loads(line)["sft/loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_always_copies_every_checkpoint_and_checkpoint_dir_moves_them(assets, tmp_path):
    run_dir, ckpt_dir = tmp_path / "run", tmp_path / "elsewhere"
    run(sft(assets, run_dir, "trainer.save_freq=2", "trainer.save_hf_checkpoint=always", f"trainer.checkpoint_dir={ckpt_dir}"))
    assert sorted(p.name for p in ckpt_dir.iterdir() if p.is_dir()) == ["global_step_2", "global_step_3"]  # every 2 + the last
    assert not (run_dir / "checkpoints").exists()
    for step in (2, 3):
        copy = run_dir / "hf_checkpoints" / f"global_step_{step}"
        assert AutoModelForCausalLM.from_pretrained(copy) is not None and not (copy / "optimizer.pt").exists()
    assert (run_dir / "final_model" / "model.safetensors").is_file()


def test_never_leaves_the_final_model_in_the_last_checkpoint(assets, tmp_path):
    [result] = run(sft(assets, tmp_path / "run", "trainer.save_freq=2", "trainer.save_hf_checkpoint=never"))
    assert result.final_model == tmp_path / "run" / "checkpoints" / "global_step_3" / "actor"
    assert not (tmp_path / "run" / "final_model").exists()
    with pytest.raises(CheckpointError, match="save_freq > 0"):
        run(sft(assets, tmp_path / "run2", "trainer.save_hf_checkpoint=never"))


def test_resume_path_load_contents_and_delete_after_load(assets, tmp_path):
    ref = tmp_path / "ref"
    run(sft(assets, ref, "trainer.save_freq=1"))
    step2 = ref / "checkpoints" / "global_step_2"
    # Weights only (no optimizer/schedule/sampler): the run continues, but not exactly.
    run(sft(assets, tmp_path / "weights_only", "trainer.resume_mode=resume_path", f"trainer.resume_from_path={step2}",
            "actor.checkpoint.load_contents=[model]"))
    assert losses(tmp_path / "weights_only") != losses(ref)[2:]
    # Everything: step 3 is exactly the reference's step 3; the loaded checkpoint is then deleted.
    exact = tmp_path / "exact"
    run(sft(assets, exact, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={step2}",
            "trainer.del_local_ckpt_after_load=true"))
    assert losses(exact) == losses(ref)[2:]
    a, b = load_file(str(ref / "final_model" / "model.safetensors")), load_file(str(exact / "final_model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not step2.exists() and (ref / "checkpoints" / "global_step_3").is_dir()
