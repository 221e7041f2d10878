"""Vision-language policies (Qwen2-VL, Qwen2.5-VL): which models are, and their forward with images.

A row's images reach the model as `VisionInputs` (patches and per-image patch grid, made by the data
pipeline's image processor, `posttrain.data.images`). The prompt holds one ``<|image_pad|>`` token
per merged patch; the vision tower's output replaces those tokens' embeddings. Positions are the
family's multimodal rotary positions (M-RoPE): three per token (temporal, height, width), equal for
text tokens and following the patch grid inside an image, so the text after an image resumes at the
image's start plus its larger side in merged patches, not at its token count. Both the actor's
full-sequence forward (`vision_hidden_states`) and the rollout engine's prefill take the positions
from `mrope_positions`, which reads only real tokens (padding gets position 0 and is masked), so
the log-probs of the engine and of the actor agree to float rounding.

What the vision path does not do, and why: padding-free packing (positions of packed rows would have
to be the three-section ones, which the packed forward does not take) and Ulysses sequence
parallelism (splitting a sequence would split an image's tokens from the tower's output) are not
used for batches with images; `vision_path_problems` names what a configuration asks that this
path cannot give.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor, nn

from posttrain.records import VisionInputs

# model_type values of config.json whose forward, positions and generation this module implements.
VISION_FAMILIES = ("qwen2_vl", "qwen2_5_vl")
# Parameter-name prefix of the vision tower (and its patch merger) in both families, as named by
# model.named_parameters() of the loaded model: what actor.freeze_vision_tower freezes.
VISION_TOWER_PREFIX = "model.visual"


def is_vision_language(config) -> bool:
    """Whether a model config is one of the vision-language families posttrain trains."""
    return getattr(config, "model_type", None) in VISION_FAMILIES


def has_images(vision: Sequence[VisionInputs | None] | None) -> bool:
    """Whether any row carries media (images or videos): such a batch takes the vision path."""
    return vision is not None and any(v is not None for v in vision)


@dataclass(frozen=True)
class StackedVision:
    """A batch's images and videos as the vision tower takes them, in row order (None: the batch has
    none of that kind); their features fill the batch's image and video tokens in reading order."""

    pixels: Tensor | None  # (N, D) image patches
    grid: Tensor | None  # (I, 3) per image
    video_pixels: Tensor | None  # (M, D) video patches
    video_grid: Tensor | None  # (V, 3) per video
    second_per_grid: Tensor | None  # (V,) seconds per temporal patch (Qwen2.5-VL's time axis)


def stack_vision(vision: Sequence[VisionInputs | None], device: torch.device, dtype: torch.dtype) -> StackedVision:
    """The batch's patches and grids in row order (`StackedVision`)."""
    rows = [v for v in vision if v is not None]

    def cat(parts: list[Tensor | None], to: torch.dtype) -> Tensor | None:
        kept = [t for t in parts if t is not None and t.shape[0]]
        return torch.cat(kept).to(device, to) if kept else None

    with_videos = [v for v in rows if v.video_grid_thw is not None and v.video_grid_thw.shape[0]]
    seconds = [v.second_per_grid_ts if v.second_per_grid_ts is not None else torch.ones(v.video_grid_thw.shape[0])
               for v in with_videos]
    return StackedVision(
        cat([v.pixel_values for v in rows], dtype), cat([v.image_grid_thw for v in rows], torch.long),
        cat([v.pixel_values_videos for v in with_videos], dtype), cat([v.video_grid_thw for v in with_videos], torch.long),
        cat(seconds, torch.float32),
    )


def image_token_mask(model: nn.Module, input_ids: Tensor, prompt_width: int,
                     vision: Sequence[VisionInputs | None] | None = None, attention_mask: Tensor | None = None) -> Tensor:
    """(B, S) bool: the prompt's ``<|image_pad|>`` tokens, which the images fill. The same token
    sampled in a response is text to the model (the engine fed it through the embedding table like
    any sampled token), so the columns from `prompt_width` on never count. A row whose `VisionInputs`
    lists `image_positions` (an agent episode, `posttrain.rollout.episode_images`) has exactly those
    tokens, counted from its first real token (`attention_mask`), prompt or response alike."""
    mask = input_ids == model.config.image_token_id  # (B, S)
    mask[:, prompt_width:] = False
    for b, v in enumerate(vision or ()):
        if v is None or v.image_positions is None:
            continue
        at = int(attention_mask[b].argmax()) + v.image_positions.to(input_ids.device)  # (K,) columns, after left padding
        if bool((at >= input_ids.shape[1]).any()) or not bool((input_ids[b, at] == model.config.image_token_id).all()):
            raise ValueError(f"row {b}: its image positions do not all hold the image token")
        mask[b] = False
        mask[b, at] = True
    return mask


def video_token_mask(model: nn.Module, input_ids: Tensor, prompt_width: int) -> Tensor:
    """(B, S) bool: the prompt's ``<|video_pad|>`` tokens, which the videos fill (as `image_token_mask`)."""
    mask = input_ids == model.config.video_token_id  # (B, S)
    mask[:, prompt_width:] = False
    return mask


def mrope_positions(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, stacked: StackedVision, image_mask: Tensor,
    video_mask: Tensor | None = None,
) -> Tensor:
    """Multimodal rotary positions (3, B, S) of a left- or right-padded batch with images at
    `image_mask` and videos at `video_mask` (B, S); padding holds 0 (it is masked). The family's own
    `get_rope_index` computes them from the real tokens; Qwen2.5-VL spaces a video's temporal
    patches by their seconds (`second_per_grid`)."""
    types = image_mask.int() + (2 * video_mask.int() if video_mask is not None else 0)  # text 0, image 1, video 2
    extra = {}
    if stacked.video_grid is not None and getattr(model.config, "model_type", None) == "qwen2_5_vl":
        extra["second_per_grid_ts"] = stacked.second_per_grid
    positions, _ = model.model.get_rope_index(
        input_ids, mm_token_type_ids=types, image_grid_thw=stacked.grid, video_grid_thw=stacked.video_grid,
        attention_mask=attention_mask.long(), **extra,
    )
    return positions  # (3, B, S)


def _scatter(embeds: Tensor, mask: Tensor, features: Tensor, what: str) -> Tensor:
    if features.shape[0] != int(mask.sum()):
        raise ValueError(f"the prompts hold {int(mask.sum())} {what} tokens but their {what}s make {features.shape[0]}")
    return embeds.masked_scatter(mask.unsqueeze(-1).expand_as(embeds), features.to(embeds.dtype))


def media_embeddings(model: nn.Module, input_ids: Tensor, image_mask: Tensor, video_mask: Tensor | None,
                     stacked: StackedVision) -> Tensor:
    """Token embeddings (B, S, H) with the vision tower's features in place of the image and video tokens."""
    embeds = model.model.get_input_embeddings()(input_ids)  # (B, S, H)
    if stacked.grid is not None:
        features = model.model.get_image_features(stacked.pixels, stacked.grid, return_dict=True).pooler_output
        embeds = _scatter(embeds, image_mask, torch.cat(list(features)), "image")  # (image tokens, H) in reading order
    elif int(image_mask.sum()):
        raise ValueError(f"the prompts hold {int(image_mask.sum())} image tokens but no image")
    if stacked.video_grid is not None:
        features = model.model.get_video_features(stacked.video_pixels, stacked.video_grid, return_dict=True).pooler_output
        embeds = _scatter(embeds, video_mask, torch.cat(list(features)), "video")
    elif video_mask is not None and int(video_mask.sum()):
        raise ValueError(f"the prompts hold {int(video_mask.sum())} video tokens but no video")
    return embeds


def vision_hidden_states(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, vision: Sequence[VisionInputs | None], prompt_width: int,
) -> Tensor:
    """Final-norm hidden states (B, S, H) of a vision-language model over prompt + response ids (the
    prompt in the first `prompt_width` columns) with the rows' images and videos: vision tower,
    features merged at the prompt's image and video tokens, the text decoder at M-RoPE positions."""
    return hidden_states_with_images(model, input_ids, attention_mask, vision,
                                     image_token_mask(model, input_ids, prompt_width, vision, attention_mask),
                                     video_token_mask(model, input_ids, prompt_width))


def hidden_states_with_images(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, vision: Sequence[VisionInputs | None], image_mask: Tensor,
    video_mask: Tensor | None = None,
) -> Tensor:
    """`vision_hidden_states` with the image (and video) tokens given as (B, S) bool masks (the rows'
    media fill them in reading order): for batches whose rows end their prompts at different columns."""
    stacked = stack_vision(vision, input_ids.device, next(model.parameters()).dtype)
    positions = mrope_positions(model, input_ids, attention_mask, stacked, image_mask, video_mask)  # (3, B, S)
    embeds = media_embeddings(model, input_ids, image_mask, video_mask, stacked)  # (B, S, H)
    out = model.model.language_model(
        inputs_embeds=embeds, attention_mask=attention_mask.long(), position_ids=positions, use_cache=False,
    )
    return out.last_hidden_state


def vision_path_problems(*, sequence_parallel: int, rollout_name: str, critic: bool) -> list[str]:
    """What a configuration with image rows asks that posttrain's vision path does not do (one line each)."""
    problems = []
    if sequence_parallel > 1:
        problems.append(f"Ulysses sequence parallelism (size {sequence_parallel}) splits a sequence across ranks, "
                        "which would part an image's tokens from the vision tower's output; set it to 1 for image data")
    if rollout_name != "hf":
        problems.append(f"rollout.name {rollout_name}: posttrain passes images and videos to its hf engine only (the vLLM and "
                        "SGLang adapters send token ids); set rollout.name: hf for image and video data")
    if critic:
        problems.append("a critic (GAE): posttrain's critic is a text model with a value head "
                        "(AutoModelForTokenClassification), which vision-language checkpoints do not load as; "
                        "use a critic-free estimator (grpo, rloo, reinforce_plus_plus, ...) for image data")
    return problems


# What a vision-language checkpoint directory holds beside weights and tokenizer: its processors' settings.
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")


def copy_processor_files(model: nn.Module, out: Path) -> None:
    """Write a vision-language model's image processor files (from the directory it was loaded
    from) beside its saved weights, so the saved directory trains and serves as the original did."""
    if not is_vision_language(model.config):
        return
    source = Path(str(getattr(model, "name_or_path", "") or ""))
    for name in PROCESSOR_FILES:
        if (source / name).is_file() and source.resolve() != Path(out).resolve():
            shutil.copyfile(source / name, Path(out) / name)


def freeze_vision_tower(model: nn.Module) -> list[str]:
    """actor.freeze_vision_tower: no gradient for the vision tower's parameters (the optimizer is
    built over the rest); returns their names. A text-only model has no tower: refused."""
    from posttrain.errors import ModelError
    from posttrain.models.freeze import freeze_by_prefix

    if not is_vision_language(model.config):
        raise ModelError(f"actor.freeze_vision_tower: the policy ({getattr(model.config, 'model_type', '?')}) is a text-only "
                         f"model with no vision tower; set it to false")
    return freeze_by_prefix(model, [VISION_TOWER_PREFIX], key="actor.freeze_vision_tower")
