"""Prompts of Video-R1 rows (data.prompt_format: video_r1), as ROLL's Video-R1 reader builds them.

Video-R1's data (as ROLL's video RLVR example lays it out) has one question per row in these columns:

- ``problem``: the question text (or a ready chat message list, used as it is);
- ``problem_type``: multiple choice, numerical, OCR, free-form or regression, which picks the answer
  instruction appended to the question (and the video_r1 scorer's comparison);
- ``modality_type``: video or image, where the row's media goes (a ``<video>`` / ``<image>`` marker
  before the text; the media come from data.video_key / data.image_key); absent or null: none;
- ``solution``: the reference answer in ``<answer>`` tags (the ground truth: data.response_key).

The user message is the media marker, then the question in Video-R1's reasoning template, then the
instruction of its problem type; the chat template renders it with a generation prompt.
"""

from __future__ import annotations

from typing import Any

from posttrain.data.files import RowTable
from posttrain.data.prompts import Message, check_messages
from posttrain.errors import DataError

# Video-R1's question template and its per-type answer instructions (the prompt text of the data).
QUESTION = (
    "{Question}\n"
    "Please think about this question as if you were a human pondering deeply. "
    "Engage in an internal dialogue using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', "
    "'let's break it down', etc, or other natural language thought expressions "
    "It's encouraged to include self-reflection or verification in the reasoning process. "
    "Provide your detailed reasoning between the <think> </think> tags, and then give your final answer between "
    "the <answer> </answer> tags."
)
ANSWER_FORMS = {
    "multiple choice": " Please provide only the single option letter (e.g., A, B, C, D, etc.) within the <answer> </answer> tags.",
    "numerical": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
    "OCR": " Please transcribe text from the image/video clearly and provide your text answer within the <answer> </answer> tags.",
    "free-form": " Please provide your text answer within the <answer> </answer> tags.",
    "regression": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
}
MARKERS = {"video": "<video>", "image": "<image>"}


def video_r1_messages(table: RowTable, i: int) -> list[Message]:
    """The prompt messages of Video-R1 row i (module docstring)."""
    problem = table.get(i, "problem", setting="data.prompt_format: video_r1")
    if isinstance(problem, list):
        return check_messages(problem, what=table.locate(i, "problem"))
    kind = table.get(i, "problem_type", setting="data.prompt_format: video_r1")
    if kind not in ANSWER_FORMS:
        raise DataError(f"{table.locate(i, 'problem_type')}: {kind!r} is not a Video-R1 problem type; "
                        f"one of {', '.join(ANSWER_FORMS)}")
    modality: Any = table.get(i, "modality_type", None)
    if modality is not None and modality not in MARKERS:
        raise DataError(f"{table.locate(i, 'modality_type')}: {modality!r}; expected video, image or null")
    text = MARKERS.get(modality, "") + QUESTION.format(Question=problem) + ANSWER_FORMS[kind]
    return [{"role": "user", "content": text}]
