"""An RL or distillation stage's image side: the vision-language policy's image processor for the
datasets, and the settings posttrain's vision path cannot honour for image rows, refused before any
model loads."""

from __future__ import annotations

from typing import Any

from posttrain.config.checks import role_needs
from posttrain.config.schema import Config
from posttrain.data.dataset import RLDataset, SFTDataset
from posttrain.data.images import ImageInputs, has_media
from posttrain.data.videos import FrameRule
from posttrain.errors import ConfigError
from posttrain.models.loading import load_config
from posttrain.models.vision import is_vision_language, vision_path_problems


def image_inputs(cfg: Config, tokenizer: Any) -> ImageInputs | None:
    """The policy's image processor and pixel bounds when it is a vision-language model, else None
    (rows with images are then refused by the dataset, naming the row)."""
    m = cfg.model
    config = load_config(m.path, trust_remote_code=m.trust_remote_code, override_config=m.override_config)
    if not is_vision_language(config):
        return None
    d = cfg.data
    frames = FrameRule(fps=d.video_fps, min_frames=d.video_min_frames, max_frames=d.video_max_frames,
                       min_pixels=d.video_min_pixels, max_pixels=d.video_max_pixels, total_pixels=d.video_total_pixels)
    return ImageInputs.from_model_dir(m.path, tokenizer, min_pixels=d.image_min_pixels, max_pixels=d.image_max_pixels,
                                      frames=frames, video_folder=d.video_folder)


def check_image_rows(cfg: Config, datasets: list[Any]) -> None:
    """Refuse the settings `posttrain.models.vision.vision_path_problems` names when a dataset has a row with images or videos."""
    key = cfg.data.image_key
    media = (key, cfg.data.video_key)
    if not any(isinstance(d, RLDataset) and any(has_media(d.table.rows[i].get(c)) for i in d.indices for c in media)
               for d in datasets if d is not None):
        return
    problems = vision_path_problems(sequence_parallel=cfg.actor.ulysses_sequence_parallel_size,
                                    rollout_name=cfg.rollout.name, critic=role_needs(cfg).critic)
    if problems:
        raise ConfigError([f"data.image_key ({key}) rows: {p}" for p in problems])


def check_expert_images(cfg: Config, expert_set: Any) -> None:
    """Refuse what the vision path cannot do for expert rows with images (algorithm.mix.image_key).
    Those rows only pass through the actor's and reference's forwards (never the engine, and the
    critic is updated before they join the batch), so of `vision_path_problems` only sequence
    parallelism applies."""
    if not isinstance(expert_set, SFTDataset) or expert_set.images is None:
        return
    key = expert_set.cfg.image_key
    if not any(has_media(expert_set.table.rows[i].get(key)) for i in expert_set.indices):
        return
    problems = vision_path_problems(sequence_parallel=cfg.actor.ulysses_sequence_parallel_size, rollout_name="hf", critic=False)
    if problems:
        raise ConfigError([f"algorithm.mix.image_key ({key}) expert rows: {p}" for p in problems])


# The vision tower's input settings a distillation teacher must share with the student: it reads the
# patches the student's image processor made, and fills the same image tokens.
_PATCH_SETTINGS = ("patch_size", "spatial_merge_size", "temporal_patch_size", "in_channels")


def _rows_with_images(dataset: Any) -> bool:
    if not isinstance(dataset, SFTDataset) or dataset.images is None:
        return False
    key = dataset.cfg.image_key
    return any(has_media(dataset.table.rows[i].get(key)) for i in dataset.indices)


def check_distill_images(cfg: Config, datasets: list[Any]) -> None:
    """A distillation stage with image rows (data.image_key): the teacher is a vision-language model
    whose vision tower takes the student's patches (same patch, merge and temporal sizes, same image
    token), and no sequence parallelism (`vision_path_problems`). Text rows need none of this."""
    if not any(_rows_with_images(d) for d in datasets if d is not None):
        return
    m, path = cfg.model, cfg.algorithm.distill.teacher_path
    where = f"data.image_key ({cfg.data.image_key}) rows"
    problems = vision_path_problems(sequence_parallel=cfg.actor.ulysses_sequence_parallel_size, rollout_name="hf", critic=False)
    student = load_config(m.path, trust_remote_code=m.trust_remote_code, override_config=m.override_config)
    teacher = load_config(path, trust_remote_code=m.trust_remote_code)
    if not is_vision_language(teacher):
        problems.append(f"the teacher (algorithm.distill.teacher_path {path!r}, {getattr(teacher, 'model_type', '?')}) is a "
                        "text-only model, which cannot read the rows' images; use a vision-language teacher (Qwen2-VL, Qwen2.5-VL)")
    else:
        ours, theirs = student.vision_config, teacher.vision_config
        differ = [f"{k} {getattr(theirs, k, None)} vs {getattr(ours, k, None)}" for k in _PATCH_SETTINGS
                  if getattr(theirs, k, None) != getattr(ours, k, None)]
        if teacher.image_token_id != student.image_token_id:
            differ.append(f"image_token_id {teacher.image_token_id} vs {student.image_token_id}")
        if differ:
            problems.append(f"the teacher's vision tower takes other patches than the student's image processor makes "
                            f"({', '.join(differ)}, teacher vs student); both must read the same patches")
    if problems:
        raise ConfigError([f"{where}: {p}" for p in problems])
