"""GRPO on the colour image task with a tiny Qwen2-VL model through the command line, in one process."""

import json

from cli_run_helpers import assert_user_error, posttrain, write_config

CONFIG = """\
data: {{train_files: {data}/train.parquet, train_batch_size: 4, max_prompt_length: 32, max_response_length: 3}}
model: {{path: {model}}}
rollout: {{n: 2}}
actor: {{ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8, freeze_vision_tower: true}}
algorithm: {{adv_estimator: grpo}}
trainer: {{total_training_steps: 2, test_freq: -1, logger: [jsonl], default_local_dir: {run}}}
"""


def test_grpo_on_images_runs_from_the_command_line_and_exports_the_processor(tmp_path):
    assert posttrain("make-model", "tiny-vl", str(tmp_path / "model"), cwd=tmp_path).returncode == 0
    made = posttrain("make-data", "colour", str(tmp_path / "data"), "--train", "8", "--test", "4", cwd=tmp_path)
    assert made.returncode == 0 and "0 SFT rows" in made.stdout
    config = write_config(tmp_path, CONFIG.format(data=tmp_path / "data", model=tmp_path / "model", run=tmp_path / "run"))
    out = posttrain("train", str(config), cwd=tmp_path)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    rows = [json.loads(line) for line in next((tmp_path / "run").rglob("metrics.jsonl")).read_text().splitlines()]
    trained = [r for r in rows if "actor/grad_norm" in r]  # a random model names no colour yet: rewards are ~0
    assert len(trained) == 2 and all(0 <= r["critic/score/mean"] <= 1 for r in trained)
    assert (tmp_path / "run" / "final_model" / "preprocessor_config.json").is_file()
    refused = posttrain("train", str(config), "algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=4",
                      "trainer.default_local_dir=other", cwd=tmp_path)
    assert_user_error(refused, "data.image_key (images) rows", "a critic (GAE)")
