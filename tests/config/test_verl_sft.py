"""verl's SFT trainer lines (`torchrun -m verl.trainer.fsdp_sft_trainer KEY=VALUE ...`) as posttrain's
SFT stage: read out of a script, translated key by key onto the SFT stage, and run."""

from __future__ import annotations

import json

import pytest
from cli_run_helpers import posttrain

from posttrain.config import load_config
from posttrain.config.dialects.launch_script import extract
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

SCRIPT = """
nproc_per_node=$1
save_path=$2
shift 2
torchrun --standalone --nnodes=1 --nproc_per_node=$nproc_per_node \\
     -m verl.trainer.fsdp_sft_trainer \\
    data.train_files=$HOME/data/gsm8k/train.parquet \\
    data.prompt_key=extra_info \\
    data.response_key=extra_info \\
    optim.lr=1e-4 \\
    data.prompt_dict_keys=['question'] \\
    +data.response_dict_keys=['answer'] \\
    data.micro_batch_size=4 \\
    model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct \\
    trainer.default_local_dir=$save_path \\
    trainer.logger=console \\
    trainer.total_training_steps=1 $@ \\
    ulysses_sequence_parallel_size=2 \\
    use_remove_padding=true
"""


def sft(*words: str):
    return load_config("sft_trainer.yaml", list(words), dialect="verl")  # `--config-name sft_trainer`: verl's SFT tree


def test_a_script_running_the_sft_trainer_is_read_as_a_line_of_its_tree():
    found = extract(SCRIPT, {"HOME": "/h"})
    assert found.words[:3] == ["--config-name", "sft_trainer", "data.train_files=/h/data/gsm8k/train.parquet"]
    # bash removes the quotes of ['answer']; Hydra reads [answer] as the same one-item list
    assert "+data.response_dict_keys=[answer]" in found.words and found.words[-1] == "use_remove_padding=true"


def test_the_sft_tree_translates_onto_an_sft_stage_with_verl_s_loss_and_schedule(tmp_path):
    make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=4, seed=0)
    cfg = sft(f"model.partial_pretrain={tmp_path / 'm'}", "data.micro_batch_size_per_gpu=2", "optim.lr=1e-4",
              "data.prompt_dict_keys=['question']", "+data.response_dict_keys=['answer']", "use_remove_padding=true")
    assert cfg.algorithm.kind == "sft" and cfg.model.path == str(tmp_path / "m")
    assert (cfg.actor.ppo_micro_batch_size_per_gpu, cfg.actor.optim.lr, cfg.actor.grad_clip) == (2, 1e-4, 1.0)
    assert cfg.actor.sft_loss_scope == "micro_batch" and cfg.actor.fsdp_config.mixed_precision.param_dtype == "bf16"
    # verl's SFT schedule: cosine to 0 after int(0.1 x steps) warm-up steps, AdamW betas (0.9, 0.95)
    assert (cfg.actor.optim.lr_scheduler_type, cfg.actor.optim.min_lr_ratio, cfg.actor.optim.lr_warmup_steps_ratio) == ("cosine", 0.0, 0.1)
    assert list(cfg.actor.optim.betas) == [0.9, 0.95] and cfg.actor.optim.weight_decay == 0.01
    assert (cfg.data.prompt_dict_keys, cfg.data.response_dict_keys, cfg.data.max_length) == (["question"], ["answer"], 1024)
    assert cfg.model.use_remove_padding is True and cfg.data.messages_key is None  # multiturn off: its columns unread
    assert sft(f"model.partial_pretrain={tmp_path / 'm'}", "data.balance_dp_token=true").actor.sft_loss_scope == "micro_batch_all_ranks"
    chat = sft(f"model.partial_pretrain={tmp_path / 'm'}", "data.multiturn.enable=true", "data.multiturn.messages_key=conv")
    assert chat.data.messages_key == "conv" and chat.data.tools_key is None  # verl reads 'tools' only where the data has it
    named = sft(f"model.partial_pretrain={tmp_path / 'm'}", "data.multiturn.enable=true", "data.multiturn.tools_key=calls")
    assert (named.data.messages_key, named.data.tools_key) == ("messages", "calls")


@pytest.mark.parametrize("word, message", [
    ("optim.lr_scheduler=wsd", "verl's SFT wsd schedule decays along a cosine"),
    ("model.fsdp_config.cpu_offload=true", "verl's FSDP CPUOffload of the SFT model"),
    ("data.multiturn.enable=true", "a per-row enable_thinking column"),
    ("data.no_such_key=1", "verl's SFT trainer config has no key data.no_such_key"),
])
def test_what_the_sft_line_cannot_honour_is_refused_naming_the_key(tmp_path, word, message):
    extra = ["data.multiturn.enable_thinking_key=thinking"] if word.startswith("data.multiturn") else []
    with pytest.raises(ConfigError) as err:
        sft("model.partial_pretrain=/nonexistent/m", word, *extra)
    assert message in str(err.value)


def test_an_sft_line_trains_with_verl_s_schedule(tmp_path):
    make_tiny_model(tmp_path / "m", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", tmp_path / "d", train=8, test=2, sft=8, dpo=0)
    out = posttrain("train", "--dialect", "verl", "--config-name", "sft_trainer", f"model.partial_pretrain={tmp_path / 'm'}",
                    f"data.train_files={tmp_path / 'd' / 'sft_train.parquet'}", f"data.val_files={tmp_path / 'd' / 'sft_train.parquet'}",
                    "data.prompt_key=prompt", "data.response_key=response", "data.micro_batch_size_per_gpu=2",
                    "data.train_batch_size=4", "trainer.total_training_steps=2", "optim.lr_warmup_steps_ratio=0.5",
                    f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.logger=['console','jsonl']", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["actor/lr"] for r in rows if "actor/lr" in r]
    # int(0.5 x 2) = 1 warm-up step (the LR climbs from 0 over it), then the cosine from the peak
    assert lrs == pytest.approx([0.0, 1e-5])
    assert (tmp_path / "run" / "final_model" / "config.json").is_file()


def test_smoke_runs_a_verl_sft_script_with_rows_that_nest_the_prompt_and_the_response(tmp_path, capsys):
    """`posttrain smoke` on the script's words: its synthetic rows hold the question and the answer
    inside the extra_info cell, where data.prompt_dict_keys / response_dict_keys look."""
    from posttrain.cli import main

    rc = main(["smoke", "--workdir", str(tmp_path / "w"), "--dialect", "verl", *extract(SCRIPT, {"HOME": "/nonexistent"}).words])
    out = capsys.readouterr().out
    assert rc == 0, out
    row = json.loads((tmp_path / "w" / "data" / "train_files.jsonl").read_text().splitlines()[0])
    assert isinstance(row["extra_info"]["question"], str) and isinstance(row["extra_info"]["answer"], str)
    steps = [json.loads(line) for line in (tmp_path / "w" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len([s for s in steps if "sft/loss" in s]) == 2
