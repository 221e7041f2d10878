"""The distillation stage (algorithm.kind distill): what each algorithm.distill key changes, the
split-invariant loss, the checks, and a short run in which the student's divergence to the teacher falls."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from posttrain.config import load_config
from posttrain.config.sections.distill import DistillConfig
from posttrain.data import SFTExample, build_sft_dataset, collate_sft
from posttrain.errors import ConfigError, UserError
from posttrain.models.loading import load_causal_lm, load_tokenizer
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from posttrain.trainer.distill import distill_objective, distill_sums, run_distill
from posttrain.trainer.sft import MicroBatching, accumulate
from posttrain.trainer.stage import StageContext


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    student = make_tiny_model(root / "student", layers=1, hidden=32, seed=0)
    teacher = make_tiny_model(root / "teacher", layers=1, hidden=32, seed=1)
    paths = write_task_data("sort", root / "data", train=32, test=8, sft=32, dpo=0, seed=0)
    return root, student, teacher, paths


def distill_config(student, teacher, paths, *extra):
    return load_config(None, [
        f"model.path={student}", f"data.train_files=[{paths['sft']}]", "algorithm.kind=distill",
        f"algorithm.distill.teacher_path={teacher}", "data.train_batch_size=16", "actor.ppo_micro_batch_size_per_gpu=16",
        "actor.optim.lr=1e-2", "trainer.total_training_steps=8", "trainer.logger=[jsonl]", "data.max_length=64", *extra,
    ])


@pytest.fixture(scope="module")
def models(workdir):
    root, student_dir, teacher_dir, paths = workdir
    tokenizer = load_tokenizer(student_dir)
    cfg = distill_config(student_dir, teacher_dir, paths)
    examples = [build_sft_dataset(cfg.data, cfg.data.train_files, tokenizer)[k] for k in range(4)]
    return load_causal_lm(student_dir), load_causal_lm(teacher_dir).requires_grad_(False), tokenizer, examples


def sums(models, **change):
    student, teacher, tokenizer, examples = models
    with torch.no_grad():
        nll, div, tokens = distill_sums(student, teacher, collate_sft(examples, tokenizer.pad_token_id), DistillConfig(**change))
    return float(nll), float(div), int(tokens)


@pytest.mark.parametrize("change, context", [
    ({"objective": "reverse_kl"}, {}),
    ({"topk": 0}, {}),
    ({"temperature": 2.0}, {}),
    ({"teacher_temperature": 2.0}, {}),
    ({"adaptive_alpha": 0.05}, {"objective": "adaptive_kl"}),
    ({"skew_lambda": 0.5}, {"objective": "skewed_forward_kl"}),
])
def test_each_distill_key_changes_the_divergence_and_not_the_nll(models, change, context):
    base = sums(models, **context)
    changed = sums(models, **context, **change)
    assert changed[1] != pytest.approx(base[1], rel=1e-4), change
    assert changed[0] == pytest.approx(base[0]) and changed[2] == base[2]


def test_chunked_heads_give_the_same_sums_and_gradients(models):
    student, teacher, tokenizer, examples = models
    batch = collate_sft(examples, tokenizer.pad_token_id)
    results = []
    for chunk in (None, 7):  # one chunk, then chunks of 7 positions recomputed in the backward
        student.zero_grad(set_to_none=True)
        nll, div, _ = distill_sums(student, teacher, batch, DistillConfig(), chunk_tokens=chunk)
        (nll + div).backward()
        results.append((float(nll), float(div), student.lm_head.weight.grad.clone()))
    (n1, d1, g1), (n2, d2, g2) = results
    assert n2 == pytest.approx(n1, rel=1e-5) and d2 == pytest.approx(d1, rel=1e-5)
    assert torch.allclose(g1, g2, atol=1e-6)


def test_on_prompt_trains_every_real_token(models):
    _, _, _, examples = models
    response, every = sums(models), sums(models, on_prompt=True)
    assert response[2] == sum(sum(e.loss_mask[1:]) for e in examples)
    assert every[2] == sum(len(e.input_ids) - 1 for e in examples) > response[2]
    assert every[0] > response[0] and every[1] > response[1]


def test_weight_mixes_the_two_token_means_and_the_split_changes_nothing(models):
    student, teacher, tokenizer, examples = models
    nll, div, tokens = sums(models)
    examples = [*examples[:3], SFTExample(-1, examples[3].input_ids + [40, 41], examples[3].loss_mask + [1, 1])]
    for weight in (0.3, 1.0):
        objective = distill_objective(student, teacher, tokenizer.pad_token_id, DistillConfig(weight=weight))
        grads = []
        for micro in (MicroBatching(4), MicroBatching(1))[: 2 if weight == 0.3 else 1]:
            student.zero_grad(set_to_none=True)
            metrics = accumulate(objective, examples, micro, backward=True)
            grads.append([p.grad.clone() for p in student.parameters()])
        if len(grads) == 2:
            assert max((a - b).abs().max().item() for a, b in zip(*grads)) < 1e-6
        part = metrics["distill/nll"] * (1 - weight) + metrics["distill/divergence"] * weight
        assert metrics["distill/loss"] == pytest.approx(part, rel=1e-5)
    one = distill_objective(student, teacher, tokenizer.pad_token_id, DistillConfig())
    first = accumulate(one, list(models[3]), MicroBatching(4), backward=False)
    assert first["distill/nll"] == pytest.approx(nll / tokens, rel=1e-5) and first["distill/divergence"] == pytest.approx(div / tokens, rel=1e-5)


def test_the_checks_ask_for_a_teacher_and_keep_distill_keys_to_distill_stages(workdir):
    _, student, teacher, paths = workdir
    with pytest.raises(ConfigError, match="needs algorithm.distill.teacher_path"):
        load_config(None, [f"model.path={student}", "algorithm.kind=distill"])
    with pytest.raises(ConfigError, match="algorithm.distill.topk: read only by algorithm.kind distill"):
        load_config(None, [f"model.path={student}", "algorithm.kind=sft", "algorithm.distill.topk=8"])
    with pytest.raises(ConfigError, match="runs whole sequences"):
        distill_config(student, teacher, paths, "actor.ulysses_sequence_parallel_size=2", "cluster.n_gpus_per_node=2")
    with pytest.raises(UserError, match="teacher_path"):
        run_distill(StageContext("distill", distill_config(student, paths["sft"], paths), workdir[0] / "bad", str(student)))


@pytest.mark.slow
def test_distillation_lowers_the_students_divergence_to_the_teacher(workdir):
    root, student, teacher, paths = workdir
    cfg = distill_config(student, teacher, paths, f"data.val_files=[{paths['sft']}]", "trainer.test_freq=8", "data.val_batch_size=32",
                         "algorithm.distill.weight=1.0", "algorithm.distill.objective=js_divergence")
    run_dir = root / "run"
    result = run_distill(StageContext("distill", cfg, run_dir, str(student)))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    vals = [r["val/distill/divergence"] for r in records if "val/distill/divergence" in r]
    assert len(vals) == 2 and vals[1] < 0.7 * vals[0], vals  # before training and after step 8
    assert result.steps == 8 and (result.final_model / "model.safetensors").is_file()
    assert dataclasses.asdict(cfg.algorithm.distill)["objective"] == "js_divergence"


@pytest.mark.long
def test_two_gloo_workers_distil_as_one_process(workdir):
    """`posttrain train` with cluster.n_gpus_per_node=2 (two gloo workers, each running the teacher on
    its share of the micro-batches) logs the same step metrics as one process."""
    from cli_run_helpers import posttrain

    root, student, teacher, paths = workdir
    (root / "launch.yaml").write_text(
        f"data: {{train_files: {paths['sft']}, train_batch_size: 8, max_length: 64}}\nmodel: {{path: {student}}}\n"
        f"algorithm: {{kind: distill, distill: {{teacher_path: {teacher}, objective: reverse_kl, topk: 8}}}}\n"
        "actor: {ppo_micro_batch_size_per_gpu: 2, optim: {lr: 1e-3}}\ntrainer: {total_training_steps: 2, logger: [jsonl]}\n")
    rows = {}
    for run, workers in (("one", 0), ("two", 2)):
        out = posttrain("train", str(root / "launch.yaml"), f"trainer.default_local_dir={root / run}",
                        f"cluster.n_gpus_per_node={workers}", cwd=root, fds=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        rows[run] = [json.loads(line) for line in (root / run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows["one"]] == [r["step"] for r in rows["two"]] == [1, 2]
    for a, b in zip(rows["one"], rows["two"]):
        for key in ("distill/loss", "distill/divergence", "distill/nll", "actor/grad_norm"):
            assert b[key] == pytest.approx(a[key], abs=1e-5, rel=1e-5), key
