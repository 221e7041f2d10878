"""actor.topk_kl in an RL stage: the config rules, the reference as the teacher of the term, and a
short run of pure on-policy distillation that brings the student closer to its teacher."""

from __future__ import annotations

import pytest
import torch

from posttrain.config.checks import role_needs
from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from rl_helpers import tiny_rl_files, tiny_rl_trainer


def _cfg(*overrides: str):
    return load_config(None, ["model.path=/m", "data.train_files=/d.parquet", *overrides])


@pytest.mark.parametrize("overrides,message", [
    (["actor.topk_kl.coef=2"], "actor.topk_kl.coef: read only when actor.topk_kl.k > 0"),
    (["actor.topk_kl.k=4", "actor.ulysses_sequence_parallel_size=2", "cluster.n_gpus_per_node=2"],
     "actor.ulysses_sequence_parallel_size=2: the term reads whole next-token distributions"),
    (["actor.topk_kl.k=4", "model.use_fused_kernels=true"], "the fused head computes the sampled tokens' log-probs only"),
    (["actor.topk_kl.k=4", "actor.topk_kl.policy_loss=false", "actor.entropy_coeff=0.01"],
     "actor.entropy_coeff: actor.topk_kl.policy_loss false makes the top-k term the actor's whole loss"),
    (["actor.topk_kl.k=4", "algorithm.adv_estimator=on_policy_distill", "ref.teachers={a: {model_path: /t}}"],
     "the term takes one teacher, the reference"),
])
def test_settings_the_term_cannot_honour_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(*overrides)


def test_the_term_needs_the_reference():
    assert not role_needs(_cfg()).reference
    assert role_needs(_cfg("actor.topk_kl.k=4")).reference


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("topk")
    base = tiny_rl_files(root, train=4)
    teacher = make_tiny_model(root / "teacher", layers=1, hidden=32, heads=4, seed=5)
    return base, teacher


def _term(trainer, batch) -> float:
    """token mean of the term on `batch` under the actor's current weights."""
    from posttrain.algorithms import aggregate_loss, topk_forward_kl
    from posttrain.models.logprobs import response_logprobs

    with torch.no_grad():
        out = response_logprobs(trainer.roles.actor.model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                                gather_ids=batch.teacher_topk_ids.clone())
        values = topk_forward_kl(out.gathered, batch.teacher_topk_logprobs.clone()).values
        return float(aggregate_loss(values, batch.response_mask, "token-mean"))


def test_distillation_only_moves_the_student_toward_its_teacher(files):
    base, teacher = files
    t = tiny_rl_trainer(base, f"ref.model_path={teacher}", "actor.topk_kl.k=8", "actor.topk_kl.policy_loss=false",
                        "actor.optim.lr=0.01", "trainer.total_training_steps=3", run="distill")
    seen = []
    update = t.roles.actor.update
    t.roles.actor.update = lambda batch, step=0, mini_size=None: seen.append((batch, _term(t, batch))) or update(batch, step, mini_size)
    for step in (1, 2, 3):
        metrics = t.step(t._next_prompts(step), step)
        assert metrics["actor/topk_kl_loss"] > 0 and "actor/pg_loss" not in metrics
        batch, before = seen[-1]
        assert metrics["actor/topk_kl_loss"] == pytest.approx(before, rel=1e-4)  # the logged term is the batch's, before the step
        assert _term(t, batch) < before  # one optimizer step on the term lowers it on the same batch
        # the teacher's top-k are the reference model's (the teacher's weights, at temperature 1)
        assert batch.teacher_topk_ids.shape == (*batch.response_ids.shape, 8)
        # the reference's log-probs come from the same teacher forward, equal to its own log-prob pass
        assert torch.equal(batch.ref_logprobs, t.roles.reference.compute_logprobs(batch))


def test_the_term_changes_the_update(files):
    base, teacher = files
    runs = {}
    for name, k in (("off", "0"), ("on", "4")):
        t = tiny_rl_trainer(base, f"ref.model_path={teacher}", "actor.use_kl_loss=true", f"actor.topk_kl.k={k}", "actor.optim.lr=0.01",
                            run=f"change_{name}")
        t.step(t._next_prompts(1), 1)
        runs[name] = torch.cat([p.detach().flatten() for p in t.roles.actor.model.parameters()])
    assert not torch.allclose(runs["off"], runs["on"])
