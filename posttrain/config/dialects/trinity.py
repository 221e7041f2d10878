"""Trinity-RFT (modelscope/Trinity-RFT) rules that are more than one key to one key.

Source of the semantics: Trinity-RFT's configuration guide and its published example configs (a copy of
some lives in tests/config/reference_configs).

- ``algorithm.algorithm_type`` names a bundle of parts (kind, advantage function, policy loss, KL,
  entropy, sample strategy): posttrain.config.dialects.trinity_types writes the fields they select;
  an explicit ``advantage_fn`` / ``policy_loss_fn`` wins over the type's.
- A synchronous run's tasksets are posttrain's ``data`` section (see posttrain.config.sections.buffer):
  the training taskset's ``path`` + ``subset_name`` + ``split`` become ``data.train_files`` (a local
  file, the split's files in a local folder, else ``PATH[:SUBSET]@SPLIT``: a save_to_disk folder or a
  Hugging Face dataset name, read from the local cache; posttrain never downloads), its ``format`` keys the ``data``
  column keys, its ``rollout_args`` the rollout sampling; evaluation tasksets become
  ``data.val_files`` and ``rollout.val_kwargs``.
- An SFT/DPO run's ``buffer.trainer_input.experience_buffer`` (its files and ``format`` keys) is
  posttrain's ``data`` section too: posttrain.config.dialects.trinity_experience.
- ``trainer.trainer_config`` is an inline verl config: it is translated with the verl dialect.
- ``stages``: each stage's keys are Trinity keys too; ``stage_name`` is posttrain's ``name``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

from posttrain.config.dialects.lora import trinity_lora
from posttrain.config.dialects.report import Report
from posttrain.config.dialects.trinity_defaults import batching, engine_type, kl_defaults, micro_batch_weight, stage_engine_type, stage_kl_defaults
from posttrain.config.dialects.source import resolve
from posttrain.config.dialects.translate import Context, translate_dict
from posttrain.config.dialects.trinity_batches import RULES as BATCH_RULES, batch_sizes, stage_batch_sizes
from posttrain.config.dialects.trinity_envs import episode_sources, plays_environment
from posttrain.config.dialects.trinity_agent import RULES as AGENT_RULES, parser_keys, server_keys
from posttrain.config.dialects.trinity_workflows import fixed_columns, workflows
from posttrain.config.dialects.values import value_hook
from posttrain.config.tables import Rule
from posttrain.config.dialects.trinity_types import algorithm_type, stage_algorithm_type
from posttrain.config.dialects.trinity_files import data_files, storage_fields
from posttrain.config.dialects.trinity_selectors import data_selector
from posttrain.config.dialects.trinity_external import external_model
from posttrain.config.dialects import trinity_derived
from posttrain.config.dialects.trinity_explorer import RULES as EXPLORER_RULES, accepted_default, auxiliary, engines, over_rollout, sample_strategy, timeouts
from posttrain.config.dialects.trinity_experience import RULES as EXPERIENCE_RULES, experience_files, stage_experience_files

_TS = "buffer.explorer_input.taskset"
_EVAL = "buffer.explorer_input.eval_tasksets"
_TASK_FILES = ("posttrain reads tasks from files (data.train_files, data.val_files); a queue or SQL taskset that another "
               "process fills during the run is not read: write the tasks to a jsonl or parquet file and point path there")
# Trinity-RFT's config validator overwrites a training taskset's repeat_times with algorithm.repeat_times
_TRAIN_REPEAT = ("Trinity-RFT sets a training taskset's repeat_times to algorithm.repeat_times (default 1), whatever the "
                 "file says: rollout.n is algorithm.repeat_times")
_COLUMNS = {"prompt_key": "prompt", "response_key": "response"}  # Trinity-RFT's FormatConfig defaults, posttrain's too
_FORMAT_TO_DATA = {name: f"data.{name}" for name in ("prompt_key", "response_key", "system_prompt", "system_prompt_key", "reply_prefix", "enable_thinking", "image_key")}


_TASKSETS = "buffer.explorer_input.tasksets"
_ONE = f"{_TASKSETS}[0]"


def one_taskset(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """Trinity-RFT's ``explorer_input.tasksets`` list of one taskset is its ``taskset`` (its config
    validator moves a lone ``taskset`` into that list): the file with it moved there, and whether it was.
    Several tasksets, or one beside ``taskset``, stay for `tasksets` to refuse."""
    explorer = raw["buffer"].get("explorer_input") if isinstance(raw.get("buffer"), Mapping) else None
    if not isinstance(explorer, Mapping) or "taskset" in explorer:
        return raw, False
    items = explorer.get("tasksets")
    if not (isinstance(items, list) and len(items) == 1 and isinstance(items[0], Mapping)):
        return raw, False
    moved = {k: v for k, v in explorer.items() if k != "tasksets"} | {"taskset": items[0]}
    return {**raw, "buffer": {**raw["buffer"], "explorer_input": moved}}, True


def _moved(key: str, old: str, new: str) -> str:
    """`key` under `new` where it is `old` or a key below it."""
    return new + key[len(old):] if key == old or key.startswith(old + ".") else key


def with_one_taskset(translate: Callable[..., tuple[dict[str, Any], Report]], raw: Mapping[str, Any], interpolated: set[str],
                     unresolved: Mapping[str, str]) -> tuple[dict[str, Any], Report]:
    """``translate(raw, interpolated, unresolved)`` of a file whose one-taskset ``tasksets`` list is
    read as its ``taskset`` (`one_taskset`), with the report naming the keys as the file writes them."""
    raw, moved = one_taskset(raw)
    if not moved:
        return translate(raw, interpolated, unresolved)
    native, report = translate(raw, {_moved(k, _ONE, _TS) for k in interpolated}, {_moved(k, _ONE, _TS): v for k, v in unresolved.items()})
    report.entries[:] = [dataclasses.replace(e, key=_moved(e.key, _TS, _ONE)) for e in report.entries]
    return native, report


def _taskset(ctx: Context, prefix: str, item: dict[str, Any], training: bool) -> None:
    """Translate one taskset (training: ``prefix`` is the taskset key; eval: ``...eval_tasksets[i]``)."""
    storage_fields(ctx, prefix, item)
    for name in ("path", "split", "subset_name", "storage_type", "name", "repeat_times", "rollout_args", "format"):
        ctx.consume(f"{prefix}.{name}")
    if item.get("storage_type", "file") != "file":
        ctx.refuse(f"{prefix}.storage_type", _TASK_FILES, None, item.get("storage_type"))
    elif "storage_type" in item:
        ctx.drop(f"{prefix}.storage_type", "file: the taskset is read from files, as posttrain does")
    files = None
    if f"{prefix}.path" not in ctx.unresolved:  # an unresolved path is already refused by name
        split = item.get("split", "train" if training else "test")
        native = "data.train_files" if training else "data.val_files"
        try:
            files = data_files(item.get("path"), split, item.get("subset_name"))
        except ValueError as err:
            ctx.refuse(f"{prefix}.path", str(err), native, getattr(err, "entry", item.get("path")))
        else:
            for name in ("split", "subset_name"):  # each named in the report, though path carries them
                if name in item:
                    ctx.report.add(_entry(f"{prefix}.{name}", native, files, f"read with {prefix}.path"))
            if training:
                ctx.set(native, files, f"{prefix}.path", f"split {split!r}" + (f", subset {item['subset_name']!r}" if item.get("subset_name") else ""))
            else:
                ctx.native.setdefault("data", {}).setdefault("val_files", [])
                ctx.native["data"]["val_files"] += files
                ctx.report.add(_entry(f"{prefix}.path", native, files, f"split {split!r}, appended"))
    if "name" in item:
        ctx.drop(f"{prefix}.name", "names the taskset's metrics in Trinity-RFT; posttrain's metrics are named by stage")
    fmt = item.get("format") or {}
    if not training:
        _eval_columns(ctx, prefix, fmt, files)
    for name, value in fmt.items():
        key = f"{prefix}.format.{name}"
        if not training and name in _COLUMNS:
            continue  # _eval_columns
        if name in _FORMAT_TO_DATA:
            ctx.set(_FORMAT_TO_DATA[name], value, key)
        elif name == "prompt_type" and value in ("plaintext", "messages"):
            ctx.drop(key, "posttrain reads a string or a chat message list from data.prompt_key alike")
        else:
            ctx.refuse(key, "no posttrain equivalent for a taskset format key (data.* holds the column keys)", None, value)
    repeat = item.get("repeat_times")
    if training and "repeat_times" in item:
        ctx.drop(f"{prefix}.repeat_times", _TRAIN_REPEAT)
    elif repeat is not None:
        ctx.set("rollout.val_kwargs.n", repeat, f"{prefix}.repeat_times")
    args = item.get("rollout_args") or {}
    if not training and args and "temperature" not in args:  # Trinity samples evaluation at the model's temperature
        ctx.set("rollout.val_kwargs.temperature", ctx.get("model.temperature", 1.0), f"{prefix}.rollout_args", "temperature not given: model.temperature (Trinity's default 1.0)")
    for name, value in args.items():
        key = f"{prefix}.rollout_args.{name}"
        if name == "logprobs" and value in (0, None):
            ctx.drop(key, "0: the sampled token's log-prob only, which posttrain always computes")
        elif name == "logprobs" and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            # vLLM then also returns the top-k alternatives of each token, which Trinity-RFT drops: its
            # experiences keep the sampled token's log-prob (the first entry of each position's dict)
            ctx.drop(key, f"{value}: Trinity-RFT keeps only the sampled token's log-prob of vLLM's top-{value} "
                          "answer, which posttrain always records (rollout_logprobs)")
        elif name == "max_tokens":
            _max_tokens(ctx, key, value, training)
        elif name not in ("temperature", "top_p", "top_k"):
            ctx.refuse(key, "no posttrain equivalent: only temperature, top_p and top_k are sampling settings posttrain has", None, value)
        elif training:
            ctx.set(f"rollout.{name}", value, key)
        else:
            ctx.set(f"rollout.val_kwargs.{name}", value, key)
            ctx.set("rollout.val_kwargs.do_sample", True, key, "evaluation sampling settings given: sample")


def _eval_columns(ctx: Context, prefix: str, fmt: dict[str, Any], files: list[str] | None) -> None:
    """An evaluation taskset's prompt and answer columns: its own format keys, else Trinity-RFT's
    defaults (it does not inherit the training taskset's). Where they differ from the training
    data's (data.prompt_key / response_key), data.val_file_keys names them for each of its files."""
    for name, default in _COLUMNS.items():
        key, value = f"{prefix}.format.{name}", fmt.get(name, default)
        if fixed_columns(ctx, ctx.get(prefix) or {}):
            if name in fmt:
                ctx.drop(key, "its workflow (Tool-N1) reads the columns raw_system, tools, conversations and answer")
            continue
        trained = ctx.native_get(f"data.{name}", default)
        if value == trained:
            if name in fmt:
                ctx.drop(key, f"{value!r}: the training data's column (data.{name})")
        elif files is None:
            ctx.drop(key, "the columns of a taskset whose path is refused")
        else:
            keys = ctx.native.setdefault("data", {}).setdefault("val_file_keys", {})
            for entry in files:
                keys.setdefault(entry, {})[name] = value
            why = "its own column" if name in fmt else f"Trinity-RFT's default column (an evaluation taskset does not inherit the training taskset's {trained!r})"
            ctx.report.add(_entry(key if name in fmt else prefix, "data.val_file_keys", value, f"{why}, for {', '.join(files)}"))


def _response_tokens(ctx: Context) -> int | None:
    """Trinity-RFT's model.max_response_tokens, derived as posttrain.config.dialects.trinity_defaults
    derives it when the file leaves it out (None: not known)."""
    total, prompt, response = (ctx.get(f"model.{k}") for k in ("max_model_len", "max_prompt_tokens", "max_response_tokens"))
    if response is not None or not isinstance(total, int):
        return response
    return total - total // 2 if not isinstance(prompt, int) else total - min(prompt, total - 1)


def _max_tokens(ctx: Context, key: str, value: Any, training: bool) -> None:
    """A taskset's generation budget (Trinity-RFT's default: model.max_response_tokens, which is
    data.max_response_length). Training: rollout.response_length, at most that. Evaluation: posttrain
    validates with the training rollouts' budget, so only that same value is accepted."""
    default = _response_tokens(ctx)
    if value is None:
        ctx.drop(key, "null: model.max_response_tokens, Trinity-RFT's default")
        return
    if training:
        if isinstance(default, int) and isinstance(value, int) and value > default:
            ctx.refuse(key, f"{value} tokens exceed model.max_response_tokens ({default}), which bounds every response posttrain trains on (data.max_response_length): raise that instead", "rollout.response_length", value)
        else:
            ctx.set("rollout.response_length", value, key, "the training rollouts' generation budget")
        return
    trained = ctx.get(f"{_TS}.rollout_args.max_tokens") or default
    if value == trained:
        ctx.drop(key, f"{value}: the training rollouts' budget, which validation uses too")
    else:
        ctx.refuse(key, f"validation generates up to the training rollouts' budget ({trained} tokens: rollout.response_length, else data.max_response_length), posttrain has no per-taskset length; set this taskset's max_tokens to {trained}", None, value)


def _entry(key: str, native: str, value: Any, reason: str):
    from posttrain.config.dialects.report import Entry

    return Entry(key, "translated", native, value, reason)


def tasksets(ctx: Context) -> None:
    taskset = ctx.get(_TS)
    if isinstance(taskset, dict):
        _taskset(ctx, _TS, taskset, training=True)
    if ctx.has(_TASKSETS):  # what one_taskset left: an empty list, several tasksets, or one beside taskset
        ctx.consume(_TASKSETS)
        items = ctx.get(_TASKSETS)
        if items in (None, []):
            ctx.drop(_TASKSETS, "empty: no taskset beside buffer.explorer_input.taskset")
        else:
            ctx.refuse(_TASKSETS, "several training tasksets (Trinity-RFT's task scheduler draws each batch from them in turn): "
                                  "posttrain trains a stage on one taskset; list their files in one taskset's path, or run them "
                                  "as stages", None, items)
    evals = ctx.get(_EVAL)
    if isinstance(evals, list):
        ctx.consume(_EVAL)
        for i, item in enumerate(evals):
            prefix = f"{_EVAL}[{i}]"
            if not isinstance(item, dict):
                ctx.refuse(prefix, "expected a taskset mapping", None, item)
                continue
            _taskset(ctx, prefix, item, training=False)
            for name, value in item.items():  # what _taskset did not take: workflows and the like
                if name == "enable_progress_bar":
                    ctx.drop(f"{prefix}.{name}", "a progress bar of Trinity-RFT's buffer reader: display only")
                elif f"{prefix}.{name}" not in ctx.handled:
                    ctx.refuse(f"{prefix}.{name}", "an evaluation taskset's own setting beyond its files, format, repeat_times and rollout_args: posttrain validates data.val_files with the training stage's rollout path and reward.*", None, value)


def resolve_trainer_config(composed: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The inline verl config resolved before the file is. Trinity-RFT loads the whole file with
    OmegaConf, so an interpolation there names a key from the file's root
    (``${trainer.trainer_config.critic.ppo_micro_batch_size_per_gpu}``, examples/ppo_countdown_megatron);
    its published verl trainer template names keys of the verl config itself
    (``${actor_rollout_ref.actor.ppo_epochs}``), as verl reads such a file. The root reading is
    taken where it resolves, the verl config's otherwise. Returns the file with it resolved and
    ``{key: why not resolvable}`` for what neither resolves."""
    trainer = composed.get("trainer")
    inline = trainer.get("trainer_config") if isinstance(trainer, dict) else None
    if not isinstance(inline, dict):
        return composed, {}
    prefix = "trainer.trainer_config."
    on_its_own, own_failures = resolve(inline)
    whole, whole_failures = resolve(composed)
    resolved = whole["trainer"]["trainer_config"]
    failures = {}
    for key, why in whole_failures.items():
        if not key.startswith(prefix):
            continue  # the rest of the file is resolved (and its failures reported) after this
        inner = key[len(prefix):]
        if inner in own_failures or "[" in inner:
            failures[key] = own_failures.get(inner, why)
            continue
        *parents, last = inner.split(".")
        src, dst = on_its_own, resolved
        for part in parents:
            src, dst = src[part], dst[part]
        dst[last] = src[last]
    return {**composed, "trainer": {**trainer, "trainer_config": resolved}}, failures


def trainer_config(ctx: Context) -> None:
    """The inline verl config under ``trainer.trainer_config``, translated with the verl dialect."""
    key = "trainer.trainer_config"
    inline = ctx.get(key)
    if not isinstance(inline, dict):
        return
    ctx.consume(key)
    from posttrain.config.dialects import translate

    native, report = translate(inline, "verl")
    for e in report.entries:
        moved = type(e)(f"{key}.{e.key}", e.status, e.native, e.value, e.reason)
        if e.status == "translated" and e.native:
            ctx.set(e.native, e.value, moved.key, e.reason)
        else:
            ctx.report.add(moved)


def stages(ctx: Context) -> None:
    items = ctx.get("stages")
    if not isinstance(items, list):
        return
    ctx.consume("stages")
    out = []
    for i, stage in enumerate(items):
        prefix = f"stages[{i}]"
        if not isinstance(stage, dict):
            ctx.refuse(prefix, "expected a mapping of stage settings", None, stage)
            continue
        body = {k: v for k, v in stage.items() if k != "stage_name"}
        native, report = translate_dict(body, "trinity", STAGE_HANDLERS, value_hook, ignorable)
        native = {"name": stage.get("stage_name", f"stage{i}"), **native}
        for e in report.entries:
            ctx.report.add(type(e)(f"{prefix}.{e.key}", e.status, e.native and f"{prefix}.{e.native}", e.value, e.reason))
        out.append(native)
    ctx.set("stages", out, "stages", "stage_name -> name; each stage's keys translated")


def prompt_truncation(ctx: Context) -> None:
    """``model.enable_prompt_truncation``: Trinity-RFT does not generate for a prompt longer than
    max_prompt_tokens (true, its default): it cuts the prompt and records an experience with reward 0
    and no sampled response, so the prompt gives no training signal. posttrain leaves such prompts
    out when the dataset is built (data.filter_overlong_prompts), the same signal. false lets the
    whole prompt through, which posttrain's datasets never do (data.max_prompt_length bounds every
    prompt). In an environment workflow (posttrain.config.dialects.trinity_envs) false is what
    posttrain's agent loop does: it never cuts a turn's context."""
    key = "model.enable_prompt_truncation"
    if not ctx.has(key):
        return
    ctx.consume(key)
    value = ctx.get(key)
    if value is True:
        ctx.set("data.filter_overlong_prompts", True, key, "a prompt over max_prompt_tokens gives no training signal in Trinity-RFT: posttrain leaves it out")
    elif value is False and plays_environment(ctx):
        ctx.drop(key, "false: each turn's context goes to the engine uncut, as posttrain's agent loop always sends it (the "
                      "conversation so far, whole: Trinity-RFT with true would cut later turns' contexts to max_prompt_tokens); the "
                      "response is bounded by data.max_response_length (max_response_tokens) as in Trinity-RFT's workflow, but a "
                      "first prompt (instruction and first observation) over data.max_prompt_length stops the run, naming the "
                      "episode, where Trinity-RFT would send it")
    elif value is False:
        ctx.refuse(key, "false lets a prompt longer than max_prompt_tokens through uncut, which posttrain's datasets never do: "
                        "each prompt is bounded by data.max_prompt_length (model.max_prompt_tokens), and data.truncation cuts or "
                        "refuses a longer one (data.filter_overlong_prompts leaves it out); remove the key (true) and raise "
                        "max_prompt_tokens until the prompts fit", "data.filter_overlong_prompts", value)
    else:
        ctx.refuse(key, f"expected true or false, got {value!r}", None, value)


_SAVE_INPUT = "data_processor.experience_pipeline.save_input"
_INPUT_SAVE_PATH = "data_processor.experience_pipeline.input_save_path"


def ignorable(ctx: Context, key: str, value: Any) -> str | None:
    accepted = accepted_default(key, value)  # a refused explorer key at a value that is what posttrain does
    if accepted is not None:
        return accepted
    if key.endswith(".enable_progress_bar"):
        return "a progress bar of Trinity-RFT's buffer reader: display only"
    if key == "model.logprobs" and value in (0, None):
        return "0: the sampled token's log-prob only, which posttrain always computes"
    if key == "model.top_k" and value in (-1, 0, None):
        return "no top-k (Trinity-RFT's default), as the task workflows' requests sample"
    if key == "trainer.enable_preview":
        return "a preview table of rollouts in Trinity-RFT's wandb logging: display only, no effect on training"
    if key == _SAVE_INPUT and value is False:
        return "false: the experiences the pipeline reads are not written to a file of their own, as posttrain does"
    if key == _INPUT_SAVE_PATH and (value is None or ctx.get(_SAVE_INPUT) is False):
        return "read only with save_input true (Trinity-RFT's file of the experiences the pipeline reads)"
    if key == "trainer.trainer_type" and value == "verl":
        return "Trinity-RFT's verl trainer: posttrain trains with its own backend and reads trainer_config with the verl dialect"
    return None


_IN = "buffer.explorer_input"
_DATASET = "org/dataset"  # a Hugging Face dataset name: translated without a file on disk
_WITH_PATH = ((f"{_TS}.path", _DATASET),)
# Keys the handlers above translate (docs/config-mapping.md reads this table: posttrain.config.tables).
RULES: dict[str, Rule] = {
    "trainer.fix_actor_microbatch_loss_scale": Rule("actor.micro_batch_weight", "false (Trinity-RFT's default, also when absent): rows, each micro-batch's loss scaled by its share of the mini-batch's responses (1 / the accumulation steps); true with a token-mean loss: normaliser, the mini-batch's token mean; a critic (GAE) always rows (critic.micro_batch_weight: verl's legacy critic); SFT: false is actor.sft_loss_scope micro_batch_rows, true the batch's token mean; DPO: false is posttrain's pair mean, true is refused", True, (("algorithm.algorithm_type", "grpo"),)),
    "algorithm.algorithm_type": Rule("algorithm.kind", "a composition of posttrain's registered parts (posttrain.config.dialects.trinity_algorithms, the table in docs/foreign-configs.md): kind, advantage estimator, policy loss, KL and entropy terms; advantage_fn / policy_loss_fn written in the file win over the type's; a file without one gets Trinity-RFT's default, ppo", "grpo"),
    f"{_TS}.path": Rule("data.train_files", "the training taskset: a local file, the split's files in a local folder, else PATH[:SUBSET]@SPLIT (a save_to_disk folder or a cached Hugging Face dataset; never downloaded)", _DATASET),
    f"{_TS}.split": Rule("data.train_files", "the split of the taskset's path that trains", "train", _WITH_PATH),
    f"{_TS}.subset_name": Rule("data.train_files", "the configuration (subset) of the taskset's dataset", "main", _WITH_PATH),
    f"{_TS}.name": Rule(None, "names the taskset's metrics in Trinity-RFT; posttrain's metrics are named by stage", "gsm8k", _WITH_PATH),
    f"{_TS}.storage_type": Rule(None, "file (Trinity-RFT's default): the taskset is read from files, as posttrain does; queue and sql are refused (" + _TASK_FILES + ")", "file", _WITH_PATH),
    f"{_TS}.repeat_times": Rule(None, _TRAIN_REPEAT, 4, _WITH_PATH),
    f"{_TS}.rollout_args": Rule("rollout.temperature, rollout.top_p, rollout.top_k, rollout.response_length", "the taskset's sampling settings and generation budget (max_tokens; other keys are refused)", {"temperature": 0.7}, _WITH_PATH),
    f"{_TS}.rollout_args.temperature": Rule("rollout.temperature", "sampling temperature of the training rollouts", 0.7, _WITH_PATH),
    f"{_TS}.format.prompt_type": Rule(None, "plaintext or messages: posttrain reads a string or a chat message list from data.prompt_key alike", "messages", _WITH_PATH),
    f"{_EVAL}": Rule("data.val_files, rollout.val_kwargs", "each evaluation taskset's files are appended to data.val_files; its repeat_times and rollout_args are the validation sampling", [{"path": _DATASET, "repeat_times": 2}]),
    "model.enable_prompt_truncation": Rule("data.filter_overlong_prompts", "true (Trinity-RFT's default): a prompt over max_prompt_tokens gets no sampled response in Trinity-RFT, so no training signal; posttrain leaves it out at load. false (let it through uncut) is refused, except in an environment workflow (frozen_lake_workflow, sciworld_workflow), where posttrain's agent loop never cuts a turn's context either", True),
    f"{_IN}.default_workflow_type": Rule("rollout.multi_turn, data.system_prompt, reward.custom_reward_function.name", "the workflow of tasksets that name none (posttrain.config.dialects.trinity_workflows): simple/math workflows are the single-turn rollout (math_workflow scores with math_reward, the think_answer scorer, and without a format.system_prompt sends the DeepSeek-R1 template as data.system_prompt), math_boxed_workflow scores with math_boxed_reward (its system prompt, use_base: data.chat_template, with_think/format_score_coef: reward_kwargs), toolcall_workflow reads Tool-N1 rows (data.prompt_format tool_n1, data.response_key answer) and scores with the tool_n1 scorer, math_rm_workflow scores with rm_gallery_reward's math_verify_reward (the math_verify_first scorer), posttrain_tool_workflow turns on tool calling (rollout.multi_turn), agentscope_react_workflow / agentscope_react_math_workflow / the agentscope_frozenlake example's workflow run AgentScope's ReActAgent as built-in agent functions (rollout.agent.function, rollout.agent.kwargs: posttrain.config.dialects.trinity_agentscope); the others are refused naming what they need", "posttrain_tool_workflow", _WITH_PATH),
    f"{_TS}.default_workflow_type": Rule("rollout.multi_turn", "this taskset's workflow, as buffer.explorer_input.default_workflow_type", "posttrain_tool_workflow", _WITH_PATH),
    f"{_TS}.workflow_args": Rule("rollout.multi_turn.*", "posttrain_tool_workflow's arguments are the rollout.multi_turn keys; the single-turn workflows take none", {"max_assistant_turns": 3}, _WITH_PATH + ((f"{_TS}.default_workflow_type", "posttrain_tool_workflow"),)),
    f"{_IN}.default_reward_fn_type": Rule("reward.custom_reward_function.name", "the reward function of tasksets that name none: Trinity-RFT's math_reward, countdown_reward and math_boxed_reward are posttrain's built-in think_answer, countdown_equation and math_boxed scorers (the same scores), rm_gallery_reward under math_rm_workflow with reward_name math_verify_reward the math_verify_first scorer; the others are refused naming what they need (posttrain.config.dialects.trinity_workflows)", "math_reward", _WITH_PATH),
    f"{_TS}.default_reward_fn_type": Rule("reward.custom_reward_function.name", "this taskset's reward function, as buffer.explorer_input.default_reward_fn_type", "countdown_reward", _WITH_PATH),
    f"{_IN}.default_eval_workflow_type": Rule(None, "the workflow of evaluation tasksets that name none: validation runs the training stage's own rollout path, so the workflows standing for it are accepted and change nothing, the others are refused", "simple_workflow", ((f"{_IN}.eval_tasksets", [{"path": _DATASET}]),)),
    "algorithm.policy_loss_fn_args": Rule("actor.clip_ratio*, actor.clip_ratio_c, actor.loss_agg_mode, actor.policy_loss.loss_args", "the policy loss's options: clip_range* and clip_ratio_c to the actor's clip fields, loss_agg_mode to the actor's, the rest to actor.policy_loss.loss_args (an option posttrain's loss does not declare is refused by name)", {"clip_range": 0.2}),
    "trainer.trainer_config": Rule("(each verl key's posttrain home)", "an inline verl trainer config, translated with the verl dialect (a value it sets wins over Trinity's derived defaults)", {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}),
    **EXPERIENCE_RULES,
    **BATCH_RULES,
    **EXPLORER_RULES,
    **trinity_derived.RULES,
    **AGENT_RULES,
}

HANDLERS = [external_model, engine_type, algorithm_type, engines, timeouts, over_rollout, sample_strategy, auxiliary, kl_defaults, prompt_truncation, workflows, server_keys, parser_keys, experience_files, tasksets, data_selector, trainer_config, batch_sizes, batching, micro_batch_weight, episode_sources, stages, trinity_lora, *trinity_derived.HANDLERS]
# A stage derives only what it writes itself (posttrain.config.dialects.trinity_defaults).
STAGE_HANDLERS = [external_model, stage_engine_type, stage_algorithm_type, engines, timeouts, over_rollout, sample_strategy, auxiliary, stage_kl_defaults, prompt_truncation, workflows, server_keys, parser_keys, stage_experience_files, tasksets, data_selector, trainer_config, stage_batch_sizes, episode_sources, stages, trinity_lora, *trinity_derived.HANDLERS]
