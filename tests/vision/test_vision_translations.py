"""verl's, ROLL's and Trinity-RFT's image keys translated onto posttrain's (or dropped/refused with the reason)."""

from posttrain.config.dialects import translate
from posttrain.config.dialects.trinity_workflows import MM_SYSTEM_PROMPT


def test_verl_image_keys():
    got, report = translate({"data": {"image_key": "pics", "return_multi_modal_inputs": False},
                             "actor_rollout_ref": {"actor": {"freeze_vision_tower": True}}}, "verl")
    assert got["data"]["image_key"] == "pics" and got["actor"]["freeze_vision_tower"] is True
    assert report.entry("data.return_multi_modal_inputs").status == "dropped"


def test_roll_pixel_bounds_and_the_validation_bound():
    same = {"actor_train": {"data_args": {"image_max_pixels": 1024, "image_min_pixels": 64}},
            "validation": {"data_args": {"image_max_pixels": 1024}}}
    got, report = translate(same, "roll")
    assert (got["data"]["image_max_pixels"], got["data"]["image_min_pixels"]) == (1024, 64)
    assert report.entry("validation.data_args.image_max_pixels").status == "dropped"
    _, report = translate({**same, "validation": {"data_args": {"image_max_pixels": 4096}}}, "roll")
    assert report.entry("validation.data_args.image_max_pixels").status == "refused"


def test_trinity_simple_mm_workflow_and_image_key():
    taskset = {"path": "data.parquet", "format": {"prompt_key": "problem", "image_key": "images"},
               "default_workflow_type": "simple_mm_workflow"}
    got, report = translate({"buffer": {"explorer_input": {"taskset": taskset}}}, "trinity")
    assert got["data"]["image_key"] == "images" and got["data"]["system_prompt"] == MM_SYSTEM_PROMPT
    assert report.entry("buffer.explorer_input.taskset.default_workflow_type").status == "translated"
