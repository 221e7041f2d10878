"""Videos in RL rows: read from data.video_folder, placed at the prompt's <video> markers with one
<|video_pad|> per merged patch; data.video_fps / video_max_frames change the sampled frames and
data.video_min/max/total_pixels their size; two GRPO steps run on a tiny video dataset."""

import json

import pandas as pd
import pytest

from cli_run_helpers import posttrain, write_config
from posttrain.config.load import load_config
from posttrain.data import build_rl_dataset
from posttrain.errors import DataError
from posttrain.models.loading import load_tokenizer
from posttrain.trainer.images import image_inputs

from tests.vision.test_video_frames import write_video

av = pytest.importorskip("av", reason="PyAV (the video extra) reads video files")


def _data(tmp_path, rows: int = 2):
    (tmp_path / "clips").mkdir()
    for k in range(rows):
        write_video(tmp_path / "clips" / f"c{k}.mkv", frames=8, fps=4, size=(48, 32))
    frame = pd.DataFrame({
        "prompt": [[{"role": "user", "content": f"<video>Which way does clip {k} move?"}] for k in range(rows)],
        "videos": [[f"c{k}.mkv"] for k in range(rows)],
        "answer": ["<answer>A</answer>"] * rows, "tag": ["video"] * rows, "problem_type": ["multiple choice"] * rows,
    })
    path = tmp_path / "train.parquet"
    frame.to_parquet(path)
    return path


def _example(tiny_vl_dir, path, *overrides):
    cfg = load_config(None, [f"model.path={tiny_vl_dir}", "data.max_prompt_length=400", *overrides])
    tok = load_tokenizer(tiny_vl_dir)
    return tok, build_rl_dataset(cfg.data, str(path), tok, images=image_inputs(cfg, tok))[0]


def test_video_rows_become_prompts_and_the_video_keys_change_frames_and_pixels(tmp_path, tiny_vl_dir):
    path = _data(tmp_path)
    folder = f"data.video_folder={tmp_path / 'clips'}"
    small = "data.video_min_pixels=64"  # the frames keep their 48 x 32 pixels (the default minimum is 128 merged tokens)
    tok, example = _example(tiny_vl_dir, path, folder, small)
    # 8 frames at 4 fps = 2 s; 2 fps: 4 frames = 2 temporal patches; 48 x 32 pixels in 4-pixel patches: 8 x 12
    assert example.vision.video_grid_thw.tolist() == [[2, 8, 12]] and example.vision.image_grid_thw.shape == (0, 3)
    start, pad, end = (tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|video_pad|>", "<|vision_end|>"))
    at = example.prompt_ids.index(start)
    assert example.prompt_ids[at:at + 2 + 48] == [start] + [pad] * 48 + [end]  # 2 x 8 x 12 / 4 merged tokens
    assert "<video>" not in tok.decode(example.prompt_ids)
    assert example.vision.second_per_grid_ts.tolist() == [1.0]  # 2 frames a patch at 2 fps
    grids = {
        "data.video_fps=4": [[4, 8, 12]],  # every frame
        "data.video_max_frames=2": [[1, 8, 12]],
        "data.video_min_frames=6": [[3, 8, 12]],
        # 256 pixels at most: scaled by sqrt(1536 / 256), floored to 8-pixel steps: 8 x 16 pixels
        "data.video_max_pixels=256": [[2, 2, 4]],
        "data.video_min_pixels=6144": [[2, 16, 24]],  # scaled by 2: 64 x 96 pixels
        "data.video_total_pixels=512": [[2, 2, 4]],  # 512 / 4 frames x 2 = 256 pixels a frame, as above
    }
    for override, grid in grids.items():
        _, other = _example(tiny_vl_dir, path, folder, small, override)
        assert other.vision.video_grid_thw.tolist() == grid, override
    with pytest.raises(DataError, match=r"no video file at .*c0\.mkv.*data\.video_folder"):
        _example(tiny_vl_dir, path)  # relative paths without the folder: the data file's folder has no clips


def test_grpo_on_videos_runs_two_steps(tmp_path):
    assert posttrain("make-model", "tiny-vl", str(tmp_path / "model"), cwd=tmp_path).returncode == 0
    path = _data(tmp_path, rows=4)
    config = write_config(tmp_path, f"""\
data: {{train_files: {path}, train_batch_size: 2, max_prompt_length: 400, max_response_length: 3, response_key: answer,
        reward_fn_key: tag, extra_info_keys: [problem_type], video_folder: {tmp_path / 'clips'}, video_min_pixels: 64, video_max_pixels: 512}}
model: {{path: {tmp_path / 'model'}}}
rollout: {{n: 2}}
actor: {{ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 4}}
algorithm: {{adv_estimator: grpo}}
reward: {{workers: {{v: {{worker_cls: video_r1, tag_included: [video], reward_kwargs: {{type_key: problem_type}}}}}}}}
trainer: {{total_training_steps: 2, test_freq: -1, logger: [jsonl], default_local_dir: {tmp_path / 'run'}}}
""")
    out = posttrain("train", str(config), cwd=tmp_path)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    rows = [json.loads(line) for line in next((tmp_path / "run").rglob("metrics.jsonl")).read_text().splitlines()]
    trained = [r for r in rows if "actor/grad_norm" in r]
    assert len(trained) == 2 and all(0 <= r["critic/score/mean"] <= 2 for r in trained)
    # the rollouts' prompts are the dataset's, video tokens included (4 frames of 16 x 24 pixels: 2 x 4 x 6 patches, 12 merged tokens)
    tok, example = _example(tmp_path / "model", path, f"data.video_folder={tmp_path / 'clips'}", "data.video_min_pixels=64",
                            "data.video_max_pixels=512")
    assert example.prompt_ids.count(tok.convert_tokens_to_ids("<|video_pad|>")) == 12
    assert all(r["prompt_length/max"] == len(example.prompt_ids) for r in trained)


def test_video_r1_rows_are_prompted_as_rolls_reader_prompts_them(tmp_path, tiny_vl_dir):
    (tmp_path / "clips").mkdir()
    write_video(tmp_path / "clips" / "c.mkv", frames=8, fps=4, size=(48, 32))
    path = tmp_path / "r1.parquet"
    pd.DataFrame({"problem": ["How many cars pass?"], "problem_type": ["numerical"], "modality_type": ["video"],
                  "video": ["c.mkv"], "solution": ["<answer>3</answer>"]}).to_parquet(path)
    tok, example = _example(tiny_vl_dir, path, f"data.video_folder={tmp_path / 'clips'}", "data.video_min_pixels=64",
                            "data.prompt_format=video_r1", "data.video_key=video", "data.response_key=solution",
                            "data.reward_fn_key=modality_type", "data.extra_info_keys=[problem_type]", "data.max_prompt_length=1000")
    text = tok.decode(example.prompt_ids)
    assert text.index("<|vision_start|><|video_pad|>") < text.index("How many cars pass?\nPlease think about this question")
    assert "Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags." in text
    assert example.vision.video_grid_thw.tolist() == [[2, 8, 12]]
    assert (example.ground_truth, example.data_source, example.extra_info) == ("<answer>3</answer>", "video", {"problem_type": "numerical"})
