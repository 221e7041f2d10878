"""The Trinity-RFT handler for ``algorithm.algorithm_type`` and the keys that override its parts.

`posttrain.config.dialects.trinity_algorithms.TYPES` says which parts a type bundles; this module
writes the native fields they select: ``algorithm.kind``, ``algorithm.adv_estimator`` (+
``adv_estimator_args``), ``actor.policy_loss.loss_mode`` (+ ``loss_args``), a teacher for the
distillation types (``explorer.auxiliary_models[0]`` -> ``ref.model_path``), expert rows for the mix
types (``buffer.trainer_input.auxiliary_buffers`` + ``sample_strategy_args`` -> ``algorithm.mix``).
The KL terms follow the type in posttrain.config.dialects.trinity_defaults.
"""

from __future__ import annotations

import math
from typing import Any

from posttrain.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, estimator_options, policy_loss_options
from posttrain.config.dialects.translate import Context
from posttrain.config.dialects.trinity_algorithms import (
    ADVANTAGE_FNS, LOSS_ARG_BATCHING, REFUSED_ADVANTAGE_FNS, TOKEN_FILTER_FNS, LOSS_ARG_FIELDS, POLICY_LOSS_FNS, REFUSED, TYPES, TrinityType, known_types,
)
from posttrain.config.dialects.trinity_files import data_files

TYPE_KEY = "algorithm.algorithm_type"
DEFAULT_TYPE = "ppo"  # Trinity-RFT's AlgorithmConfig default
NOT_WRITTEN = "Trinity-RFT's default (not written in the file)"


def algorithm_type(ctx: Context, default: str | None = DEFAULT_TYPE) -> None:
    """Translate the type (``default`` when the file names none; None: leave the base config's)."""
    written = ctx.has(TYPE_KEY)
    if not written and default is None:
        return
    ctx.consume(TYPE_KEY)
    name = ctx.get(TYPE_KEY, default)
    if name in REFUSED:
        ctx.refuse(TYPE_KEY, f"not implemented: {REFUSED[name]}", "algorithm.kind", name)
        return
    if name not in TYPES:
        ctx.refuse(TYPE_KEY, f"unknown algorithm_type {name!r}; Trinity-RFT's are {known_types()}", "algorithm.kind", name)
        return
    t = TYPES[name]
    why = f"{name!r}" if written else f"{NOT_WRITTEN}: algorithm_type {name!r}"
    ctx.set("algorithm.kind", t.kind, TYPE_KEY, f"{why} -> kind {t.kind!r}")
    if t.kind != "rl":
        return
    _advantage(ctx, t, why)
    loss = _policy_loss(ctx, t, why)
    _entropy(ctx)
    if t.teacher:
        _teacher(ctx, name)
    if t.expert and loss in ("mix", "mix_chord"):
        _expert(ctx, name)


def stage_algorithm_type(ctx: Context) -> None:
    """A stage's type: only when the stage names one (the rest comes from the base config)."""
    algorithm_type(ctx, default=None)


def _advantage(ctx: Context, t: TrinityType, why: str) -> None:
    key, args_key = "algorithm.advantage_fn", "algorithm.advantage_fn_args"
    fn = ctx.get(key, t.advantage_fn)
    ctx.consume(key, args_key)
    source = key if ctx.has(key) else TYPE_KEY
    if fn in REFUSED_ADVANTAGE_FNS:
        ctx.refuse(source, f"advantage_fn {fn!r}: {REFUSED_ADVANTAGE_FNS[fn]}", "algorithm.adv_estimator", fn)
        return
    if fn not in ADVANTAGE_FNS:
        ctx.refuse(source, f"advantage_fn {fn!r} has no posttrain estimator; known: {', '.join(sorted(ADVANTAGE_FNS))}", "algorithm.adv_estimator", fn)
        return
    estimator, implied = ADVANTAGE_FNS[fn]
    ctx.set("algorithm.adv_estimator", estimator, source, f"{why}: advantage_fn {fn!r}" if source == TYPE_KEY else f"{fn!r} -> {estimator!r}")
    given = ctx.get(args_key)
    if given is not None and not isinstance(given, dict):
        ctx.refuse(args_key, "expected a mapping of the advantage function's option names to values", "algorithm.adv_estimator_args", given)
        given = None
    args = dict(given) if isinstance(given, dict) else dict(t.advantage_fn_args if fn == t.advantage_fn else {})
    if estimator == "grpo" and "std_threshold" in args:
        _std_threshold(ctx, f"{args_key}.std_threshold", args.pop("std_threshold"))
    if estimator == "grpo" and args.get("std_cal_level", "group") not in ("group", "batch"):  # Trinity raises on another value
        ctx.refuse(f"{args_key}.std_cal_level", "expected group (each group's std) or batch (the batch's std, each group's mean)", None, args.pop("std_cal_level"))
    if fn in TOKEN_FILTER_FNS:
        _token_filter(ctx, fn, args, isinstance(given, dict), source, args_key)
    options = estimator_options(estimator) if estimator in ADVANTAGE_ESTIMATORS else frozenset()
    for name in sorted(set(args) - options):
        ctx.refuse(f"{args_key}.{name}", f"not an option of posttrain's {estimator!r} estimator (its options: {', '.join(sorted(options)) or 'none'})", None, args.pop(name))
    args = {**implied, **args}
    if args:
        ctx.set("algorithm.adv_estimator_args", args, args_key if isinstance(given, dict) else source, "" if isinstance(given, dict) else f"advantage_fn {fn!r}'s settings")


def _token_filter(ctx: Context, fn: str, args: dict[str, Any], given: bool, source: str, args_key: str) -> None:
    """Clip_B / Clip_V: GRPO's advantages and a token filter, whose options leave `args` (what stays
    is GRPO's, epsilon). Trinity fills absent args with the function's default_args, and an option
    the given args omit with its constructor's default."""
    name, defaults, ctor = TOKEN_FILTER_FNS[fn]
    ctx.set("algorithm.token_filter.type", name, source, f"advantage_fn {fn!r}: GRPO with the {name} token filter")
    for option in ctor:
        if option in args:
            ctx.set(f"algorithm.token_filter.{option}", args.pop(option), f"{args_key}.{option}")
        else:  # Trinity's value for an option the file leaves out
            ctx.set(f"algorithm.token_filter.{option}", (ctor if given else defaults)[option], source,
                    f"advantage_fn {fn!r}'s {'constructor' if given else 'default_args'} {option}")


def _std_threshold(ctx: Context, key: str, value: Any) -> None:
    """GRPO's std_threshold: Trinity drops the groups whose reward std is at most the value (and groups
    of one) before its experience buffer, and the trainer's reader waits for a full train_batch_size of
    the others: posttrain's dynamic sampling with that bound, on the final reward."""
    if value is None:  # Trinity's default: no group is skipped
        return
    ctx.set("algorithm.filter_groups.enable", True, key, "groups at or below the bound are skipped and the step refilled")
    ctx.set("algorithm.filter_groups.metric", "seq_reward", key, "Trinity judges a group by its experiences' rewards")
    ctx.set("algorithm.filter_groups.std_threshold", value, key)


def _policy_loss(ctx: Context, t: TrinityType, why: str) -> str | None:
    key, args_key = "algorithm.policy_loss_fn", "algorithm.policy_loss_fn_args"
    fn = ctx.get(key, t.policy_loss_fn)
    ctx.consume(key)
    source = key if ctx.has(key) else TYPE_KEY
    if fn not in POLICY_LOSS_FNS:
        ctx.refuse(source, f"policy_loss_fn {fn!r} has no posttrain loss; known: {', '.join(sorted(POLICY_LOSS_FNS))}", "actor.policy_loss.loss_mode", fn)
        return None
    loss = POLICY_LOSS_FNS[fn]
    ctx.set("actor.policy_loss.loss_mode", loss, source, f"{why}: policy_loss_fn {fn!r}" if source == TYPE_KEY else f"{fn!r} -> {loss!r}")
    args = ctx.get(args_key)
    if not isinstance(args, dict):
        if args is not None:
            ctx.consume(args_key)
            ctx.refuse(args_key, "expected a mapping of the policy loss's option names to values", "actor.policy_loss.loss_args", args)
        return loss
    options = policy_loss_options(loss) if loss in POLICY_LOSSES else frozenset()
    loss_args: dict[str, Any] = {}
    for name, value in args.items():
        sub = f"{args_key}.{name}"
        if name in LOSS_ARG_FIELDS or name in ("beta", "label_smoothing"):
            continue  # their own fields, translated one to one
        ctx.consume(sub)
        if name == "loss_agg_mode":
            ctx.set("actor.loss_agg_mode", value, sub)
        elif name in LOSS_ARG_BATCHING:
            ctx.drop(sub, "how Trinity-RFT scales a mixed batch's micro-batches; posttrain weighs micro-batches by their share of the mini-batch (actor.* batch sizes)")
        elif name in options and name not in ("expert_mask", "global_step", "sample_weights", "loss_scale_factor"):
            loss_args[name] = value
        else:
            ctx.refuse(sub, f"not an option of posttrain's {loss!r} policy loss", None, value)
    if loss_args:
        ctx.set("actor.policy_loss.loss_args", loss_args, args_key, "the loss's own options")
    return loss


def _entropy(ctx: Context) -> None:
    """Trinity's entropy_loss_fn: default (a bonus weighted by entropy_coef), mix (explored rows
    only), none. posttrain has one bonus, actor.entropy_coeff, over every trained row."""
    key = "algorithm.entropy_loss_fn"
    if not ctx.has(key):
        return
    ctx.consume(key)
    value, coef = ctx.get(key), ctx.get("algorithm.entropy_loss_fn_args.entropy_coef", 0.0)
    if value == "none":
        ctx.consume("algorithm.entropy_loss_fn_args.entropy_coef")
        ctx.set("actor.entropy_coeff", 0.0, key, "none: no entropy bonus")
    elif value == "default" or (value == "mix" and not coef):
        ctx.drop(key, "posttrain's one entropy bonus (its weight: entropy_loss_fn_args.entropy_coef -> actor.entropy_coeff)")
    elif value == "mix":
        ctx.refuse(key, "an entropy bonus on the explored rows only: posttrain's covers expert rows too (set entropy_coef 0)", None, value)
    else:
        ctx.refuse(key, f"unknown entropy_loss_fn {value!r}; Trinity-RFT's are default, mix and none", None, value)


def _teacher(ctx: Context, name: str) -> None:
    """The distillation types' teacher: Trinity's first auxiliary model scores the student's samples;
    posttrain's reference role does, loaded from ref.model_path."""
    key = "explorer.auxiliary_models"
    models = ctx.get(key)
    first = models[0] if isinstance(models, list) and models and isinstance(models[0], dict) else None
    if first is None or not isinstance(first.get("model_path"), str):
        ctx.refuse(TYPE_KEY, f"{name} needs a teacher: explorer.auxiliary_models[0].model_path", "ref.model_path", name)
        return
    ctx.consume(key)
    ctx.set("ref.model_path", first["model_path"], f"{key}[0].model_path", "the teacher: posttrain's reference role scores the samples with it")
    for other in first:
        if other != "model_path":
            ctx.drop(f"{key}[0].{other}", "an inference-engine setting of the teacher; posttrain's teacher runs forward passes in the trainer (ref.* batching)")
    if len(models) > 1:
        ctx.refuse(f"{key}[1]", "one teacher only: further auxiliary models serve Trinity-RFT workflows, which posttrain does not run", None, models[1:])


_FORMAT_KEYS = {"prompt_key": "prompt", "response_key": "response", "messages_key": "message"}  # Trinity FormatConfig defaults


def _expert(ctx: Context, name: str) -> None:
    """The mix types' expert rows: auxiliary buffer `sft_dataset_name` -> algorithm.mix.expert_files,
    ceil(expert_data_ratio x train_batch_size) rows per step (Trinity-RFT's mix sample strategy)."""
    strategy, args = "algorithm.sample_strategy", "algorithm.sample_strategy_args"
    ctx.consume(strategy, args)
    if ctx.get(strategy, "mix") != "mix":
        ctx.refuse(strategy, f"{name} draws expert rows with the mix sample strategy", None, ctx.get(strategy))
    ratio = ctx.get(f"{args}.expert_data_ratio", 0.5)
    buffer_name = ctx.get(f"{args}.sft_dataset_name", "sft_dataset")
    aux = "buffer.trainer_input.auxiliary_buffers"
    ctx.consume(aux)
    buffers = ctx.get(aux) or {}
    buf = buffers.get(buffer_name) if isinstance(buffers, dict) else None
    for other in (buffers if isinstance(buffers, dict) else {}):
        if other != buffer_name:
            ctx.refuse(f"{aux}.{other}", f"only the expert buffer {buffer_name!r} (sample_strategy_args.sft_dataset_name) is read", None, buffers[other])
    if not isinstance(buf, dict):
        ctx.refuse(TYPE_KEY, f"{name} needs its expert data: {aux}.{buffer_name} (an SFT dataset)", "algorithm.mix.expert_files", name)
        return
    prefix = f"{aux}.{buffer_name}"
    # the rows per step, before the files: a missing file leaves the batch arithmetic intact
    repeat = ctx.get("algorithm.repeat_times", 1)
    total = ctx.get("buffer.train_batch_size") or (ctx.get("buffer.batch_size", 1) * repeat)
    rows = math.ceil(ratio * total)
    ctx.set("algorithm.mix.expert_batch_size", rows, f"{args}.expert_data_ratio", f"ceil({ratio} x train_batch_size {total}), Trinity-RFT's mix sample strategy")
    try:
        files = data_files(buf.get("path"), buf.get("split", "train"), buf.get("subset_name"))
    except ValueError as err:
        ctx.refuse(f"{prefix}.path", str(err), "algorithm.mix.expert_files", getattr(err, "entry", buf.get("path")))
        return
    ctx.set("algorithm.mix.expert_files", files, f"{prefix}.path")
    _expert_format(ctx, prefix, buf)
    for other in buf:
        if other == "total_epochs":  # the expert reader's sample budget (its trainer stops when it runs dry)
            ctx.set("algorithm.mix.expert_epochs", buf[other], f"{prefix}.{other}", "passes over the expert rows before Trinity-RFT's trainer stops")
        elif other == "schema_type":  # trinity/algorithm/sample_strategy/mix_sample_strategy.py
            ctx.drop(f"{prefix}.{other}", "Trinity-RFT's mix sample strategy reads the expert buffer as SFT rows whatever schema_type "
                                          "says (another value is overridden with a warning); posttrain reads them as SFT rows too")
        elif other not in ("path", "split", "subset_name", "format", "name", "storage_type"):
            ctx.refuse(f"{prefix}.{other}", "no posttrain equivalent for an expert buffer (it is read as a file of SFT rows)", None, buf[other])
    if buf.get("storage_type", "file") != "file":
        ctx.refuse(f"{prefix}.storage_type", "an expert buffer is read from files here", None, buf.get("storage_type"))


def _expert_format(ctx: Context, prefix: str, buf: dict[str, Any]) -> None:
    fmt = buf.get("format") or {}
    messages = fmt.get("prompt_type", "messages") == "messages"  # Trinity's FormatConfig default
    wanted = ("messages_key",) if messages else ("prompt_key", "response_key")
    for key in wanted:
        ctx.set(f"algorithm.mix.{key}", fmt.get(key, _FORMAT_KEYS[key]), f"{prefix}.format.{key}", "" if key in fmt else NOT_WRITTEN)
    for key, value in fmt.items():
        if key == "image_key" and messages:  # trinity/buffer/schema/formatter.py: images from the messages' own items
            ctx.refuse(f"{prefix}.format.{key}", "with prompt_type messages Trinity-RFT reads an expert row's images from the "
                       "image items inside its messages, not from this column; posttrain reads them from a column "
                       "(algorithm.mix.image_key) placed at the messages' <image> markers: store the images in a column "
                       "and mark them in the text", "algorithm.mix.image_key", value)
        elif key == "image_key":
            ctx.set("algorithm.mix.image_key", value, f"{prefix}.format.{key}",
                    "placed at the prompt's <image> markers, the rest before its text, as Trinity-RFT's SFT formatter places "
                    "them; the rows' log-probs and SFT loss are computed with their images. Trinity-RFT's image rows "
                    "also train the header of a next assistant turn it appends (a generation prompt after the reply); "
                    "posttrain's end where the reply's turn ends, as its text rows and Trinity-RFT's do")
        elif key == "video_key":
            ctx.refuse(f"{prefix}.format.{key}", "videos in expert (SFT) rows: posttrain reads videos in RL prompts only "
                       "(data.video_key); its expert rows carry images at most (algorithm.mix.image_key)", None, value)
        elif key not in (*wanted, "prompt_type"):
            ctx.refuse(f"{prefix}.format.{key}", "no posttrain equivalent for this expert-buffer format key", None, value)
