"""`colour`: name the colour of an image. Prompt ``<image>Colour?``, answer ``red``.

The image task for vision-language policies (posttrain.models.vision): each row holds one 16 x 16
PNG filled with a random shade of one of the first `colours` palette colours (red, blue, green,
yellow), so only the image tells the answer; the prompt words are the same for every row. The
reward gives partial credit for the right first letter, so GRPO groups see signal before whole
words are right:

    1.0 if the answer is the colour's name, 0.3 if it only starts with its first letter, else 0.
"""

from __future__ import annotations

import io
import random

from posttrain.errors import ConfigError
from posttrain.tasks.answers import extract_answer
from posttrain.tasks.registry import Problem, TaskOption, register_task

# name -> the (low, high) band of each RGB channel its shades are drawn from
PALETTE: dict[str, tuple[tuple[int, int], ...]] = {
    "red": ((190, 255), (0, 60), (0, 60)),
    "blue": ((0, 60), (0, 60), (190, 255)),
    "green": ((0, 60), (170, 255), (0, 60)),
    "yellow": ((200, 255), (200, 255), (0, 60)),
}
SIDE = 16


def score(solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict[str, float]:
    """Colour-name score (see the module docstring).

    >>> score("red<|im_end|>", "red")
    {'score': 1.0, 'acc': 1.0}
    >>> score("rde", "red")
    {'score': 0.3, 'acc': 0.0}
    >>> score("blue", "red")
    {'score': 0.0, 'acc': 0.0}
    """
    answer = extract_answer(solution_str).lower()
    if answer == ground_truth:
        return {"score": 1.0, "acc": 1.0}
    return {"score": 0.3 if answer[:1] == ground_truth[:1] else 0.0, "acc": 0.0}


def png(rgb: tuple[int, int, int]) -> bytes:
    """A SIDE x SIDE PNG of one colour."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (SIDE, SIDE), rgb).save(buffer, format="PNG")
    return buffer.getvalue()


@register_task(
    "colour",
    description="Name an image's colour: '<image>Colour?' -> 'red' (images column; a vision-language model).",
    ability="vision",
    score=score,
    options=[TaskOption("colours", 2, "How many palette colours the images use (2 to 4: red, blue, green, yellow).")],
)
def generate(rng: random.Random, *, colours: int) -> Problem:
    """One image of a random shade of a random palette colour."""
    if not 2 <= colours <= len(PALETTE):
        raise ConfigError(f"colour --colours must be between 2 and {len(PALETTE)}, got {colours}")
    name = rng.choice(list(PALETTE)[:colours])
    rgb = tuple(rng.randint(lo, hi) for lo, hi in PALETTE[name])
    return Problem(prompt="<image>Colour?", ground_truth=name, response=name, images=(png(rgb),))
