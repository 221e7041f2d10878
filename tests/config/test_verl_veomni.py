"""verl 0.10's VeOmni engine (`model_engine=veomni`) on posttrain's FSDP2.

The line starts from verl's VeOmni tree (posttrain/config/dialects/verl_0_10_veomni_defaults.yaml);
its `veomni` sections and VeOmni optimizer translate as posttrain.config.dialects.verl_veomni says.
The LR schedule is checked against VeOmni's own formulas, written out here.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch

from posttrain.cli import main
from posttrain.config import validate
from posttrain.config.dialects import verl_launch
from posttrain.config.derive import derive
from posttrain.models.tiny import make_tiny_model
from posttrain.optim.build import build_optimization
from posttrain.tasks import write_task_data

V, RV, CV = "actor_rollout_ref.actor.veomni.", "actor_rollout_ref.ref.veomni.", "critic.veomni."
OPT = "actor_rollout_ref.actor.optim."
SCENARIOS = {
    "engine": ("model_engine=veomni", V + "param_offload=True", V + "optimizer_offload=True", V + "ulysses_parallel_size=2",
               V + "expert_parallel_size=8", V + "fsdp_size=4", V + "enable_fsdp_offload=True", V + "attn_implementation=flash_attention_2",
               V + "moe_implementation=fused_triton", V + "cross_entropy_loss_implementation=liger_kernel", V + "entropy_checkpointing=True",
               V + "enable_full_shard=False", V + "router_replay.mode=R2", V + "seed=7", RV + "param_offload=True",
               RV + "optimizer_offload=True", RV + "ulysses_parallel_size=2", CV + "ulysses_parallel_size=4", "actor_rollout_ref.actor.pad_to_length=True"),
    "schedule": ("model_engine=veomni", "trainer.total_training_steps=20", OPT + "lr=1e-5", OPT + "lr_warmup_steps_ratio=0.15",
                 OPT + "lr_start=1e-6", OPT + "lr_min=2e-6", OPT + "lr_decay_ratio=0.6", OPT + "lr_warmup_steps=3",
                 "+" + OPT + "override_optimizer_config.foreach=false"),
    "constant": ("model_engine=veomni", OPT + "lr_scheduler_type=constant", OPT + "lr_min=1e-7", OPT + "lr_decay_ratio=0.5"),
    "refused": ("model_engine=veomni", V + "mixed_precision=False", V + "attn_implementation=native-sparse", V + "full_determinism=True",
                V + "load_checkpoint_path=/ckpt", CV + "router_replay.mode=R2", OPT + "lr_decay_ratio=0.5", OPT + "optimizer=muon",
                "critic.optim.lr_scheduler_type=linear", V + "forward_only=True"),
}


@functools.lru_cache(maxsize=None)
def entries(scenario: str) -> dict[str, tuple[str, str | None, object, str]]:
    """foreign key -> (status, native, value, reason) of the launch line `SCENARIOS[scenario]`."""
    _, report, _ = verl_launch.launch(None, list(SCENARIOS[scenario]))
    out: dict[str, tuple[str, str | None, object, str]] = {}
    for e in report.entries:
        out.setdefault(e.key, (e.status, e.native, e.value, e.reason))
    return out


@pytest.mark.parametrize("scenario, key, expected", [
    # the engine: FSDP2 and Ulysses, as posttrain's
    ("engine", "actor_rollout_ref.actor.strategy", ("dropped", None)),
    ("engine", V + "param_offload", ("translated", "actor.fsdp_config.param_offload", True)),
    ("engine", V + "optimizer_offload", ("translated", "actor.fsdp_config.optimizer_offload", True)),
    ("engine", V + "enable_fsdp_offload", ("translated", "actor.fsdp_config.offload_policy", True)),
    ("engine", V + "fsdp_size", ("translated", "actor.fsdp_config.fsdp_size", 4)),
    ("engine", V + "ulysses_parallel_size", ("translated", "actor.ulysses_sequence_parallel_size", 2)),
    ("engine", RV + "ulysses_parallel_size", ("dropped", None)),  # the actor's: posttrain's reference follows it
    ("engine", CV + "ulysses_parallel_size", ("translated", "critic.ulysses_sequence_parallel_size", 4)),
    ("engine", RV + "param_offload", ("translated", "ref.fsdp_config.param_offload", True)),
    ("engine", RV + "optimizer_offload", ("dropped", None)),
    ("engine", V + "entropy_checkpointing", ("translated", "actor.entropy_checkpointing", True)),
    ("engine", V + "router_replay.mode", ("translated", "actor.router_replay.mode", "R2")),
    # where and how fast, not what: dropped with the reason
    ("engine", V + "expert_parallel_size", ("dropped", None)),
    ("engine", V + "enable_full_shard", ("dropped", None)),
    ("engine", V + "attn_implementation", ("dropped", None)),
    ("engine", V + "moe_implementation", ("dropped", None)),
    ("engine", V + "cross_entropy_loss_implementation", ("dropped", None)),
    ("engine", V + "seed", ("dropped", None)),  # VeOmni reads it only with full_determinism
    ("engine", "actor_rollout_ref.actor.pad_to_length", ("dropped", None)),
    # VeOmni's schedule keys
    ("schedule", OPT + "lr_scheduler_type", ("translated", "actor.optim.lr_scheduler_type", "cosine")),  # the tree's default
    ("schedule", OPT + "lr_start", ("translated", "actor.optim.lr_warmup_init", 1e-6)),
    ("schedule", OPT + "lr_min", ("translated", "actor.optim.min_lr_ratio", pytest.approx(0.2))),
    ("schedule", OPT + "lr_decay_ratio", ("translated", "actor.optim.lr_decay_steps", 12)),
    ("schedule", OPT + "lr_warmup_steps", ("dropped", None)),  # VeOmni warms up by the ratio only
    ("schedule", OPT + "override_optimizer_config", ("dropped", None)),  # verl hands VeOmni's optimizer none of it
    ("constant", OPT + "lr_scheduler_type", ("translated", "actor.optim.lr_scheduler_type", "constant")),
    ("constant", OPT + "lr_min", ("dropped", None)),
    ("constant", OPT + "lr_decay_ratio", ("dropped", None)),
])
def test_each_veomni_key_lands_on_what_it_means(scenario, key, expected):
    got = entries(scenario)[key]
    assert got[: len(expected)] == expected, got


@pytest.mark.parametrize("key, reason", [
    (V + "mixed_precision", "without an fp32 copy"),
    (V + "attn_implementation", "native sparse attention"),
    (V + "full_determinism", "deterministic kernels"),
    (V + "load_checkpoint_path", "resumes from its own checkpoints"),
    (CV + "router_replay.mode", "the actor's routing only"),
    (OPT + "lr_decay_ratio", "give trainer.total_training_steps"),
    (OPT + "optimizer", "adamw"),
    ("critic.optim.lr_scheduler_type", "floors at an absolute 1e-7"),
    (V + "forward_only", "never train"),
])
def test_what_changes_the_numbers_and_has_no_twin_is_refused_with_the_reason(key, reason):
    status, _, _, why = entries("refused")[key]
    assert status == "refused" and reason in why, why


def _veomni_cosine(step: int, *, total: int, lr: float, warmup_ratio: float, decay_ratio: float, lr_min: float, lr_start: float) -> float:
    """VeOmni's get_cosine_schedule_with_warmup (veomni/optim/lr_scheduler.py), as a learning rate."""
    warmup, decay = int(total * warmup_ratio), int(total * decay_ratio)
    if step < warmup:
        return lr_start + (lr - lr_start) * step / max(1, warmup)
    if step > decay:
        return lr_min
    progress = (step - warmup) / max(1, decay - warmup)
    return lr * ((0.5 * (1.0 + math.cos(math.pi * progress))) * (1 - lr_min / lr) + lr_min / lr)


def test_the_translated_schedule_is_veomni_s_cosine_step_by_step():
    native, report, _ = verl_launch.launch(None, list(SCENARIOS["schedule"]))
    cfg = validate(native)
    derived = derive(cfg, 100_000)
    assert derived.actor_warmup_steps == 3  # int(20 x 0.15), as VeOmni floors it
    optimizer, scheduler = build_optimization([torch.nn.Parameter(torch.zeros(1))], cfg.actor.optim,
                                              warmup_steps=derived.actor_warmup_steps, total_steps=20)
    for step in range(20):
        want = _veomni_cosine(step, total=20, lr=1e-5, warmup_ratio=0.15, decay_ratio=0.6, lr_min=2e-6, lr_start=1e-6)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(want, rel=1e-9, abs=1e-15), step
        optimizer.step()
        scheduler.step()


def test_a_veomni_launch_line_plans_on_a_tiny_model(tmp_path: Path, capsys):
    make_tiny_model(tmp_path / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", tmp_path / "data", train=16, test=4)
    line = ["model_engine=veomni", "algorithm.adv_estimator=grpo", f"data.train_files={tmp_path}/data/train.parquet",
            f"data.val_files={tmp_path}/data/test.parquet", "data.train_batch_size=4", "data.max_prompt_length=32",
            "data.max_response_length=8", f"actor_rollout_ref.model.path={tmp_path}/model", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.rollout.n=4", "trainer.logger=[console]",
            "trainer.total_epochs=1", V + "attn_implementation=eager", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.5"]
    assert main(["config", "plan", "--dialect", "verl", *line]) == 0
    out = capsys.readouterr().out
    assert "actor LR warm-up steps          2   (int(actor.optim.lr_warmup_steps_ratio 0.5" in out
