"""Derived numbers (steps, warm-up, lengths, world size), row counting, and the printed batch plan."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posttrain.config import Derived, count_rows, derive, load_config
from posttrain.config.plan import batch_plan, format_plan
from posttrain.errors import ConfigError

BASE = [
    "data.train_batch_size=8",
    "rollout.n=8",
    "actor.ppo_mini_batch_size=2",
    "actor.ppo_micro_batch_size_per_gpu=8",
    "actor.use_dynamic_bsz=false",
    "actor.ppo_epochs=1",
    "data.max_prompt_length=512",
    "data.max_response_length=256",
    "algorithm.adv_estimator=grpo",
    "cluster.nnodes=1",
    "cluster.n_gpus_per_node=0",
    "trainer.total_epochs=3",
    "trainer.total_training_steps=null",
    "actor.optim.lr_warmup_steps=-1",
    "actor.optim.lr_warmup_steps_ratio=0.1",
]


def cfg_with(*overrides: str):
    return load_config(None, BASE + list(overrides))


def test_steps_drop_the_last_partial_batch_and_warmup_follows_the_ratio():
    d = derive(cfg_with(), train_dataset_size=100)
    assert (d.steps_per_epoch, d.total_training_steps, d.actor_warmup_steps) == (12, 36, 3)  # 100 // 8 = 12
    assert (d.max_model_len, d.world_size) == (768, 1)


def test_explicit_total_steps_and_warmup_steps_win():
    d = derive(cfg_with("trainer.total_training_steps=50", "actor.optim.lr_warmup_steps=5"), 100)
    assert (d.total_training_steps, d.actor_warmup_steps) == (50, 5)


def test_lr_schedule_unit_update_counts_optimizer_updates():
    # 36 steps; 8 prompts / mini-batches of 2 = 4 updates per epoch, 2 epochs: 8 updates a step
    d = derive(cfg_with("actor.ppo_epochs=2", "actor.optim.lr_schedule_unit=update", "actor.optim.lr_warmup_steps_ratio=0.01"), 100)
    assert (d.total_training_steps, d.actor_schedule_steps, d.actor_warmup_steps) == (36, 288, 2)  # int(2.88)
    assert derive(cfg_with("actor.ppo_epochs=2", "actor.optim.lr_warmup_steps_ratio=0.01"), 100).actor_warmup_steps == 0  # int(0.36)
    ceil = derive(cfg_with("actor.ppo_epochs=2", "actor.optim.lr_schedule_unit=update", "actor.optim.lr_warmup_steps_ratio=0.01",
                           "actor.optim.lr_warmup_rounding=ceil"), 100)
    assert ceil.actor_warmup_steps == 3  # ceil(2.88), as Hugging Face and ROLL round
    # the critic counts its own updates: 8 prompts / mini-batches of 4, one epoch = 2 a step
    critic = derive(cfg_with("algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=4", "critic.optim.lr_warmup_steps=-1",
                             "critic.optim.lr_warmup_steps_ratio=0.05", "critic.optim.lr_schedule_unit=update"), 100)
    assert (critic.critic_schedule_steps, critic.critic_warmup_steps) == (72, 3)  # int(3.6)
    critic_ceil = derive(cfg_with("algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=4", "critic.optim.lr_warmup_steps=-1",
                                  "critic.optim.lr_warmup_steps_ratio=0.05", "critic.optim.lr_warmup_rounding=ceil"), 100)
    assert (critic_ceil.critic_schedule_steps, critic_ceil.critic_warmup_steps) == (36, 2)  # per step: ceil(1.8)
    with pytest.raises(ConfigError, match=r"longer than the run \(288 optimizer updates\)"):
        derive(cfg_with("actor.ppo_epochs=2", "actor.optim.lr_schedule_unit=update", "actor.optim.lr_warmup_steps=300"), 100)


def test_lr_schedule_updates_fixes_the_schedules_length_and_the_lr_holds_past_it():
    """optim.lr_schedule_updates (ROLL's horizon with step env managers): the schedule is 6 updates
    long whatever the steps make; warm-up ceil(0.25 x 6) = 2; past update 6 the decay's end holds."""
    import torch

    from posttrain.optim.build import build_optimization

    fixed = ("actor.optim.lr_schedule_unit=update", "actor.optim.lr_schedule_updates=6", "actor.optim.lr_warmup_steps_ratio=0.25",
             "actor.optim.lr_warmup_rounding=ceil", "actor.optim.lr=1.0")
    d = derive(cfg_with(*fixed), 100)
    assert (d.total_training_steps, d.actor_schedule_steps, d.actor_warmup_steps) == (36, 6, 2)  # not 36 x 4 updates
    expected = {  # LR of updates 0..8: warm-up k / 2, then the decay over updates 2..6, then its end
        "linear": [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0, 0.0],
        "cosine": [0.0, 0.5, 1.0, 0.5 + 0.5 * 2**-0.5, 0.5, 0.5 - 0.5 * 2**-0.5, 0.0, 0.0, 0.0],  # 0.5 (1 + cos(pi (k - 2) / 4))
    }
    for kind, lrs in expected.items():
        cfg = cfg_with(*fixed, f"actor.optim.lr_scheduler_type={kind}")
        optimizer, scheduler = build_optimization([torch.nn.Parameter(torch.zeros(1))], cfg.actor.optim,
                                                  warmup_steps=d.actor_warmup_steps, total_steps=d.actor_schedule_steps)
        seen = []
        for _ in lrs:
            seen.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        assert seen == pytest.approx(lrs), kind
    critic = derive(cfg_with("algorithm.adv_estimator=gae", "critic.optim.lr_schedule_unit=update", "critic.optim.lr_schedule_updates=5"), 100)
    assert critic.critic_schedule_steps == 5
    with pytest.raises(ConfigError, match=r"actor.optim.lr_schedule_updates \(6\) counts optimizer updates, but actor.optim.lr_schedule_unit is step"):
        derive(cfg_with("actor.optim.lr_schedule_updates=6"), 100)
    plan = format_plan(cfg_with(*fixed), d)
    assert "actor.optim.lr_schedule_updates 6" in plan


def test_unknown_dataset_size_leaves_steps_unknown():
    d = derive(cfg_with(), None)
    assert (d.steps_per_epoch, d.total_training_steps, d.actor_warmup_steps) == (None, None, None)


def test_world_size_is_nodes_times_devices():
    assert derive(cfg_with("cluster.nnodes=2", "cluster.n_gpus_per_node=4", "actor.ppo_micro_batch_size_per_gpu=2"), None).world_size == 8


def test_dataset_smaller_than_one_batch_is_refused():
    with pytest.raises(ConfigError, match=r"data.train_files has 5 rows, fewer than data.train_batch_size \(8\)"):
        derive(cfg_with(), 5)


def test_warmup_longer_than_the_run_is_refused():
    with pytest.raises(ConfigError, match=r"actor.optim.lr_warmup_steps \(40\) is longer than the run \(36 training steps\)"):
        derive(cfg_with("actor.optim.lr_warmup_steps=40"), 100)


def test_count_rows_reads_parquet_metadata_and_counts_lines(tmp_path):
    pq.write_table(pa.table({"prompt": ["a", "b", "c"]}), tmp_path / "a.parquet")
    (tmp_path / "b.jsonl").write_text('{"prompt": "x"}\n\n{"prompt": "y"}\n')
    (tmp_path / "c.csv").write_text('prompt\n"multi\nline"\nz\n')
    (tmp_path / "d.json").write_text(json.dumps([{"prompt": "p"}] * 4))
    files = [str(tmp_path / n) for n in ("a.parquet", "b.jsonl", "c.csv", "d.json")]
    assert count_rows(files) == 3 + 2 + 2 + 4
    assert count_rows(files + [str(tmp_path / "missing.parquet")]) is None
    assert count_rows([]) is None


def test_plan_prints_every_number_with_its_arithmetic():
    cfg = cfg_with()
    text = format_plan(cfg, derive(cfg, 100))
    assert text.splitlines() == [
        "prompts per step                 8   (data.train_batch_size)",
        "responses per step              64   (× rollout.n = 8)",
        "actor mini-batches/epoch         4   (64 responses / (actor.ppo_mini_batch_size 2 × n 8) = 16 responses each)",
        "  micro-batches/mini-batch       2   (16 responses / actor.ppo_micro_batch_size_per_gpu 8; gradients accumulate over them)",
        "  optimizer steps per rollout    4   (4 mini-batches × actor.ppo_epochs 1)",
        "steps per epoch                 12   (100 rows / data.train_batch_size 8, last partial batch dropped)",
        "total training steps            36   (× trainer.total_epochs 3)",
        "actor LR warm-up steps           3   (int(actor.optim.lr_warmup_steps_ratio 0.1 × total training steps))",
        "max model length               768   (data.max_prompt_length 512 + data.max_response_length 256 tokens)",
    ]


def test_model_max_model_len_below_the_two_limits_is_the_longest_sequence():
    capped = cfg_with("model.max_model_len=600")
    assert derive(capped, 100).max_model_len == 600
    assert format_plan(capped, derive(capped, 100)).splitlines()[-1] == (
        "max model length               600   (model.max_model_len (less than data.max_prompt_length 512 + data.max_response_length 256))")
    roomy = cfg_with("model.max_model_len=4096")  # above the sum: every row ends at its limits first
    assert format_plan(roomy, derive(roomy, 100)).splitlines()[-1].startswith("max model length               768   (data.max_prompt_length")


def test_plan_with_several_devices_adds_a_per_device_block():
    cfg = cfg_with("cluster.nnodes=2", "cluster.n_gpus_per_node=4", "actor.ppo_micro_batch_size_per_gpu=1")
    plan = batch_plan(cfg, derive(cfg, None))
    assert plan.roles[0].per_device_mini_batch == 2 and plan.roles[0].micro_batches_per_mini_batch == 2
    text = format_plan(cfg, derive(cfg, None), size_note="no data files")
    assert "16 / 8 devices = 2 per device / actor.ppo_micro_batch_size_per_gpu 1" in text
    assert "steps per epoch                  ?   (unknown: no data files)" in text
    assert text.split("\n\n")[1].splitlines() == [
        "per device (2 nodes × 4 devices = 8 processes):",
        "  responses per step  8   (64 / 8)",
        "  actor mini-batch    2   (16 responses / 8)",
        "  actor micro-batch   1   (actor.ppo_micro_batch_size_per_gpu)",
    ]


def test_plan_with_token_budget():
    cfg = cfg_with("actor.use_dynamic_bsz=true", "actor.ppo_max_token_len_per_gpu=3072")
    text = format_plan(cfg, derive(cfg, None))
    squeezed = [" ".join(line.split()) for line in text.splitlines()]
    assert (
        "micro-batches/mini-batch varies (16 responses per device packed into micro-batches of <= "
        "actor.ppo_max_token_len_per_gpu 3072 tokens (>= 4 full-length sequences of 768 tokens each))"
    ) in squeezed


def test_derived_is_a_frozen_record():
    d = Derived(1, 1, 1, 0, 0, 2, 1)
    with pytest.raises(AttributeError):
        d.world_size = 2  # type: ignore[misc]


def test_plan_of_sft_counts_sequences_and_micro_batches():
    cfg = load_config(None, ["algorithm.kind=sft", "data.train_batch_size=64", "actor.ppo_micro_batch_size_per_gpu=16",
                             "data.max_length=256", "trainer.total_epochs=2", "actor.optim.lr_warmup_steps=5"])
    assert format_plan(cfg, derive(cfg, 1000)).splitlines() == [
        "sequences per step           64   (data.train_batch_size; algorithm.kind sft: no rollout)",
        "  micro-batches/step          4   (64 sequences / actor.ppo_micro_batch_size_per_gpu 16; gradients accumulate over them)",
        "  optimizer steps per step    1   (the loss is normalised over the whole batch)",
        "steps per epoch              15   (1000 rows / data.train_batch_size 64, last partial batch dropped)",
        "total training steps         30   (× trainer.total_epochs 2)",
        "actor LR warm-up steps        5   (actor.optim.lr_warmup_steps)",
        "max sequence length         256   (data.max_length tokens)",
    ]


def test_plan_of_dpo_counts_pairs_per_device():
    cfg = load_config(None, ["algorithm.kind=dpo", "data.train_batch_size=32", "actor.ppo_micro_batch_size_per_gpu=4",
                             "cluster.n_gpus_per_node=2", "rollout.n=8", "actor.ppo_mini_batch_size=3"])
    text = format_plan(cfg, derive(cfg, None), size_note="no data files")
    assert text.splitlines()[:3] == [
        "pairs per step                32   (data.train_batch_size; algorithm.kind dpo: no rollout)",
        "  pairs per device            16   (32 / 2 devices)",
        "  micro-batches/step           4   (16 pairs / actor.ppo_micro_batch_size_per_gpu 4; gradients accumulate over them)",
    ]
    assert "rollout" not in text.replace("no rollout", "") and "mini-batch" not in text
    assert text.splitlines()[-1] == "max sequence length         1024   (data.max_length tokens per side of a pair)"
