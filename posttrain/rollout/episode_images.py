"""Image observations in agent episodes: an environment that shows its state as a picture
(``render_mode: rgb_array``, ROLL's VLTrajEnvManager examples) played by a vision-language policy.

Where an observation is an image (`posttrain.envs.base.is_image`), its turn is written with the
family's vision span (``<|vision_start|><|image_pad|><|vision_end|>``) in its place, through the
entry's templates like a text observation, and the single ``<|image_pad|>`` of the rendered tokens
is then repeated once per merged patch of the picture, as for image rows of a dataset
(`posttrain.data.images`). The episode keeps every picture's patches and the offsets of their
tokens from the row's first token (`VisionInputs.image_positions`): the engine's prompt of each
turn and the trainer's forward over the whole episode fill exactly those tokens with the vision
tower's output. A pad token the model itself sampled in an action is text, as it was when sampled.

What is refused, with the reason: an image for a text-only policy; an image in a window prompt mode
or in prompt_mode messages (their prompts are written afresh each turn and would need a picture
history of their own); the settings `posttrain.models.vision.vision_path_problems` names (vLLM or
SGLang rollout, sequence parallelism, a critic); turn rows, which would cut an episode's pictures
apart (posttrain.rollout.turn_rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from posttrain.data.images import IMAGE_PAD, VISION_END, VISION_START
from posttrain.envs.base import EnvError
from posttrain.errors import ConfigError
from posttrain.records import VisionInputs

SPAN = VISION_START + IMAGE_PAD + VISION_END  # what a picture's turn holds before its pad token is repeated


@dataclass
class EpisodePictures:
    """The pictures one episode has shown so far, and where their tokens sit."""

    inputs: list[VisionInputs] = field(default_factory=list)  # one per picture, in reading order
    positions: list[int] = field(default_factory=list)  # offsets of their tokens from the row's first token

    def vision(self) -> VisionInputs | None:
        """The episode's pictures as one row's `VisionInputs` (None: it has shown none)."""
        if not self.inputs:
            return None
        return VisionInputs(torch.cat([v.pixel_values for v in self.inputs]), torch.cat([v.image_grid_thw for v in self.inputs]),
                            image_positions=torch.tensor(self.positions, dtype=torch.long))


@dataclass(frozen=True)
class EpisodeImages:
    """The agent loop's image side: the policy's image processor (`posttrain.data.images.ImageInputs`,
    None for a text-only policy) and what the run's settings refuse for images (one line each)."""

    processor: Any = None
    problems: tuple[str, ...] = ()

    def check(self, name: str, windowed: bool) -> None:
        """Refuse, as a configuration error, pictures that this run cannot show the policy."""
        if self.processor is None:
            raise ConfigError(f"env.custom_envs: environment {name} shows an image, but the policy (model.path) is a text-only "
                              "model: use a vision-language policy (Qwen2-VL, Qwen2.5-VL) or the environment's text rendering "
                              "(render_mode: text)")
        if windowed:
            raise ConfigError(f"env.custom_envs: environment {name} shows an image, which posttrain plays in prompt_mode "
                              "conversation only (ROLL's VLTrajEnvManager); a window mode or prompt_mode messages writes each "
                              "prompt afresh from text")
        if self.problems:
            raise ConfigError([f"env.custom_envs: environment {name} shows images: {p}" for p in self.problems])

    def expand(self, ids: list[int], pictures: Sequence[Any], offset: int, what: str) -> tuple[list[int], list[VisionInputs], list[int]]:
        """Rendered tokens holding one ``<|image_pad|>`` per picture, with each repeated once per merged
        patch (`ImageInputs.expand`); also the pictures' `VisionInputs` and their tokens' offsets (from
        `offset`, where `ids` start in the episode row)."""
        from PIL import Image

        pad = self.processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        if ids.count(pad) != len(pictures):
            raise EnvError(f"{what}: its turn holds {ids.count(pad)} {IMAGE_PAD} tokens for {len(pictures)} picture(s); an "
                           f"environment's text must not write {IMAGE_PAD} itself")
        vision = self.processor.process([(p if isinstance(p, Image.Image) else Image.fromarray(p)).convert("RGB") for p in pictures])
        out = self.processor.expand(ids, vision)
        return out, [vision], [offset + i for i, token in enumerate(out) if token == pad]  # every pad here is a picture's
