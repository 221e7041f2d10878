"""Checkpoint files: the completeness marker, keep-last-N, no unpickling, export, resume modes."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.checkpoint import MARKER, CheckpointError, Parts, Role, export_model, latest_checkpoint, load_checkpoint, prune, save_checkpoint
from posttrain.checkpoint.logs import truncate_jsonl
from posttrain.checkpoint.state import load_torch_state
from posttrain.cli import main as cli_main
from posttrain.config import load_config
from posttrain.data.sampler import BatchSampler
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.optim import build_optimizer
from posttrain.trainer.run import run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = make_tiny_model(tmp_path_factory.mktemp("ckpt") / "model", layers=1, hidden=32, seed=0)
    return path, AutoTokenizer.from_pretrained(path)


def _parts(model_dir, tokenizer, lr=1e-2, optimizer=None):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    opt = build_optimizer(model.parameters(), **optimizer) if optimizer else torch.optim.AdamW(model.parameters(), lr=lr)
    sampler = BatchSampler(10, 3, seed=1)
    gen = torch.Generator().manual_seed(5)
    return Parts({"actor": Role(model, opt, None, tokenizer)}, {"sampler": sampler}, {"engine": gen})


def _train_a_bit(parts):
    model = parts.roles["actor"].model
    loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()
    parts.roles["actor"].optimizer.step()
    parts.states["sampler"].next_batch()
    torch.rand(3, generator=parts.generators["engine"])


def test_round_trip_restores_weights_optimizer_sampler_and_every_rng(tiny, tmp_path):
    model_dir, tok = tiny
    parts = _parts(model_dir, tok)
    _train_a_bit(parts)
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    path = save_checkpoint(tmp_path, 7, parts, {"stage": "main"})
    expected = (random.random(), np.random.rand(), torch.rand(1), torch.rand(1, generator=parts.generators["engine"]))
    fresh = _parts(model_dir, tok)
    state = load_checkpoint(path, fresh, {})
    assert state["step"] == 7 and state["states"]["sampler"]["position"] == 1
    got = (random.random(), np.random.rand(), torch.rand(1), torch.rand(1, generator=fresh.generators["engine"]))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2]) and torch.equal(got[3], expected[3])
    for a, b in zip(parts.roles["actor"].model.parameters(), fresh.roles["actor"].model.parameters()):
        assert torch.equal(a, b)
    sa, sb = parts.roles["actor"].optimizer.state_dict(), fresh.roles["actor"].optimizer.state_dict()
    assert all(torch.equal(sa["state"][k]["exp_avg"], sb["state"][k]["exp_avg"]) for k in sa["state"])
    assert fresh.states["sampler"].state_dict() == parts.states["sampler"].state_dict()
    # The actor directory is a standalone HF model (tokenizer included).
    assert AutoModelForCausalLM.from_pretrained(path / "actor") is not None
    assert AutoTokenizer.from_pretrained(path / "actor").pad_token_id == tok.pad_token_id


@pytest.mark.parametrize("optimizer", [
    dict(name="sgd", lr=1e-2, weight_decay=0.01, extra={"momentum": 0.9, "nesterov": True}),
    dict(name="adam", lr=1e-2, weight_decay=0.01, extra={"amsgrad": True}),
], ids=["sgd", "adam"])
def test_other_optimizers_resume_exactly(tiny, tmp_path, optimizer):
    """The optimizer's own state (SGD's momentum buffers, Adam's moments and amsgrad maxima) comes back:
    a step after the resume moves the weights exactly as the uninterrupted run's next step."""
    parts = _parts(*tiny, optimizer=optimizer)
    _train_a_bit(parts)
    path = save_checkpoint(tmp_path, 1, parts, {})
    fresh = _parts(*tiny, optimizer=optimizer)
    load_checkpoint(path, fresh, {})
    assert fresh.roles["actor"].optimizer.state_dict()["state"]  # restored, not empty
    for resumed in (parts, fresh):
        resumed.roles["actor"].optimizer.zero_grad()  # the first run's gradients are still on its weights
        _train_a_bit(resumed)
    for a, b in zip(parts.roles["actor"].model.parameters(), fresh.roles["actor"].model.parameters()):
        assert torch.equal(a, b)


def test_a_save_killed_before_its_marker_leaves_the_previous_checkpoint(tiny, tmp_path):
    parts = _parts(*tiny)
    save_checkpoint(tmp_path, 1, parts, {})

    def killed():
        raise KeyboardInterrupt  # stands in for SIGKILL between the rename and the marker

    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, parts, {}, before_marker=killed)
    assert (tmp_path / "global_step_2").is_dir()  # written, but not named by the marker
    assert latest_checkpoint(tmp_path) == tmp_path / "global_step_1"
    save_checkpoint(tmp_path, 2, parts, {})  # the next attempt replaces the incomplete directory
    assert latest_checkpoint(tmp_path) == tmp_path / "global_step_2"


def test_keep_last_n_per_role_deletes_only_older_checkpoints(tiny, tmp_path):
    model_dir, tok = tiny
    parts = _parts(model_dir, tok)
    parts.roles["critic"] = Role(AutoModelForCausalLM.from_pretrained(model_dir))
    for step in range(1, 5):
        save_checkpoint(tmp_path, step, parts, {})
        prune(tmp_path, {"actor": 2, "critic": 1})
    dirs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert dirs == ["global_step_3", "global_step_4"]
    assert (tmp_path / "global_step_3" / "actor").is_dir() and not (tmp_path / "global_step_3" / "critic").exists()
    assert (tmp_path / "global_step_4" / "critic").is_dir() and (tmp_path / MARKER).read_text().strip() == "4"


class _Payload:
    def __reduce__(self):
        return (print, ("arbitrary code ran",))


def test_loading_never_unpickles_arbitrary_objects(tmp_path):
    torch.save({"state": _Payload()}, tmp_path / "optimizer.pt")
    with pytest.raises(Exception, match="(?i)weights.only|unsupported global"):
        load_torch_state(tmp_path / "optimizer.pt")


def test_truncate_jsonl_drops_steps_after_the_checkpoint_and_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in range(6)) + '{"step": 6, "x"')
    assert truncate_jsonl(path, 3) == 3
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2, 3]


def test_export_cli_writes_a_loadable_model_from_a_checkpoint_or_a_run_dir(tiny, tmp_path, capsys):
    model_dir, tok = tiny
    run_dir = tmp_path / "run"
    save_checkpoint(run_dir / "checkpoints", 3, _parts(model_dir, tok), {})
    for source, out in ((run_dir, tmp_path / "out1"), (run_dir / "checkpoints" / "global_step_3", tmp_path / "out2")):
        assert cli_main(["export", str(source), str(out)]) == 0
        assert "global_step_3/actor" in capsys.readouterr().out
        assert not (out / "optimizer.pt").exists()
        model = AutoModelForCausalLM.from_pretrained(out)
        assert AutoTokenizer.from_pretrained(out).pad_token_id == tok.pad_token_id
        assert torch.equal(model.lm_head.weight, AutoModelForCausalLM.from_pretrained(model_dir).lm_head.weight)
    assert cli_main(["export", str(tmp_path / "nowhere"), str(tmp_path / "out3")]) == 2
    assert "no such checkpoint or run directory" in capsys.readouterr().err
    assert cli_main(["export", str(run_dir), str(tmp_path / "out1")]) == 2  # not empty
    assert "already exists and is not empty" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        export_model(tmp_path, tmp_path / "out4")


def test_resume_mode_disable_refuses_a_directory_that_holds_a_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    cfg = load_config(None, [f"trainer.default_local_dir={run_dir}", "trainer.resume_mode=disable"])
    with pytest.raises(ConfigError, match="resume_mode=disable: .* already holds a run"):
        run(cfg)


@pytest.mark.parametrize("variable", ["POSTTRAIN_DECOUPLED", "POSTTRAIN_REFERENCE_CREW"])
def test_a_process_a_launcher_started_leaves_the_resume_mode_check_to_the_launcher(tmp_path, monkeypatch, variable):
    """The launcher checks the directory before it starts the halves of a run; a half that looked
    again would take the files its peer has begun writing for an old run."""
    from posttrain.models.tiny import make_tiny_model
    from posttrain.tasks import write_task_data
    from posttrain.trainer.run import check_run

    make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", tmp_path / "d", train=4, test=2, sft=0, dpo=0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    cfg = load_config(None, [f"trainer.default_local_dir={run_dir}", "trainer.resume_mode=disable", f"model.path={tmp_path / 'm'}",
                             f"data.train_files={tmp_path / 'd' / 'train.parquet'}", "data.train_batch_size=2", "actor.ppo_mini_batch_size=2"])
    with pytest.raises(ConfigError, match="already holds a run"):
        check_run(cfg)
    monkeypatch.setenv(variable, "trainer")
    check_run(cfg)  # no refusal: its peer's files


def test_resume_path_must_name_a_complete_checkpoint(tmp_path):
    cfg = load_config(None, [f"trainer.default_local_dir={tmp_path}", "trainer.resume_mode=resume_path",
                             f"trainer.resume_from_path={tmp_path / 'global_step_9'}"])
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        run(cfg)
    with pytest.raises(ConfigError, match="needs trainer.resume_from_path"):
        run(load_config(None, [f"trainer.default_local_dir={tmp_path}", "trainer.resume_mode=resume_path"]))


def test_save_contents_leaves_out_the_optimizer_and_extra_and_a_resume_says_it_is_not_exact(tiny, tmp_path, capsys):
    model_dir, tok = tiny
    parts = _parts(model_dir, tok)
    _train_a_bit(parts)
    path = save_checkpoint(tmp_path, 3, parts, {"stage": "main"}, contents={"actor": ["model"]})
    assert not (path / "actor" / "optimizer.pt").exists()
    assert json.loads((path / "trainer_state.json").read_text())["contents"] == {"actor": ["model"]}
    fresh = _parts(model_dir, tok)
    load_checkpoint(path, fresh, {"actor": ["model", "optimizer", "extra"]})
    for a, b in zip(parts.roles["actor"].model.parameters(), fresh.roles["actor"].model.parameters()):
        assert torch.equal(a, b)  # the weights are back
    assert fresh.roles["actor"].optimizer.state_dict()["state"] == {}  # empty moments: not exact
    assert fresh.states["sampler"].state_dict()["position"] == 0  # the sampler restarts with extra
    err = capsys.readouterr().err
    assert "saved without its optimizer" in err and "saved without its extra" in err and "not exactly" in err
    with pytest.raises(ConfigError, match="save_contents \\['optimizer'\\] leaves out the weights"):
        load_config(None, ["actor.checkpoint.save_contents=[optimizer]"])


def test_save_contents_hf_model_adds_a_standalone_model_beside_a_lora_adapter(tiny, tmp_path):
    from posttrain.models.lora import LoraSettings, add_lora

    model_dir, tok = tiny
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    add_lora(model, LoraSettings(key="model", rank=2, alpha=4.0, target_modules=["q_proj"], exclude_modules=None, adapter_path=None), model_dir)
    parts = Parts({"actor": Role(model, None, None, tok)})
    plain = save_checkpoint(tmp_path / "plain", 1, parts, {})
    assert not (plain / "actor" / "huggingface").exists()
    path = save_checkpoint(tmp_path / "hf", 1, parts, {}, contents={"actor": ["model", "hf_model"]})
    standalone = AutoModelForCausalLM.from_pretrained(path / "actor" / "huggingface")  # no adapter: merged weights
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(standalone(ids).logits, model(ids).logits)
