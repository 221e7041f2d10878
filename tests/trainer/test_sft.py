"""SFT stage: split-invariant gradient accumulation, response-only loss, an end-to-end run that learns."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.config import load_config
from posttrain.data import SFTExample, build_sft_dataset, collate_sft
from posttrain.models.loading import load_causal_lm, load_tokenizer
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data
from posttrain.trainer.sequence_logprobs import sequence_logprobs
from posttrain.trainer.sft import MicroBatching, accumulate, run_sft, sft_objective
from posttrain.trainer.stage import StageContext


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    model = make_tiny_model(root / "model", seed=0)
    paths = write_task_data("sort", root / "data", train=1200, test=64, sft=1200, dpo=0, seed=0)
    return root, model, paths


def sft_config(model, paths, *extra):
    return load_config(None, [
        f"model.path={model}", f"data.train_files=[{paths['sft']}]", "algorithm.kind=sft",
        "data.train_batch_size=32", "actor.ppo_micro_batch_size_per_gpu=16", "actor.optim.lr=1e-3",
        "trainer.total_training_steps=40", "trainer.logger=[jsonl]", "data.max_length=64", *extra,
    ])


def grads_after(model, objective, examples, micro):
    model.zero_grad(set_to_none=True)
    metrics = accumulate(objective, examples, micro, backward=True)
    return [p.grad.clone() for p in model.parameters()], metrics


def test_gradient_does_not_depend_on_the_micro_batch_split(workdir):
    root, model_dir, paths = workdir
    cfg = sft_config(model_dir, paths)
    tokenizer = load_tokenizer(model_dir)
    dataset = build_sft_dataset(cfg.data, cfg.data.train_files, tokenizer)
    # Rows of different lengths make per-micro-batch means differ from the batch mean.
    examples = [dataset[k] for k in range(8)]
    examples[3] = SFTExample(index=-1, input_ids=examples[3].input_ids + [40, 41, 42], loss_mask=examples[3].loss_mask + [1, 1, 1])
    model = load_causal_lm(model_dir)
    objective = sft_objective(model, tokenizer.pad_token_id)
    whole, m_whole = grads_after(model, objective, examples, MicroBatching(8))
    for micro in (MicroBatching(1), MicroBatching(3), MicroBatching(1, max_tokens=90)):
        split, m_split = grads_after(model, objective, examples, micro)
        assert max((a - b).abs().max().item() for a, b in zip(whole, split)) < 1e-6
        assert m_split["sft/loss"] == pytest.approx(m_whole["sft/loss"], abs=1e-6)
        assert m_split["sft/tokens"] == m_whole["sft/tokens"]


def test_a_micro_batch_without_trained_tokens_adds_nothing(workdir):
    """Truncation can cut a whole response: that micro-batch trains nothing, and must not fail."""
    _, model_dir, _ = workdir
    model = load_causal_lm(model_dir)
    objective = sft_objective(model, load_tokenizer(model_dir).pad_token_id)
    trained = SFTExample(0, [1, 30, 31, 32, 2], [0, 0, 0, 1, 1])
    cut = SFTExample(1, [1, 33, 34, 35, 36], [0, 0, 0, 0, 0])  # its response truncated away
    alone, _ = grads_after(model, objective, [trained], MicroBatching(1))
    both, metrics = grads_after(model, objective, [trained, cut], MicroBatching(1))
    assert all(torch.equal(a, b) for a, b in zip(alone, both)) and metrics["sft/tokens"] == 2


def test_loss_is_the_token_mean_nll_of_response_tokens_only(workdir):
    root, model_dir, paths = workdir
    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir)
    # Hand-built rows: the loss mask marks the last 2 and 3 tokens as the response.
    a = SFTExample(0, [1, 30, 31, 32, 2], [0, 0, 0, 1, 1])
    b = SFTExample(1, [1, 33, 34, 35, 36, 2], [0, 0, 0, 1, 1, 1])
    batch = collate_sft([a, b], tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # (2, 6, V)
        logp = torch.log_softmax(logits.float(), -1)
        expected = -sum(logp[r, s - 1, ids[s]] for r, ids, mask in ((0, a.input_ids, a.loss_mask), (1, b.input_ids, b.loss_mask))
                        for s in range(len(ids)) if mask[s]) / 5
        ours = sequence_logprobs(model, batch)
        metrics = accumulate(sft_objective(model, tokenizer.pad_token_id), [a, b], MicroBatching(2), backward=False)
    assert ours.mask.sum().item() == 5
    assert metrics["sft/loss"] == pytest.approx(float(expected), abs=1e-5)
    assert metrics["sft/tokens"] == 5


@pytest.mark.parametrize("scope", ["micro_batch", "micro_batch_all_ranks"])
def test_micro_batch_scope_averages_each_micro_batch_s_token_mean_as_verl_s_sft_trainer(workdir, scope):
    """actor.sft_loss_scope micro_batch: each micro-batch's token mean, averaged over the micro-batches
    (verl's SFT trainer divides by the micro-batch's tokens and by the micro-batch count); its
    gradient is that loss's, and it differs from the batch token mean when the micro-batches differ."""
    _, model_dir, _ = workdir
    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir)
    a = SFTExample(0, [1, 30, 31, 32, 2], [0, 0, 0, 1, 1])  # 2 trained tokens
    b = SFTExample(1, [1, 33, 34, 35, 36, 2], [0, 0, 0, 1, 1, 1])  # 3 trained tokens
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        nll = [-float((out.logprobs * out.mask).sum()) for out in (sequence_logprobs(model, collate_sft([e], pad)) for e in (a, b))]
    expected = (nll[0] / 2 + nll[1] / 3) / 2
    verl_like = sft_objective(model, pad, scope=scope)
    grads, metrics = grads_after(model, verl_like, [a, b], MicroBatching(1))
    assert metrics["sft/loss"] == pytest.approx(expected, abs=1e-5)
    assert metrics["sft/loss"] != pytest.approx(sum(nll) / 5, abs=1e-4)  # not the batch token mean
    model.zero_grad(set_to_none=True)
    outs = [sequence_logprobs(model, collate_sft([e], pad)) for e in (a, b)]
    (-(outs[0].logprobs * outs[0].mask).sum() / (2 * 2) - (outs[1].logprobs * outs[1].mask).sum() / (3 * 2)).backward()
    by_hand = [p.grad.clone() for p in model.parameters()]
    assert max((g - h).abs().max().item() for g, h in zip(grads, by_hand)) < 1e-6
    batch_grads, _ = grads_after(model, sft_objective(model, pad), [a, b], MicroBatching(1))
    assert max((g - h).abs().max().item() for g, h in zip(grads, batch_grads)) > 1e-6  # the scope changes the update


def test_micro_batch_rows_scope_weighs_each_micro_batch_s_token_mean_by_its_sequences(workdir):
    """actor.sft_loss_scope micro_batch_rows (Trinity-RFT's default micro-batch loss scale): micro-batch
    m's token mean counts rows_m / rows of the batch."""
    _, model_dir, _ = workdir
    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir)
    a = SFTExample(0, [1, 30, 31, 32, 2], [0, 0, 0, 1, 1])  # 2 trained tokens
    b = SFTExample(1, [1, 33, 34, 35, 36, 2], [0, 0, 0, 1, 1, 1])  # 3
    c = SFTExample(2, [1, 37, 38, 2], [0, 0, 1, 1])  # 2
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        nll = [-float((out.logprobs * out.mask).sum()) for out in (sequence_logprobs(model, collate_sft([e], pad)) for e in (a, b, c))]
    expected = 2 / 3 * (nll[0] + nll[1]) / 5 + 1 / 3 * nll[2] / 2  # micro-batches [a, b] and [c]
    _, metrics = grads_after(model, sft_objective(model, pad, scope="micro_batch_rows"), [a, b, c], MicroBatching(2))
    assert metrics["sft/loss"] == pytest.approx(expected, abs=1e-5)
    _, averaged = grads_after(model, sft_objective(model, pad, scope="micro_batch"), [a, b, c], MicroBatching(2))
    assert averaged["sft/loss"] == pytest.approx(((nll[0] + nll[1]) / 5 + nll[2] / 2) / 2, abs=1e-5)  # unweighted: another number
    assert abs(metrics["sft/loss"] - averaged["sft/loss"]) > 1e-4


def test_balanced_cut_gives_verl_s_micro_batches_to_the_rows_weighting(workdir):
    """actor.dynamic_bsz_partition balanced in an SFT stage (Trinity-RFT's SFT with dynamic batch size):
    ceil(18 tokens / 9) = 2 micro-batches of balanced workloads, {b, d} and {a, c}, where the packing
    in order gives [a], [b], [c, d]; micro_batch_rows weighs each one's token mean by its sequences."""
    _, model_dir, _ = workdir
    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir)
    a = SFTExample(0, [1, 30, 31, 32, 2], [0, 0, 0, 1, 1])  # 5 tokens, 2 trained
    b = SFTExample(1, [1, 33, 34, 35, 36, 2], [0, 0, 0, 1, 1, 1])  # 6, 3
    c = SFTExample(2, [1, 37, 38, 2], [0, 0, 1, 1])  # 4, 2
    d = SFTExample(3, [1, 39, 2], [0, 1, 1])  # 3, 2
    pad = tokenizer.pad_token_id
    balanced, packed = MicroBatching(8, 9, balanced=True), MicroBatching(8, 9)
    tokens = lambda examples: sum(len(e.input_ids) for e in examples)  # noqa: E731
    assert sorted(sorted(e.index for e in g) for g in balanced.split([a, b, c, d], tokens)) == [[0, 2], [1, 3]]
    assert [[e.index for e in g] for g in packed.split([a, b, c, d], tokens)] == [[0], [1], [2, 3]]
    with torch.no_grad():
        nll = [-float((out.logprobs * out.mask).sum()) for out in (sequence_logprobs(model, collate_sft([e], pad)) for e in (a, b, c, d))]
    expected = 2 / 4 * (nll[1] + nll[3]) / 5 + 2 / 4 * (nll[0] + nll[2]) / 4
    _, metrics = grads_after(model, sft_objective(model, pad, scope="micro_batch_rows"), [a, b, c, d], balanced)
    assert metrics["sft/loss"] == pytest.approx(expected, abs=1e-5)
    _, other = grads_after(model, sft_objective(model, pad, scope="micro_batch_rows"), [a, b, c, d], packed)
    assert abs(other["sft/loss"] - metrics["sft/loss"]) > 1e-4


def test_sft_on_sort_lowers_the_loss_and_saves_a_loadable_model(workdir):
    root, model_dir, paths = workdir
    # Validation on held-out SFT-style rows: the test problems with their answers as responses.
    rows = pq.read_table(paths["test"]).to_pylist()
    val = root / "val_sft.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": r["prompt"], "response": r["reward_model"]["ground_truth"]} for r in rows]), val)
    cfg = sft_config(model_dir, paths, f"data.val_files=[{val}]", "trainer.test_freq=20",
                     "actor.optim.lr_warmup_steps_ratio=0.1", "actor.optim.lr_scheduler_type=cosine")
    run_dir = root / "run"
    result = run_sft(StageContext("sft", cfg, run_dir, str(model_dir), step_offset=100))

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "sft/loss" in r]
    assert [r["step"] for r in train] == list(range(101, 141))  # global steps after the offset
    first, last = train[0]["sft/loss"], train[-1]["sft/loss"]
    assert last < 0.6 * first, (first, last)
    vals = [r for r in records if "val/sft/loss" in r]
    assert [r["step"] for r in vals] == [100, 120, 140]  # before training, every 20 steps, at the end
    assert vals[-1]["val/sft/loss"] < 0.6 * vals[0]["val/sft/loss"]
    # Warm-up 4 steps (10% of 40), then cosine: LR rises from 0 (the first update), peaks at 1e-3 at step 4, falls.
    lrs = [r["actor/lr"] for r in train]
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(2.5e-4) and lrs[4] == pytest.approx(1e-3) and lrs[-1] < 1e-4
    assert all(r["sft/lr"] == r["actor/lr"] for r in train)
    assert all(math.isfinite(r["actor/grad_norm"]) and r["perf/tokens_per_s"] > 0 and r["timing/step_s"] > 0 for r in train)
    assert all(r["sft/tokens"] > 0 for r in train)

    assert result.steps == 40 and result.final_model == run_dir / "final_model"
    assert result.last_metrics["sft/loss"] == last and "val/sft/loss" in result.last_metrics
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["algorithm"]["kind"] == "sft" and saved["model"]["path"] == str(model_dir)
    assert (result.final_model / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(result.final_model)
    tokenizer = AutoTokenizer.from_pretrained(result.final_model)
    start = AutoModelForCausalLM.from_pretrained(model_dir)
    assert not torch.equal(model.model.embed_tokens.weight, start.model.embed_tokens.weight)
    assert tokenizer.pad_token_id == load_tokenizer(model_dir).pad_token_id


def test_val_only_validates_and_saves_the_starting_policy(workdir, tmp_path):
    root, model_dir, paths = workdir
    cfg = sft_config(model_dir, paths, f"data.val_files=[{paths['sft']}]", "trainer.val_only=true")
    result = run_sft(StageContext("sft", cfg, tmp_path / "run", str(model_dir), step_offset=7))
    assert result.steps == 0 and result.last_metrics["val/sft/loss"] > 3.0  # a random model: ~ln(vocab)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [7] and "sft/loss" not in records[0]
    saved = AutoModelForCausalLM.from_pretrained(result.final_model)
    assert torch.equal(saved.lm_head.weight, AutoModelForCausalLM.from_pretrained(model_dir).lm_head.weight)


@pytest.mark.parametrize("val_batch_size,sizes", [(5, [5, 5, 2]), (None, [4, 4, 4])])
def test_validation_forwards_hold_val_batch_size_examples(workdir, tmp_path, monkeypatch, val_batch_size, sizes):
    """data.val_batch_size sets the examples per validation forward (null: the training micro-batch);
    the metric is the whole validation set's token-mean either way. DPO validates through the same loop."""
    root, model_dir, _ = workdir
    val = write_task_data("sort", tmp_path / "val", train=12, test=1, sft=12, dpo=0, seed=3)["sft"]
    cfg = sft_config(
        model_dir, {"sft": val}, f"data.val_files=[{val}]", "trainer.val_only=true", "data.train_batch_size=4",
        "actor.ppo_micro_batch_size_per_gpu=4", f"data.val_batch_size={'null' if val_batch_size is None else val_batch_size}",
    )
    import posttrain.trainer.sft as sft_module

    seen = []
    real = sft_module.collate_sft
    monkeypatch.setattr(sft_module, "collate_sft", lambda examples, pad: seen.append(len(examples)) or real(examples, pad))
    result = run_sft(StageContext("sft", cfg, tmp_path / "run", str(model_dir)))
    assert seen == sizes
    one_batch = evaluate_whole_set(model_dir, cfg, val)
    assert result.last_metrics["val/sft/loss"] == pytest.approx(one_batch, rel=1e-5)


def evaluate_whole_set(model_dir, cfg, val) -> float:
    """The token-mean NLL of every validation example in one forward."""
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.trainer.sft import evaluate

    tokenizer = tokenizer_from_config(cfg.model)
    examples = list(build_sft_dataset(cfg.data, [val], tokenizer))
    model = load_causal_lm(str(model_dir))
    objective = sft_objective(model, tokenizer.pad_token_id)
    return evaluate(model, objective, examples, MicroBatching(len(examples)))["val/sft/loss"]
