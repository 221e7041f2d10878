"""ROLL's vision-language distillation (start_distill_vl_pipeline.py, roll/pipeline/distill/distill_vlm_pipeline.py)
as a posttrain distillation stage with image rows.

A distillation file whose ``student.data_args.template`` names a vision-language template (``qwen2-vl``)
is run by that pipeline, which never reads the template: it renders each row with the model
processor's own chat template. What it does, read from its source, and posttrain's counterpart:

- Rows: the columns are fixed, ``problem``, ``solution`` and ``image`` (``question_key`` and
  ``answer_key`` are not read): data.prompt_key / response_key / image_key. The user turn is the
  image, then ``"{problem}  Output final answer (number) in <answer> </answer> tags."``
  (data.user_suffix; posttrain puts a row's images without an ``<image>`` marker before the user
  text, as ROLL does); the sequence is that prompt, the solution and the EOS token (posttrain: the
  rendered conversation without the template's final newline, the same text when EOS is the turn end).
  One difference: a problem that writes ``<image>`` keeps it as text in ROLL (the image still goes
  first); posttrain puts the image at that marker instead.
- Images: resized to the processor's pixel bounds, which the pipeline sets to 1024 x 1024 and 56 x 56
  (the model_args it reads them from have no such fields, so its defaults always apply):
  data.image_max_pixels / image_min_pixels; one ``<|image_pad|>`` per merged patch.
- Trained tokens: every real token (its labels are the ids wherever the attention mask is 1), whatever
  ``distill_on_prompt`` says: algorithm.distill.on_prompt true. The losses are the text pipeline's
  (posttrain.config.dialects.roll_distill), both forwards with the images (posttrain.trainer.distill).
- Length: the collator pads every row to ``prompt_length`` (ROLL's default 1024) and cuts none, so a
  longer row fails its batch: data.max_length with data.truncation error; ``sequence_length`` is not read.
- No validation: the pipeline never reads ``validation``, ``eval_steps`` or ``infer_batch_size``.
"""

from __future__ import annotations

from posttrain.config.dialects.roll_defaults import ROLL_DEFAULT
from posttrain.config.dialects.translate import Context

ACTOR = "actor_train"
COLUMNS = {"data.prompt_key": "problem", "data.response_key": "solution", "data.image_key": "image"}
QUESTION_SUFFIX = "  Output final answer (number) in <answer> </answer> tags."  # its question_template after {Question}
MAX_PIXELS, MIN_PIXELS = 1024 * 1024, 56 * 56  # the processor bounds the pipeline sets (getattr defaults)
PROMPT_LENGTH = 1024  # BaseConfig.prompt_length, what its collator pads to
_PIPELINE = "ROLL's vision-language distillation (start_distill_vl_pipeline.py)"
_NOT_READ = "ROLL's vision-language distillation pipeline does not read it"


def is_vl_template(template: object) -> bool:
    """Whether a data_args.template names a vision-language template (qwen2-vl, qwen2_5_vl, ...)."""
    return isinstance(template, str) and "vl" in template.lower().replace("-", "_").split("_")


def pipeline(ctx: Context) -> None:
    """The rules of the module docstring, in place of the text pipeline's rows, lengths and validation."""
    template_key = f"{ACTOR}.data_args.template"
    ctx.consume(template_key)
    ctx.drop(template_key, f"{ctx.get(template_key)!r} picks {_PIPELINE}, which renders rows with the model processor's own chat template and "
                           "reads no template name; posttrain renders them with the model's own (tokenizer) template, the same text")
    for native, column in COLUMNS.items():
        ctx.set(native, column, template_key, f"{_PIPELINE} reads the column {column!r}")
    for key in ("question_key", "answer_key", "prompt_key", "system_key"):
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, f"{_NOT_READ}: it reads the columns problem, solution and image")
    ctx.set("data.user_suffix", QUESTION_SUFFIX, template_key, f"{_PIPELINE} writes this after each problem")
    ctx.set("data.image_max_pixels", MAX_PIXELS, template_key, f"{_PIPELINE} resizes images to at most 1024 x 1024 pixels")
    ctx.set("data.image_min_pixels", MIN_PIXELS, template_key, f"{_PIPELINE} resizes images to at least 56 x 56 pixels")
    for key in (f"{ACTOR}.data_args.image_max_pixels", f"{ACTOR}.data_args.image_min_pixels",
                f"{ACTOR}.model_args.max_pixels", f"{ACTOR}.model_args.min_pixels"):
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, f"{_NOT_READ} (its processor's bounds are always 1024 x 1024 and 56 x 56 pixels)")
    _trained_tokens(ctx)
    _lengths(ctx)
    for key in ("validation", "eval_steps", f"{ACTOR}.infer_batch_size"):
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, f"{_NOT_READ}: it never validates")


def _trained_tokens(ctx: Context) -> None:
    key = "distill_on_prompt"
    ctx.consume(key)
    why = f"{_PIPELINE} trains every real token (its labels are the ids under the attention mask), whatever distill_on_prompt says"
    ctx.set("algorithm.distill.on_prompt", True, key, why)


def _lengths(ctx: Context) -> None:
    length = ctx.get("prompt_length", PROMPT_LENGTH)
    ctx.consume("prompt_length", "sequence_length")
    note = "" if ctx.has("prompt_length") else f"{ROLL_DEFAULT}: {PROMPT_LENGTH}; "
    ctx.set("data.max_length", length, "prompt_length", f"{note}its collator pads every row to prompt_length and cuts none, so a longer row fails its batch")
    ctx.set("data.truncation", "error", "prompt_length", f"{_PIPELINE} cuts no row")
    if ctx.has("sequence_length"):
        ctx.drop("sequence_length", f"{_NOT_READ}: its rows are padded to prompt_length")
