"""Trinity-RFT SFT/DPO runs: the experience buffer's files and format keys become posttrain's data.* keys."""

from __future__ import annotations

import json

import yaml

from posttrain.cli import main
from posttrain.config.dialects import translate
from posttrain.models.tiny import make_tiny_model

EB = "buffer.trainer_input.experience_buffer"


def run(kind: str, buffer: dict, **top):
    raw = {"algorithm": {"algorithm_type": kind}, "buffer": {"trainer_input": {"experience_buffer": buffer}}, **top}
    native, report = translate(raw, "trinity")
    return native.get("data", {}), {e.key: (e.status, e.reason) for e in report.entries}


def test_messages_rows_take_trinitys_defaults_message_column_and_last_turn_loss(tmp_path):
    path = tmp_path / "sft.jsonl"
    path.write_text("")
    data, entries = run("sft", {"path": str(path), "storage_type": "file"})
    assert data == {"train_files": [str(path)], "messages_key": "message", "sft_loss_turns": "last"}
    assert entries[f"{EB}.storage_type"][0] == "dropped"
    data, _ = run("sft", {"path": str(path), "format": {"messages_key": "chat", "enable_concatenated_multi_turn": True}})
    assert (data["messages_key"], data["sft_loss_turns"]) == ("chat", "all")


def test_plaintext_rows_map_their_columns_and_drop_what_trinity_does_not_read(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("")
    fmt = {"prompt_type": "plaintext", "prompt_key": "q", "chosen_key": "good", "rejected_key": "bad", "system_prompt_key": "sys",
           "response_key": "r", "messages_key": "m", "chat_template": "T"}
    data, entries = run("dpo", {"path": str(path), "format": fmt})
    assert data == {"train_files": [str(path)], "prompt_key": "q", "chosen_key": "good", "rejected_key": "bad",
                    "system_prompt_key": "sys", "chat_template": "T"}
    assert entries[f"{EB}.format.response_key"][0] == entries[f"{EB}.format.messages_key"][0] == "dropped"
    data, entries = run("sft", {"path": str(path), "format": {"prompt_type": "plaintext", "system_prompt": "s", "chosen_key": "c"}})
    assert data == {"train_files": [str(path)], "system_prompt": "s"} and entries[f"{EB}.format.chosen_key"][0] == "dropped"


def test_what_posttrain_cannot_read_is_refused_with_the_reason(tmp_path):
    _, entries = run("sft", {"path": "x.db", "storage_type": "sql"})
    assert entries[f"{EB}.storage_type"][0] == "refused" and "reads its rows from files" in entries[f"{EB}.storage_type"][1]
    _, entries = run("grpo", {"storage_type": "queue", "format": {"prompt_key": "q"}, "subset_name": "main"})
    for key in ("format", "subset_name"):  # an RL buffer holds the explorer's experiences
        assert entries[f"{EB}.{key}"][0] == "refused" and "explorer wrote" in entries[f"{EB}.{key}"][1]


def _trinity_file(tmp_path, name: str, kind: str, data_path, fmt: dict) -> str:
    cfg = {
        "project": "p", "name": name, "mode": "train", "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": kind},
        "model": {"model_path": str(tmp_path / "model")},
        "buffer": {"batch_size": 2, "total_steps": 1,
                   "trainer_input": {"experience_buffer": {"name": f"{kind}_buffer", "storage_type": "file", "path": str(data_path), "format": fmt}}},
        "monitor": {"monitor_type": "jsonl"},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_a_trinity_sft_and_a_dpo_config_train_on_local_rows(tmp_path):
    make_tiny_model(tmp_path / "model", seed=0, layers=1, hidden=16)
    sft_rows = [{"message": [{"role": "user", "content": f"sort {i}{i + 1}"}, {"role": "assistant", "content": f"{i}{i + 1}"}]} for i in range(4)]
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sft_rows))
    dpo_rows = [{"question": f"sort {i}{i + 1}", "good": f"{i}{i + 1}", "bad": f"{i + 1}{i}"} for i in range(4)]
    (tmp_path / "dpo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in dpo_rows))
    sft = _trinity_file(tmp_path, "sft", "sft", tmp_path / "sft.jsonl", {"prompt_type": "messages"})
    dpo = _trinity_file(tmp_path, "dpo", "dpo", tmp_path / "dpo.jsonl", {"prompt_type": "plaintext", "prompt_key": "question", "chosen_key": "good", "rejected_key": "bad"})
    for path, name in ((sft, "sft"), (dpo, "dpo")):
        assert main(["train", path]) == 0
        lines = (tmp_path / "ckpt" / "p" / name / "metrics.jsonl").read_text().splitlines()
        steps = [json.loads(line) for line in lines if '"step"' in line]
        assert steps and all(any(k.endswith("loss") for k in s) for s in steps), steps
