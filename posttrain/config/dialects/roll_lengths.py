"""How many tokens ROLL's RLVR pipeline generates, whatever ``max_new_tokens`` says.

ROLL's configs (roll/configs/base_config.py, roll/pipeline/rlvr/rlvr_config.py ``__post_init__``):

- ``sequence_length`` defaults to ``response_length + prompt_length``; once it is set,
  ``response_length`` is reset to None (read nowhere after). ``prompt_length`` defaults to 1024.
- The RLVR config then overwrites ``actor_infer.generating_args.max_new_tokens`` with
  ``sequence_length - prompt_length``, and ``validation.generating_args.max_new_tokens`` with
  ``val_sequence_length - val_prompt_length`` (which default to the training lengths):
  posttrain's rollout.val_kwargs.response_length when the file sets them.

So the value a file writes for either max_new_tokens is never used: the budget is
``sequence_length - prompt_length``, posttrain's ``data.max_response_length`` (which
``rollout.response_length`` follows when unset, for training and validation alike). The agentic
pipeline does not rewrite it (its max_new_tokens caps each turn: posttrain.config.dialects.roll_agentic),
and the DPO/SFT pipelines generate nothing, so only an RLVR file (one with ``actor_infer`` and no
environment managers) is read this way.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.dialects.roll_defaults import ROLL_DEFAULT
from posttrain.config.dialects.roll_roles import agentic
from posttrain.config.dialects.translate import Context

PROMPT_DEFAULT = 1024  # ROLL's BaseConfig.prompt_length
TRAIN, VAL = "actor_infer.generating_args.max_new_tokens", "validation.generating_args.max_new_tokens"
VAL_LENGTHS = ("val_prompt_length", "val_sequence_length")
_REWRITTEN = ("ROLL's RLVR config replaces it with {what} = {budget} (rlvr_config.py), the budget posttrain generates "
              "up to (data.max_response_length)")


def whole(value: Any) -> bool:
    """A positive whole number of tokens (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def generation_budget(ctx: Context) -> None:
    if agentic(ctx) or not ctx.has("actor_infer"):
        _unread_validation_lengths(ctx)
        return
    prompt, seq, resp = ctx.get("prompt_length", PROMPT_DEFAULT), ctx.get("sequence_length"), ctx.get("response_length")
    if not whole(prompt) or not (whole(seq) or whole(resp)) or (seq is not None and not whole(seq)):
        return  # ROLL refuses such a file itself; the keys translate one by one and are checked there
    if not ctx.has("prompt_length"):
        ctx.set("data.max_prompt_length", PROMPT_DEFAULT, "prompt_length", f"{ROLL_DEFAULT}: {PROMPT_DEFAULT}")
    budget = seq - prompt if seq is not None else resp
    if seq is not None:
        if budget <= 0:
            ctx.consume("sequence_length")
            ctx.refuse("sequence_length", f"sequence_length {seq} leaves no tokens to generate after prompt_length {prompt}",
                       "model.max_model_len", seq)
            return
        if ctx.has("response_length"):
            ctx.consume("response_length")
            ctx.drop("response_length", "ROLL resets it to None once sequence_length is set (BaseConfig); it generates "
                                        "sequence_length - prompt_length tokens")
        ctx.consume("sequence_length")  # it sets two keys: the model length and the response budget
        vseq = ctx.get("val_sequence_length")
        longest = max(seq, vseq) if whole(vseq) else seq
        ctx.set("model.max_model_len", longest, "sequence_length", "" if longest == seq else
                f"the longer of sequence_length and val_sequence_length ({vseq}): rows of both phases fit")
        ctx.set("data.max_response_length", budget, "sequence_length", f"sequence_length {seq} - prompt_length {prompt}")
    what = f"sequence_length {seq} - prompt_length {prompt}" if seq is not None else f"response_length {resp}"
    if any(ctx.has(k) for k in VAL_LENGTHS):
        _validation_budget(ctx, prompt)
    for key, val_lengths in ((TRAIN, ()), (VAL, VAL_LENGTHS)):
        if not ctx.has(key) or any(ctx.has(k) for k in val_lengths):
            continue  # validation lengths of their own: _validation_budget read them
        ctx.consume(key)
        value = ctx.get(key)
        if value == budget:
            ctx.drop(key, f"{budget}: ROLL's RLVR config sets it to {what}, the budget posttrain generates up to")
        else:
            ctx.drop(key, _REWRITTEN.format(what=what, budget=budget))


def _unread_validation_lengths(ctx: Context) -> None:
    """``val_prompt_length`` / ``val_sequence_length`` outside an RLVR file: only ROLL's RLVR config and
    its generate scheduler read them; its base config only checks that both or neither are set."""
    present = [k for k in VAL_LENGTHS if ctx.has(k)]
    if not present:
        return
    ctx.consume(*present)
    given = [k for k in VAL_LENGTHS if ctx.get(k) is not None]
    if len(given) == 1:
        ctx.refuse(given[0], "ROLL's base config stops unless val_prompt_length and val_sequence_length are set together (or neither)",
                   None, ctx.get(given[0]))
        return
    for key in present:
        ctx.drop(key, "read by ROLL's RLVR pipeline only (its validation's generation budget); this pipeline's validation does not read it")


def _validation_budget(ctx: Context, prompt: int) -> None:
    """``val_sequence_length - val_prompt_length``: what ROLL's RLVR validation generates up to
    (rollout.val_kwargs.response_length); its max_new_tokens is rewritten with it."""
    vprompt, vseq = (ctx.get(k) for k in VAL_LENGTHS)
    ctx.consume(*VAL_LENGTHS)
    if not (whole(vprompt) and whole(vseq) and vseq > vprompt):
        ctx.refuse("val_sequence_length", f"ROLL needs val_prompt_length and val_sequence_length together, the second the larger (got {vprompt!r}, {vseq!r})",
                   "rollout.val_kwargs.response_length", vseq)
        return
    if vprompt == prompt:
        ctx.drop("val_prompt_length", f"{vprompt}: the training prompt length, posttrain's one prompt limit (data.max_prompt_length)")
    else:
        ctx.refuse("val_prompt_length", f"{vprompt}: posttrain has one prompt limit for training and validation (data.max_prompt_length, "
                                        f"here prompt_length {prompt}); set val_prompt_length to it", None, vprompt)
    ctx.set("rollout.val_kwargs.response_length", vseq - vprompt, "val_sequence_length", f"val_sequence_length {vseq} - val_prompt_length {vprompt}")
    if ctx.has(VAL):
        ctx.consume(VAL)
        ctx.drop(VAL, _REWRITTEN.format(what=f"val_sequence_length {vseq} - val_prompt_length {vprompt}", budget=vseq - vprompt)
                 .replace("(data.max_response_length)", "(rollout.val_kwargs.response_length)"))


HANDLERS = [generation_budget]
