"""Images in RL rows (posttrain.data.images): placed at the prompt's <image> markers, one
<|image_pad|> per merged patch, processed with the policy's image processor; what is refused."""

import io

import pandas as pd
import pytest

from posttrain.config.load import load_config
from posttrain.config.sections.data import DataConfig
from posttrain.data import build_rl_dataset, build_sft_dataset, collate_prompts
from posttrain.data.images import ImageInputs, load_image
from posttrain.errors import DataError
from posttrain.models.loading import load_tokenizer
from posttrain.tasks import compute_score, write_task_data
from posttrain.trainer.images import image_inputs

from tests.vision.conftest import colour_image


def _png(rgb, size=(16, 16)) -> bytes:
    buffer = io.BytesIO()
    colour_image(rgb, size).save(buffer, format="PNG")
    return buffer.getvalue()


def _parquet(path, rows):
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


@pytest.fixture(scope="module")
def images(tiny_vl_dir):
    tok = load_tokenizer(tiny_vl_dir)
    return tok, ImageInputs.from_model_dir(tiny_vl_dir, tok)


def test_image_rows_become_prompts_with_one_pad_token_per_merged_patch(tmp_path, images):
    tok, inputs = images
    paths = write_task_data("colour", tmp_path, train=4, test=2, seed=0)
    ds = build_rl_dataset(DataConfig(max_prompt_length=64), paths["train"], tok, images=inputs)
    example = ds[0]
    pad, start, end = (tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>"))
    # a 16x16 image: 4x4 patches of 4 pixels, merged 2x2 into 4 image tokens between the vision markers
    assert example.vision.image_grid_thw.tolist() == [[1, 4, 4]] and example.vision.pixel_values.shape == (16, 3 * 2 * 4 * 4)
    at = example.prompt_ids.index(start)
    assert example.prompt_ids[at : at + 6] == [start, pad, pad, pad, pad, end]
    assert "<image>" not in tok.decode(example.prompt_ids)
    batch = collate_prompts([ds[0], ds[1]], tok.pad_token_id)
    assert [v.image_grid_thw.tolist() for v in batch.vision] == [[[1, 4, 4]], [[1, 4, 4]]]
    truth = pd.read_parquet(paths["train"])["reward_model"][0]["ground_truth"]
    assert compute_score("posttrain/colour", truth + "<|im_end|>", truth)["acc"] == 1.0
    with pytest.raises(DataError, match="a text-only model"):  # the same rows for a text policy
        build_rl_dataset(DataConfig(), paths["train"], tok)
    renamed = _parquet(tmp_path / "renamed.parquet", pd.read_parquet(paths["train"]).rename(columns={"images": "pictures"}))
    assert build_rl_dataset(DataConfig(), renamed, tok, images=inputs)[0].vision is None  # data.image_key: images is not there
    moved = build_rl_dataset(DataConfig(image_key="pictures", max_prompt_length=64), renamed, tok, images=inputs)[0]
    assert moved.prompt_ids == example.prompt_ids and moved.vision.pixel_values.equal(example.vision.pixel_values)


def test_pixel_bounds_set_how_many_image_tokens_a_row_gets(tmp_path, images, tiny_vl_dir):
    tok, _ = images
    path = _parquet(tmp_path / "big.parquet", [{"prompt": "<image>Colour?", "images": [{"bytes": _png((9, 9, 9), (32, 32)), "path": None}]}])
    counts = []
    for bounds in ([], ["data.image_max_pixels=256"], ["data.image_min_pixels=4096", "data.image_max_pixels=4096"]):
        cfg = load_config(None, [f"model.path={tiny_vl_dir}", "data.prompt_key=prompt", "data.max_prompt_length=128", *bounds])
        example = build_rl_dataset(cfg.data, path, tok, images=image_inputs(cfg, tok))[0]
        counts.append(example.prompt_ids.count(tok.convert_tokens_to_ids("<|image_pad|>")))
    assert counts == [16, 4, 64]  # 32x32 as is; resized to 16x16; resized up to 64x64


def test_image_cells_of_every_form_load(tmp_path):
    png = _png((255, 0, 0))
    (tmp_path / "red.png").write_bytes(png)
    for cell in (png, {"bytes": png, "path": None}, {"bytes": None, "path": str(tmp_path / "red.png")}, "red.png",
                 colour_image((255, 0, 0))):
        assert load_image(cell, "row 0", base_dir=tmp_path).getpixel((3, 3)) == (255, 0, 0)
    with pytest.raises(DataError, match="row 0: cannot read the image"):
        load_image(b"not a png", "row 0")


def test_rows_the_vision_path_cannot_read_are_refused_naming_the_row(tmp_path, images):
    tok, inputs = images
    png = {"bytes": _png((0, 0, 255)), "path": None}
    two = _parquet(tmp_path / "two.parquet", [{"prompt": "<image><image>Colour?", "images": [png]}])
    with pytest.raises(DataError, match=r"row 0.*has 2 <image> markers but the row only 1 image"):
        build_rl_dataset(DataConfig(prompt_key="prompt"), two, tok, images=inputs)[0]
    surplus = _parquet(tmp_path / "surplus.parquet", [{"prompt": "Colour of <image>?", "images": [png, png]}])
    text = tok.decode(build_rl_dataset(DataConfig(prompt_key="prompt"), surplus, tok, images=inputs)[0].prompt_ids)
    span = "<|vision_start|>" + "<|image_pad|>" * 4 + "<|vision_end|>"
    assert f"user\n{span}Colour of {span}?" in text  # an image without a marker goes first (Trinity-RFT's rule)
    long = _parquet(tmp_path / "long.parquet", [{"prompt": "<image>Colour?", "images": [png]}])
    with pytest.raises(DataError, match="cutting it would cut its images"):
        build_rl_dataset(DataConfig(prompt_key="prompt", max_prompt_length=8, truncation="left"), long, tok, images=inputs)[0]
    sft = _parquet(tmp_path / "sft.parquet", [{"prompt": "<image>Colour?", "response": "blue", "images": [png]}])
    with pytest.raises(DataError, match="SFT and DPO stages train text sequences"):
        build_sft_dataset(DataConfig(prompt_key="prompt", response_key="response"), sft, tok)


def test_a_detection_scorer_reads_the_grid_of_the_row_the_engine_returns(tiny_vl_dir):
    """A prompt of the tiny model's processor, returned by `RolloutBatch.sampled` as an engine returns
    it, gives the detection scorer its image's grid: the 40 x 20 px image is resized to 40 x 16 (a
    multiple of patch 4 x merge 2), so a reply's whole-image pixel box [0, 0, 40, 16] is the truth's
    [0, 0, 1000, 1000] and scores 1."""
    import torch
    from transformers import AutoImageProcessor

    from posttrain.records import RolloutBatch
    from posttrain.trainer.rewarding import RewardStage
    from tests.vision.conftest import prompt_batch

    tok = load_tokenizer(tiny_vl_dir)
    rows = prompt_batch(tok, AutoImageProcessor.from_pretrained(tiny_vl_dir), [colour_image((255, 0, 0), (40, 20))])
    rows.data_source, rows.ground_truth = ["coco"], ["<answer>[{'bbox_2d': [0, 0, 1000, 1000], 'label': 'red'}]</answer>"]
    rows.extra_info = [{"reward_model": {"verifier_parm": {"det_verifier_normalized": True,
                                                           "det_reward_ratio": {"iou_max_label_first": 1.0}}}}]
    ids = tok("<think>red</think>\n<answer>\n[{'bbox_2d': [0, 0, 40, 16], 'label': 'red'}]\n</answer>", add_special_tokens=False).input_ids
    batch = RolloutBatch.sampled(rows, torch.tensor([ids]), torch.ones(1, len(ids)), torch.zeros(1, len(ids)), 0)
    cfg = load_config(None, ["reward.custom_reward_function.name=detection", "reward.custom_reward_function.reward_kwargs={patch_size: 4}"])
    stage = RewardStage(cfg, tok)
    scores, _, _ = stage.score(batch, stage.decode(batch))
    stage.close()
    assert scores.tolist() == [pytest.approx(1.0)]
