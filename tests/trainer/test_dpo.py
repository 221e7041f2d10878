"""DPO stage: the three losses by hand, split-invariant gradients, a frozen reference, and an
end-to-end run whose preference accuracy on held-out pairs rises."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from posttrain.algorithms.supervised import dpo_loss
from posttrain.config import derive, load_config
from posttrain.data import build_dpo_dataset
from posttrain.models.loading import load_causal_lm, load_tokenizer
from posttrain.models.tiny import make_tiny_model
from posttrain.optim import build_optimization
from posttrain.tasks import write_task_data
from posttrain.trainer.dpo import dpo_objective, freeze, preference_losses, run_dpo
from posttrain.trainer.sft import MicroBatching, accumulate, train_step
from posttrain.trainer.stage import StageContext


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("dpo")
    model = make_tiny_model(root / "model", seed=0)
    paths = write_task_data("sort", root / "data", train=400, test=64, sft=0, dpo=400, seed=0)
    return root, model, paths


def dpo_config(model, paths, *extra):
    return load_config(None, [
        f"model.path={model}", f"data.train_files=[{paths['dpo']}]", "algorithm.kind=dpo",
        "data.train_batch_size=16", "actor.ppo_micro_batch_size_per_gpu=8", "actor.optim.lr=1e-4",
        "trainer.total_training_steps=20", "trainer.logger=[jsonl]", "data.max_length=64", *extra,
    ])


# Two pairs, beta 0.5. Pair 1: h = (-1 - -2) - (-3 - -2) = 2; pair 2: h = (-2 - -2) - (-1 - -2) = -1.
CHOSEN, REJECTED = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
REF_CHOSEN, REF_REJECTED = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])


@pytest.mark.parametrize("loss_type, expected", [
    ("sigmoid", [0.31326169, 0.97407698]),  # log(1 + e^-1), log(1 + e^0.5)
    ("ipo", [1.0, 4.0]),  # (2 - 1)^2, (-1 - 1)^2 with 1 / (2 beta) = 1
    ("hinge", [0.0, 1.5]),  # max(0, 1 - 1), max(0, 1 + 0.5)
])
def test_preference_losses_by_hand(loss_type, expected):
    out = preference_losses(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, beta=0.5, loss_type=loss_type)
    assert out.tolist() == pytest.approx(expected, abs=1e-6)


def test_sigmoid_matches_the_algorithms_library_with_label_smoothing():
    ours = preference_losses(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, beta=0.5, label_smoothing=0.2)
    library = dpo_loss(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, beta=0.5, label_smoothing=0.2)
    assert float(ours.mean()) == pytest.approx(float(library.loss), abs=1e-7)
    with pytest.raises(ValueError, match="unknown DPO loss_type 'kto'"):
        preference_losses(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, beta=0.5, loss_type="kto")


def test_gradient_is_split_invariant_and_the_reference_stays_frozen(workdir):
    root, model_dir, paths = workdir
    cfg = dpo_config(model_dir, paths)
    tokenizer = load_tokenizer(model_dir)
    pairs = [build_dpo_dataset(cfg.data, cfg.data.train_files, tokenizer)[k] for k in range(6)]
    policy, reference = load_causal_lm(model_dir), freeze(load_causal_lm(model_dir))
    before = {k: v.clone() for k, v in reference.state_dict().items()}
    objective = dpo_objective(policy, reference, tokenizer.pad_token_id, cfg.algorithm.dpo)
    derived = derive(cfg, 400)
    optimizer, scheduler = build_optimization(
        policy.parameters(), cfg.actor.optim, warmup_steps=derived.actor_warmup_steps or 0, total_steps=derived.total_training_steps or 1
    )
    train_step(policy, optimizer, scheduler, objective, pairs, MicroBatching(4), grad_clip=1.0)  # policy moves

    grads = []
    for micro in (MicroBatching(6), MicroBatching(1), MicroBatching(4)):
        policy.zero_grad(set_to_none=True)
        metrics = accumulate(objective, pairs, micro, backward=True)
        grads.append(([p.grad.clone() for p in policy.parameters()], metrics))
    (whole, m_whole), *splits = grads
    assert m_whole["dpo/margin"] != 0.0  # after one step the policy differs from the reference
    for split, m_split in splits:
        assert max((a - b).abs().max().item() for a, b in zip(whole, split)) < 1e-6
        for key in ("dpo/loss", "dpo/accuracy", "dpo/margin", "dpo/chosen_reward", "dpo/rejected_reward"):
            assert m_split[key] == pytest.approx(m_whole[key], abs=1e-6)

    assert all(p.grad is None and not p.requires_grad for p in reference.parameters())
    assert all(torch.equal(before[k], v) for k, v in reference.state_dict().items())
    assert not torch.equal(before["model.embed_tokens.weight"], policy.model.embed_tokens.weight)


def test_dpo_on_sort_raises_preference_accuracy_on_held_out_pairs(workdir):
    root, model_dir, paths = workdir
    cfg = dpo_config(model_dir, paths, f"data.val_files=[{paths['dpo_test']}]", "trainer.test_freq=10")
    run_dir = root / "run"
    result = run_dpo(StageContext("dpo", cfg, run_dir, str(model_dir)))

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    vals = [r for r in records if "val/dpo/loss" in r]
    assert [r["step"] for r in vals] == [0, 10, 20]
    start, end = vals[0], vals[-1]
    # At the start the policy is the reference: every implicit reward is 0, the loss is log 2.
    assert start["val/dpo/loss"] == pytest.approx(0.693147, abs=1e-5) and start["val/dpo/margin"] == 0.0
    assert start["val/dpo/accuracy"] == 0.0  # ties count as wrong
    # The policy's own preference on the 64 held-out pairs goes from chance to clearly right.
    assert end["val/dpo/logp_accuracy"] >= max(0.9, start["val/dpo/logp_accuracy"] + 0.25)
    assert end["val/dpo/accuracy"] >= 0.9 and end["val/dpo/margin"] > 0.1
    assert end["val/dpo/chosen_reward"] > end["val/dpo/rejected_reward"]
    assert end["val/dpo/loss"] < 0.6
    train = [r for r in records if "dpo/loss" in r]
    assert len(train) == 20 and all("actor/grad_norm" in r and "actor/lr" in r for r in train)

    assert result.steps == 20 and result.last_metrics["val/dpo/accuracy"] == end["val/dpo/accuracy"]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["algorithm"]["kind"] == "dpo"
    trained = AutoModelForCausalLM.from_pretrained(result.final_model)
    start_model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert not torch.equal(trained.lm_head.weight, start_model.lm_head.weight)
