"""`posttrain config convert`: the written file is valid YAML for any input, and planning it gives the
same plan as planning the original (verl, ROLL and Trinity-RFT files, through the real CLI)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.config import load_config
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("convert")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=16, test=4)
    return root


def _files(root: Path) -> dict[str, str]:
    """One config per dialect that translates completely, on the tiny model and task."""
    return {
        "verl": f"""\
            data: {{train_files: {root}/data/train.parquet, val_files: {root}/data/test.parquet, train_batch_size: 4, max_prompt_length: 32, max_response_length: 8}}
            algorithm: {{adv_estimator: grpo}}
            actor_rollout_ref:
              model: {{path: {root}/model}}
              actor: {{ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 4, use_kl_loss: true, optim: {{lr: 1.0e-4}}}}
              rollout: {{n: 4, temperature: 0.9}}
            trainer: {{total_epochs: 2, logger: ['console'], default_local_dir: {root}/run_verl}}
        """,
        "roll": f"""\
            pretrain: {root}/model
            rollout_batch_size: 4
            num_return_sequences_in_group: 4
            prompt_length: 32
            response_length: 8
            dual_clip_loss: true
            pg_clip: 0.25
            num_gpus_per_node: 1
            actor_train:
              training_args: {{learning_rate: 2.0e-5, per_device_train_batch_size: 2, gradient_accumulation_steps: 4}}
              data_args: {{file_name: [{root}/data/train.parquet]}}
            actor_infer:
              generating_args: {{temperature: 0.8, num_return_sequences: 4, max_new_tokens: 8}}
              strategy_args: {{strategy_name: hf_infer}}
        """,
        "trinity": f"""\
            algorithm: {{algorithm_type: grpo, repeat_times: 4}}
            model: {{model_path: {root}/model, max_model_len: 40, max_response_tokens: 8}}
            explorer: {{rollout_model: {{engine_type: hf}}}}  # posttrain's own engine here: Trinity-RFT's default is vllm
            buffer:
              batch_size: 4
              total_epochs: 2
              explorer_input:
                taskset: {{path: {root}/data, split: train}}
        """,
    }


@pytest.mark.parametrize("dialect", ["verl", "roll", "trinity"])
def test_plan_of_the_converted_file_is_the_plan_of_the_original(dialect, inputs, tmp_path, capsys):
    original = tmp_path / f"{dialect}.yaml"
    original.write_text(textwrap.dedent(_files(inputs)[dialect]))
    converted = tmp_path / "converted.yaml"
    assert main(["config", "convert", str(original), str(converted)]) == 0
    capsys.readouterr()
    assert main(["config", "plan", str(original)]) == 0
    plan_original = capsys.readouterr().out
    assert main(["config", "plan", str(converted)]) == 0
    assert capsys.readouterr().out == plan_original and "responses per step" in plan_original
    assert load_config(converted) == load_config(original)  # every value, not only the arithmetic


def test_multi_line_refused_values_keep_the_file_valid(inputs, tmp_path, capsys):
    original = tmp_path / "roll.yaml"
    original.write_text(textwrap.dedent(_files(inputs)["roll"]).replace("actor_train:\n", "actor_train:\n  model_args: {freeze_module_prefix: \"audio_tower.a\\\\nb\"}\n", 1) + textwrap.dedent("""\
        my_knob: |
          first line
          second: line
        my_list: ["a\\nb", "it's\\n  indented"]
    """))
    converted = tmp_path / "converted.yaml"
    assert main(["config", "convert", str(original), str(converted)]) == 1  # written, with refused keys
    err = capsys.readouterr().out
    assert "refused: my_knob" in err and "refused: my_list" in err and "refused: actor_train.model_args.freeze_module_prefix" in err
    text = converted.read_text()
    parsed = yaml.safe_load(text)  # every refused value stays inside its comment
    assert "my_knob" not in parsed and "my_list" not in parsed
    assert main(["config", "show", str(converted)]) == 0  # the rest is a valid posttrain config
    assert yaml.safe_load(capsys.readouterr().out)["actor"]["clip_ratio_c"] == pytest.approx(1.5)


def test_a_taskset_that_is_not_on_this_machine_stays_in_the_converted_file(inputs, tmp_path, capsys):
    """A Trinity-RFT file converted on a laptop that lacks the cluster's data keeps its data paths (as
    the entries they read where the files are), listed as not on this machine rather than left out."""
    original = tmp_path / "trinity.yaml"
    cluster = tmp_path / "on_the_cluster"  # a folder of split files there, absent here
    original.write_text(textwrap.dedent(_files(inputs)["trinity"]).replace(f"{{path: {inputs}/data, split: train}}", f"{{path: {cluster}, subset_name: main}}")
                        + f"    eval_tasksets: [{{path: {cluster}/test.jsonl}}]\n")
    converted = tmp_path / "converted.yaml"
    assert main(["config", "convert", str(original), str(converted)]) == 1  # refused here: the files are not on this machine
    text = converted.read_text()
    data = yaml.safe_load(text)["data"]
    assert data["train_files"] == [f"{cluster}:main@train"] and data["val_files"] == [f"{cluster}/test.jsonl"]
    head = text.split("# NOT ON THIS MACHINE", 1)[1].split("\n#\n", 1)[0]
    assert "buffer.explorer_input.taskset.path" in head and "eval_tasksets[0].path" in head and "# REFUSED" not in text
    assert "uncomment once supported" not in text
    capsys.readouterr()
    assert main(["config", "plan", str(converted)]) == 2  # still missing here, named as the data it is
    assert f"{cluster}:main@train" in capsys.readouterr().err
    # where the files are, the converted file runs: the same folder's split files
    cluster.mkdir()
    write_task_data("sort", cluster / "main", train=8, test=4)
    (cluster / "test.jsonl").write_text("".join(line + "\n" for line in _jsonl_rows(cluster / "main" / "test.parquet")))
    assert main(["config", "plan", str(converted)]) == 0, capsys.readouterr().err


def _jsonl_rows(parquet: Path) -> list[str]:
    import json

    import pyarrow.parquet as pq

    return [json.dumps(row) for row in pq.read_table(parquet).to_pylist()]


def test_a_launch_line_converts_to_a_file_that_plans_as_the_line(inputs, tmp_path, capsys):
    """A verl script's words after `python3 -m verl.trainer.main_ppo` (and a ROLL file with its Hydra
    overrides) convert to a posttrain file whose plan and values are the launch line's."""
    verl = ["--dialect", "verl", "algorithm.adv_estimator=grpo", f"data.train_files={inputs}/data/train.parquet",
            f"data.val_files={inputs}/data/test.parquet", "data.train_batch_size=4", "data.max_prompt_length=32",
            "data.max_response_length=8", f"actor_rollout_ref.model.path={inputs}/model", "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.optim.lr=3e-6", "trainer.logger=['console']", "trainer.total_epochs=2"]
    roll = textwrap.dedent(_files(inputs)["roll"])
    (tmp_path / "roll.yaml").write_text(roll)
    lines = {"verl": verl, "roll": ["--dialect", "roll", str(tmp_path / "roll.yaml"), "actor_train.training_args.learning_rate=3e-6", "pg_clip=0.1", "+max_grad_norm=0.5"]}
    for name, words in lines.items():
        converted = tmp_path / f"{name}.converted.yaml"
        assert main(["config", "convert", *words, "-o", str(converted)]) == 0, capsys.readouterr()
        assert "override(s)" in capsys.readouterr().out
        assert main(["config", "plan", *words]) == 0
        plan_line = capsys.readouterr().out
        assert main(["config", "plan", str(converted)]) == 0
        assert capsys.readouterr().out == plan_line and "responses per step" in plan_line
        cfg = load_config(converted)
        assert cfg == load_config(None, words[2:], dialect=name) if name == "verl" else cfg == load_config(words[2], words[3:], dialect=name)
        assert cfg.actor.optim.lr == pytest.approx(3e-6)  # an override reaches the file
    roll_cfg = load_config(tmp_path / "roll.converted.yaml")
    assert roll_cfg.actor.clip_ratio == pytest.approx(0.1) and roll_cfg.actor.grad_clip == pytest.approx(0.5)  # the + addition too
    # without --dialect, KEY=VALUE words are not a file to convert: one line says what a launch line needs
    assert main(["config", "convert", "trainer.total_epochs=2", str(tmp_path / "out.yaml")]) == 2
    assert "a launch line needs --dialect" in capsys.readouterr().err and not (tmp_path / "out.yaml").exists()
