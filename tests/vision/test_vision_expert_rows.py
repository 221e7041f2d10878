"""Expert (SFT) rows with images for the mix losses (algorithm.mix.image_key): the images sit in the
row's prompt and travel with it, so its log-probs and SFT loss are the model's own forward with its
images; what the expert rows' images cannot do is refused, naming the row."""

import json

import pandas as pd
import pytest
import torch

from posttrain.config.load import load_config
from posttrain.errors import ConfigError, DataError
from posttrain.models.loading import load_causal_lm, load_tokenizer
from posttrain.models.logprobs import batch_logprobs
from posttrain.tasks import write_task_data
from posttrain.tasks.colour import png
from posttrain.trainer.images import check_expert_images, image_inputs
from posttrain.trainer.mixing import ExpertRows, expert_dataset
from posttrain.trainer.rl import RLTrainer
from posttrain.trainer.stage import StageContext

RED, BLUE = (230, 20, 20), (20, 20, 230)


def _expert_file(path, rows):
    pd.DataFrame(rows).to_parquet(path)
    return path


def _image_rows():
    return [{"problem": "<image>Colour?", "response": name, "images": [{"bytes": png(rgb), "path": None}]}
            for name, rgb in (("red", RED), ("blue", BLUE))]


def _cfg(model, expert, *overrides):
    return load_config(None, [f"model.path={model}", "data.train_files=unused.parquet", f"algorithm.mix.expert_files=[{expert}]",
                              "algorithm.mix.prompt_key=problem", "algorithm.mix.response_key=response",
                              "algorithm.mix.expert_batch_size=2", "actor.policy_loss.loss_mode=mix", *overrides])


def _expert_rows(cfg, tok, images="policy"):
    inputs = image_inputs(cfg, tok) if images == "policy" else images
    return ExpertRows(expert_dataset(cfg, tok, inputs), 2, tok.pad_token_id, seed=0).rows(version=0, step=1)


def _own_logprobs(model, rows):
    """Each row's response log-probs from the model's own forward (Hugging Face's Qwen2-VL, its own
    positions and image merge) on the row alone, unpadded, with its images: (B, T)."""
    out = torch.zeros(rows.response_ids.shape)
    for b in range(len(rows)):
        prompt = rows.prompt_ids[b][rows.prompt_mask[b] > 0]
        n = int(rows.response_mask[b].sum())
        ids = torch.cat([prompt, rows.response_ids[b, :n]])[None]  # (1, S)
        v = rows.vision[b]
        with torch.no_grad():
            logits = model(input_ids=ids, pixel_values=v.pixel_values, image_grid_thw=v.image_grid_thw,
                           mm_token_type_ids=(ids == model.config.image_token_id).int()).logits.float()  # (1, S, V)
        P = len(prompt)
        out[b, :n] = torch.log_softmax(logits[0, P - 1 : P - 1 + n], -1).gather(-1, ids[0, P:, None]).squeeze(-1)
    return out


def _sft_loss(logprobs, rows):
    """Token-mean negative log-likelihood over the rows' trained tokens (the mix losses' SFT term)."""
    return float(-(logprobs.detach() * rows.loss_mask).sum() / rows.loss_mask.sum())


def test_expert_rows_carry_their_images_and_their_logprobs_are_the_models_own(tiny_vl_dir, tmp_path):
    tok, model = load_tokenizer(tiny_vl_dir), load_causal_lm(tiny_vl_dir)
    expert = _expert_file(tmp_path / "expert.parquet", _image_rows())
    rows = _expert_rows(_cfg(tiny_vl_dir, expert), tok)
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    # a 16x16 image: 4 merged patches, all four image tokens in the prompt, none in the trained reply
    assert [v.image_grid_thw.tolist() for v in rows.vision] == [[[1, 4, 4]], [[1, 4, 4]]]
    assert [int((p == pad).sum()) for p in rows.prompt_ids] == [4, 4] and not bool((rows.response_ids == pad).any())
    assert sorted(tok.decode(r[m > 0]).split("<|im_end|>")[0] for r, m in zip(rows.response_ids, rows.loss_mask)) == ["blue", "red"]
    got = batch_logprobs(model, rows).logprobs  # (B, T): posttrain's padded vision forward, as the actor runs it
    own = _own_logprobs(model, rows)
    assert torch.allclose(got * rows.response_mask, own, atol=1e-5)
    # the same rows with the images dropped (a column the file lacks): "<image>" stays text, the numbers move
    text = _expert_rows(_cfg(tiny_vl_dir, expert, "algorithm.mix.image_key=no_such_column"), tok)
    assert text.vision is None and not bool((text.prompt_ids == pad).any())
    assert torch.equal(text.response_ids, rows.response_ids) and torch.equal(text.loss_mask, rows.loss_mask)
    dropped = batch_logprobs(model, text).logprobs
    assert abs(_sft_loss(dropped, text) - _sft_loss(got, rows)) > 1e-3


def test_text_expert_rows_are_unchanged_by_a_vision_policy(tiny_vl_dir, tmp_path):
    tok = load_tokenizer(tiny_vl_dir)
    expert = _expert_file(tmp_path / "text.parquet", [{"problem": "Colour?", "response": n} for n in ("red", "blue")])
    cfg = _cfg(tiny_vl_dir, expert)
    with_images, without = _expert_rows(cfg, tok), _expert_rows(cfg, tok, images=None)
    assert with_images.vision is None and without.vision is None
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "loss_mask"):
        assert torch.equal(getattr(with_images, name), getattr(without, name)), name


def test_what_expert_images_cannot_do_is_refused_naming_the_row(tiny_vl_dir, tmp_path):
    tok = load_tokenizer(tiny_vl_dir)
    expert = _expert_file(tmp_path / "expert.parquet", _image_rows())
    with pytest.raises(DataError, match=r"expert.parquet.*row 0.*a text-only model"):  # no vision tower to read them
        expert_dataset(_cfg(tiny_vl_dir, expert), tok, None)
    late = tmp_path / "late.jsonl"  # the image in the trained reply: the forward reads images in the prompt only
    conv = [{"role": "user", "content": "Colour?"}, {"role": "assistant", "content": "<image>red"}]
    late.write_text(json.dumps({"conv": conv, "images": [{"bytes": None, "path": str(tmp_path / "red.png")}]}) + "\n")
    (tmp_path / "red.png").write_bytes(png(RED))
    with pytest.raises(DataError, match=r"late.jsonl.*row 0.*after the first trained"):
        expert_dataset(_cfg(tiny_vl_dir, late, "algorithm.mix.messages_key=conv"), tok, image_inputs(_cfg(tiny_vl_dir, late), tok))
    cfg = _cfg(tiny_vl_dir, expert, "data.max_length=12", "data.truncation=right")  # when the dataset is built, not drawn
    with pytest.raises(DataError, match=r"expert.parquet: row 0.*with its image tokens is \d+ tokens.*cutting it could cut its images"):
        expert_dataset(cfg, tok, image_inputs(cfg, tok))
    sp = _cfg(tiny_vl_dir, expert, "actor.ulysses_sequence_parallel_size=2", "cluster.n_gpus_per_node=2")
    with pytest.raises(ConfigError, match=r"algorithm.mix.image_key \(images\) expert rows: Ulysses"):
        check_expert_images(sp, expert_dataset(sp, tok, image_inputs(sp, tok)))
    check_expert_images(sp, expert_dataset(_cfg(tiny_vl_dir, expert, "algorithm.mix.image_key=none"), tok, image_inputs(sp, tok)))


def test_a_mix_run_with_image_expert_rows_trains_them_with_their_images(tiny_vl_dir, tmp_path):
    """Two GRPO steps on the colour task with two image expert rows joined to each batch (mu = 1:
    the expert rows' likelihood only): step 1's SFT loss and the reference's log-probs of the rows
    (the KL loss covers every row) are the model's own forward on the rows with their images, and
    step 2's SFT loss is lower."""
    data = write_task_data("colour", tmp_path / "data", train=4, test=0, seed=0)
    expert = _expert_file(tmp_path / "expert.parquet", _image_rows())
    cfg = _cfg(tiny_vl_dir, expert, f"data.train_files={data['train']}", "data.train_batch_size=2", "data.max_prompt_length=32",
               "data.max_response_length=3", "rollout.n=2", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=8",
               "actor.policy_loss.loss_args={mu: 1.0}", "actor.optim.lr=0.01", "actor.use_kl_loss=true", "trainer.total_training_steps=2", "trainer.logger=[]")
    trainer = RLTrainer(StageContext(name="main", cfg=cfg, run_dir=tmp_path / "run", model_path=str(tiny_vl_dir)))
    seen = []
    update = trainer.roles.actor.update
    trainer.roles.actor.update = lambda batch, step=0, mini_size=None: seen.append(batch) or update(batch, step, mini_size)
    initial = load_causal_lm(tiny_vl_dir)
    losses = [trainer.step(trainer._next_prompts(step), step)["actor/expert_sft_loss"] for step in (1, 2)]
    batch = seen[0]
    assert batch.expert_mask.tolist() == [False] * 4 + [True] * 2
    assert all(v is not None for v in batch.vision)  # explored and expert rows alike carry their images
    rows = batch[4:]
    own = _own_logprobs(initial, rows)  # (2, T)
    assert torch.allclose(rows.ref_logprobs * rows.response_mask, own, atol=1e-5)  # the reference is the initial policy
    assert losses[0] == pytest.approx(_sft_loss(own, rows), abs=1e-4)
    assert losses[1] < losses[0]
