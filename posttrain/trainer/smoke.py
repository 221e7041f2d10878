"""`posttrain smoke`: two RL steps of a user's real config on this machine, before cluster hours are spent.

    config, lines = smoke_config("rlvr_config.yaml", [], "roll", Path("/tmp/smoke"))
    # lines: "model.path: Qwen/Qwen2.5-7B -> a tiny random qwen2 model (...)", ...

The config (posttrain's, or a verl / ROLL / Trinity-RFT one, launch lines included) is read as
`posttrain train` reads it. Then only what this machine cannot provide is substituted, each with a
line saying so:

- the model: a tiny random model of the same architecture family (config.json of the model path,
  when the directory or the local Hugging Face cache holds it, with its tokenizer), else posttrain's
  default tiny model; the critic, the reward model and each LLM judge get one too (a random judge
  writes no verdict, so ``reward.on_error: raise`` becomes ``fixed``), a judge on vLLM/SGLang the
  HF engine;
- the engine and the devices: keys refused only because they need vLLM/SGLang, Megatron/DeepSpeed,
  GPUs or a split placement are left out (the HF engine, one CPU process);
- the data: the first rows of each data file when it is here, else synthetic rows with the columns
  the config names (arithmetic problems that posttrain's scorers grade; countdown problems for the
  countdown scorer, a tool call for Tool-N1 rows), and those a built-in agent function reads (its
  module's ``smoke_row``), with the files its kwargs name built small when they are not here (its
  module's ``smoke_kwargs``: the email agent's mailbox); a mix's expert rows (algorithm.mix.expert_files)
  the same way, under the mix's column names;
- the sizes: 2 training steps of 2 prompts x at most 2 responses, short prompts and responses,
  micro-batches of 2, the run under the smoke folder, no remote trackers;
- dynamic sampling (algorithm.filter_groups) is left out: a random model's responses to one prompt
  score alike, so its rounds would never end.

Every other key keeps the user's value, and a key posttrain refuses for another reason (a missing
feature) is still refused: the smoke run is the user's config, not a different one.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import random
import re
from pathlib import Path
from typing import Any

import yaml

from posttrain.config.dialects import Foreign, check, read_foreign, verl_launch
from posttrain.config.dialects.detect import detect
from posttrain.config.dialects.machine import ABSENT_DATA as _ABSENT_DATA
from posttrain.config.dialects.source import read_yaml
from posttrain.config.load import load_config, to_dict
from posttrain.errors import ConfigError
from posttrain.trainer.smoke_envs import local_env_datasets, local_episode_files, shrink_env_managers

STEPS = 2
BATCH = 2  # prompts per step
PROMPT_LENGTH, RESPONSE_LENGTH = 512, 16  # prompt room for a system prompt such as the R1 template (~440 tiny-tokenizer tokens)
# A data file the run reads on its cluster, absent here (posttrain.data.sources): smoke's rows stand in for it.
_DATA_KEYS = ("data.train_files", "data.val_files")
# Refusals that only say what this machine lacks: the engine, the training backend, the devices.
# "Megatron" alone is not enough: a refusal of a Megatron option that changes the numbers (a MoE
# balancing loss, dropout, Megatron's LoRA: posttrain.config.dialects.verl_megatron) names Megatron too.
_MACHINE = re.compile(r"vLLM|SGLang|TensorRT|asynchronous rollout server|Megatron backend|Megatron parallelism|ROLL's Megatron strategy|"
                      r"Megatron and the other strategies|DeepSpeed|engine\(s\) × tensor_parallel_size|"
                      r"NPU|roles on different devices|beside training on|of cluster.nnodes × cluster.n_gpus_per_node|"
                      r"explorer's \d+ devices|NCCL|GPU|expert parallelism|a cluster job's device count|"
                      r"the file leaves the device count to the machine|nor a model the local ModelScope cache|" + _ABSENT_DATA)  # case matters: keys say megatron
_LOCAL_TRACKERS = ("console", "jsonl", "tensorboard")
_BLANK_COUNT = "a cluster job's device count"  # posttrain.config.dialects.verl.BLANK_DEVICES
_PER_WORLD = re.compile(r"does not divide the \d+ worker process")


def machine_refusal(reason: str) -> bool:
    """Whether a refusal names only something this machine lacks (what smoke substitutes)."""
    return bool(_MACHINE.search(reason))


def smoke_config(path: str | None, overrides: list[str], dialect: str | None, workdir: Path) -> tuple[Path, list[str]]:
    """``(the smoke run's posttrain config file, one line per substitution)``; ConfigError listing
    the refusals that are not about the machine."""
    workdir.mkdir(parents=True, exist_ok=True)
    native, lines = _native(path, overrides, dialect)
    lines += _machine(native)
    lines += _model(native, workdir)
    lines += _data(native, workdir)
    lines += _agent_resources(native, workdir)
    lines += _sizes(native, workdir)
    lines += _unending_rounds(native)
    lines += _tool_n1_room(native)
    lines += shrink_env_managers(native)
    lines += local_env_datasets(native, workdir)
    lines += local_episode_files(native, workdir)
    if native.pop("prepare", None):
        lines.append("prepare: -> left out (the smoke run brings its own model and data)")
    for i, stage in enumerate(native.get("stages") or []):
        if (stage.get("model") or {}).get("path"):
            lines.append(f"stages[{i}].model.path: {stage['model']['path']} -> the same tiny model")
            stage["model"]["path"] = native["model"]["path"]
        lines += [f"stages[{i}].{line}" for line in _data(stage, workdir, f"stage{i}_") + _sizes(stage, workdir, stage=True) + _unending_rounds(stage)]
    out = workdir / "smoke.yaml"
    out.write_text(yaml.safe_dump(native, sort_keys=False, allow_unicode=True))
    return out, lines


def _native(path: str | None, overrides: list[str], dialect: str | None) -> tuple[dict[str, Any], list[str]]:
    if dialect is None and path is not None:
        found = detect(read_yaml(Path(path)), str(path))
        dialect = None if found == "native" else found
    if dialect is None:
        return to_dict(load_config(path, overrides)), []
    if dialect == "verl":
        native, report, set_by = verl_launch.launch(path, list(overrides))
        foreign = Foreign(Path(path) if path else None, "verl", native, report, set_by)
    else:
        if path is None:
            raise ConfigError(f"--dialect {dialect}: give the config file first, then its KEY=VALUE overrides")
        foreign = read_foreign(path, dialect, overrides=list(overrides))
    # device counts a launch script left empty (its cluster variables unset here): the run's process
    # count is unknown, so a size that must divide it is judged on the cluster, not here
    unknown_world = any(_BLANK_COUNT in e.reason for e in foreign.report.refused)
    kept = [e for e in foreign.report.refused if not machine_refusal(e.reason) and not (unknown_world and _PER_WORLD.search(e.reason))]
    problems = [f"{foreign.where(e.key)}{e.line()}" for e in kept]
    problems += [p for p in check(foreign) if not machine_refusal(p) and not p.startswith("cluster.")
                 and not (unknown_world and _PER_WORLD.search(p))]
    if problems:
        raise ConfigError(problems + ["smoke substitutes only what this machine lacks (model, engine, devices, data, sizes); "
                                      "these keys are refused for another reason"])
    agentic = bool(((foreign.native.get("env") or {}).get("train_env_manager") or {}).get("tags"))  # plays envs, reads no files
    for e in foreign.report.refused:  # a data file absent here: kept, for `_data` to put smoke rows in its place
        if _ABSENT_DATA in e.reason and e.native in _DATA_KEYS and not agentic:
            files = foreign.native.setdefault("data", {}).setdefault(e.native.split(".")[1], [])
            files.extend(e.value if isinstance(e.value, list) else [e.value])
    return foreign.native, [f"{e.key}: {_short(e.value)} -> left out ({_why(e.reason)})" for e in foreign.report.refused
                            if not (_ABSENT_DATA in e.reason and e.native in _DATA_KEYS)]


def _why(reason: str) -> str:
    """What runs here instead, for a refusal `machine_refusal` accepts."""
    if _ABSENT_DATA in reason:
        return "not on this machine: the smoke run does without it (an agentic stage plays its environments)"  # data files are kept for `_data`
    if "ModelScope cache" in reason:
        return "the model is not on this machine: a tiny model stands in for it (model.path below)"
    if re.search(r"vLLM|SGLang|TensorRT|engine replicas|rollout server", reason, re.I):
        return "the HF engine generates here"
    if re.search(r"Megatron|DeepSpeed", reason):
        return "torch trains here, in one CPU process"
    return "one CPU process here"


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


_PLACEMENT = ("nnodes", "n_gpus_per_node", "device", "device_mapping", "launcher", "ray_address")


def _machine(native: dict[str, Any]) -> list[str]:
    cluster = native.setdefault("cluster", {})
    placed = {k: cluster.pop(k) for k in _PLACEMENT if k in cluster}
    lines = [f"cluster: {_short(placed)} -> one CPU process"] if placed else []
    cluster.update(n_gpus_per_node=0, nnodes=1, device="cpu")  # env_vars and timeouts stay the user's
    profiler = native.get("profiler") or {}
    if profiler.get("tool") == "npu":  # Ascend's profiler needs an NPU
        lines.append("profiler.tool: npu -> torch (no NPU here: torch's profiler traces the same steps)")
        profiler["tool"] = "torch"
    if profiler.get("tool") == "nsys":  # Nsight Systems traces NVIDIA GPUs, which this machine lacks
        lines.append("profiler.tool: nsys -> torch (no NVIDIA GPU here: torch's profiler traces the same steps)")
        profiler["tool"] = "torch"
        trainer = native.get("trainer") or {}
        if trainer.get("worker_nsight_options"):  # the options of an nsys that no longer runs
            lines.append(f"trainer.worker_nsight_options: {_short(trainer['worker_nsight_options'])} -> {{}} (no nsys run here)")
            trainer["worker_nsight_options"] = {}
    for role in ("actor", "ref", "critic", "rollout"):  # ranks beyond the one process here
        node = (native.get(role) or {}).get("profiler") or {}
        if isinstance(node.get("ranks"), list) and any(r != 0 for r in node["ranks"]):
            lines.append(f"{role}.profiler.ranks: {node['ranks']} -> [0] (one process here)")
            node["ranks"] = [0]
    steps = profiler.get("steps")
    if isinstance(steps, list) and any(isinstance(k, int) and k > STEPS for k in steps):
        kept = [k for k in steps if isinstance(k, int) and k <= STEPS] or [STEPS]
        lines.append(f"profiler.steps: {steps} -> {kept} (the smoke run has {STEPS} steps)")
        profiler["steps"] = kept
    lines += _unshard(native)
    model = native.get("model") or {}
    if model.get("attn_implementation") in ("flash_attention_2", "fa2") and importlib.util.find_spec("flash_attn") is None:
        lines.append(f"model.attn_implementation: {model['attn_implementation']} -> sdpa (no flash-attn here)")
        model["attn_implementation"] = "sdpa"
    rollout = native.setdefault("rollout", {})
    if rollout.get("name") == "external":  # a bench of a hosted model: the tiny model behind a local endpoint stands in
        external = rollout.get("external") or {}
        lines.append(f"rollout.external: the endpoint ${external.get('base_url_env', 'OPENAI_BASE_URL')} serving "
                     f"{external.get('model_name')!r} -> posttrain's chat endpoint serving the tiny model on this machine")
        return lines
    if rollout.get("name", "hf") != "hf":
        lines.append(f"rollout.name: {rollout['name']} -> hf (the HF engine)")
    rollout["name"] = "hf"
    return lines


def _unshard(native: dict[str, Any]) -> list[str]:
    """FSDP options that act only on a model sharded over several processes, and Ulysses sizes (a
    sequence split over several processes): one process has neither."""
    from posttrain.config.checks import SHARDING_DEFAULTS

    lines = []
    for role in ("actor", "ref", "critic"):
        section = native.get(role) or {}
        sp = section.get("ulysses_sequence_parallel_size")
        if isinstance(sp, int) and sp > 1:
            lines.append(f"{role}.ulysses_sequence_parallel_size: {sp} -> 1 (one process splits no sequence)")
            section["ulysses_sequence_parallel_size"] = 1
        fsdp = section.get("fsdp_config") or {}
        for key, default in {**SHARDING_DEFAULTS, "fsdp_size": -1}.items():
            *parents, last = key.split(".")
            node = fsdp
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict) and last in node and node[last] not in (default, 1 if last == "fsdp_size" else default):
                lines.append(f"{role}.fsdp_config.{key}: {node[last]} -> {default} (one process shards nothing)")
                node[last] = default
    return lines


def _model(native: dict[str, Any], workdir: Path) -> list[str]:
    from posttrain.trainer.smoke_model import tiny_like

    model = native.setdefault("model", {})
    source = model.get("path", "")
    tiny, how = tiny_like(source, workdir / "model")
    model["path"] = str(tiny)
    model.pop("tokenizer_path", None)
    lines = [f"model.path: {source or '(none)'} -> {how}"] + _frozen_prefixes(native, tiny)
    critic = native.get("critic", {}).get("model", {})
    for key in ("path", "tokenizer_path"):
        if critic.get(key):
            lines.append(f"critic.model.{key}: {critic[key]} -> the same tiny model")
            critic[key] = str(tiny)
    # a teacher (distillation, or the reference role of on-policy distillation) reads the policy's token ids
    for section, key in ((native.get("algorithm", {}).get("distill", {}), "algorithm.distill.teacher_path"), (native.get("ref", {}), "ref.model_path")):
        name = key.rpartition(".")[2]
        if section.get(name):
            lines.append(f"{key}: {section[name]} -> the same tiny model")
            section[name] = str(tiny)
    reward_model = native.get("reward", {}).get("reward_model", {})
    if reward_model.get("enable"):
        lines.append(f"reward.reward_model.path: {reward_model.get('path')} -> the same tiny model (a new score head)")
        reward_model["path"] = str(tiny)
        if reward_model.get("input_tokenizer"):  # the policy's tokenizer, which re-renders the conversation
            lines.append(f"reward.reward_model.input_tokenizer: {reward_model['input_tokenizer']} -> the same tiny model")
            reward_model["input_tokenizer"] = str(tiny)
    return lines + _judges(native, tiny)


def _frozen_prefixes(native: dict[str, Any], tiny: Path) -> list[str]:
    """actor.freeze_module_prefix's prefixes that name no parameter of the tiny model (a vision tower
    the user's model has and the text model standing in for it lacks) are left out."""
    actor = native.get("actor") or {}
    prefixes = actor.get("freeze_module_prefix") or []
    if not prefixes:
        return []
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        with torch.device("meta"):  # parameter names only: no memory for the weights
            names = [n for n, _ in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny)).named_parameters()]
    except (ValueError, KeyError, OSError):  # a family the causal-LM auto class does not build: the run checks the prefixes
        return []
    kept = [p for p in prefixes if any(n.startswith(p) for n in names)]
    if kept == prefixes:
        return []
    actor["freeze_module_prefix"] = kept
    gone = [p for p in prefixes if p not in kept]
    return [f"actor.freeze_module_prefix: {_short(gone)} -> left out (modules of the user's model the tiny model lacks)"]


def _judges(native: dict[str, Any], tiny: Path) -> list[str]:
    """Each LLM judge reads with the tiny model too (its template and chat template as given), and
    each auxiliary model is the tiny model on the hf engine. A random model writes no verdict, so
    those samples score reward.failure_reward (a chat judge: its fallback_score), counted as failures."""
    reward = native.get("reward", {})
    lines = []
    for name, worker in (reward.get("workers") or {}).items():
        args = worker.get("model_args") if worker.get("worker_cls") == "llm_judge" else None
        if isinstance(args, dict) and args.get("model_name_or_path"):
            lines.append(f"reward.workers.{name}.model_args.model_name_or_path: {args['model_name_or_path']} -> the same tiny model (a random judge)")
            args["model_name_or_path"] = str(tiny)
        engine = worker.get("engine") if isinstance(args, dict) else None
        if isinstance(engine, dict) and engine.get("name", "hf") != "hf":  # its GPU options are then noted unused
            lines.append(f"reward.workers.{name}.engine.name: {engine['name']} -> hf (the HF engine judges here)")
            engine["name"] = "hf"
    if lines and reward.get("on_error", "raise") == "raise":
        lines.append("reward.on_error: raise -> fixed (the random judge writes no verdict: reward/<worker>/failures counts them)")
        reward["on_error"] = "fixed"
    for name, model in (reward.get("auxiliary_models") or {}).items():  # a chat judge's model: its fallback score counts
        if isinstance(model, dict) and model.get("model_path"):
            lines.append(f"reward.auxiliary_models.{name}.model_path: {model['model_path']} -> the same tiny model (a random judge)")
            model["model_path"] = str(tiny)
        engine = model.get("engine") if isinstance(model, dict) else None
        if isinstance(engine, dict) and engine.get("name", "hf") != "hf":
            lines.append(f"reward.auxiliary_models.{name}.engine.name: {engine['name']} -> hf (the HF engine serves it here)")
            engine["name"] = "hf"
    return lines


def _data(native: dict[str, Any], workdir: Path, prefix: str = "") -> list[str]:
    data = native.get("data") if prefix else native.setdefault("data", {})
    if data is None:
        return []  # a stage without data keys reads the run's
    lines = []
    for key, rows_needed in (("train_files", 2 * BATCH), ("val_files", 2)):
        files = data.get(key)
        if files is None or files == []:
            continue
        files = [files] if isinstance(files, str) else list(files)  # '' (an unset variable) stays: not on this machine
        rows, how = _first_rows(files, rows_needed, data)
        if key == "val_files" and data.pop("val_file_keys", None):  # one smoke file, the stage's columns
            rows, how = None, "entries with columns of their own (data.val_file_keys, left out)"
        if key == "val_files" and data.pop("val_file_settings", None):  # one smoke file: the stage's template and reward
            how += "; entries' own prompt and reward settings (data.val_file_settings) left out"
        if rows is None:
            rows = _synthetic(max(rows_needed, len((native.get("reward") or {}).get("workers") or {})), native)  # a row per worker's domain at least
            how = f"{len(rows)} synthetic rows with the config's columns ({how})"
        else:
            data["truncation"], data["filter_overlong_prompts"] = "left", False  # the prompt limit below is ours
        out = workdir / "data" / f"{prefix}{key}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r, default=_plain) + "\n" for r in rows))
        data[key] = [str(out)]
        lines.append(f"data.{key}: {_short(files)} -> {how}")
    if data.pop("dataset_dir", None):
        lines.append("data.dataset_dir: -> left out (the smoke data is under the smoke folder)")
    return lines + _expert_rows(native, workdir, prefix)


def _expert_rows(native: dict[str, Any], workdir: Path, prefix: str) -> list[str]:
    """algorithm.mix.expert_files (SFT rows joined to each step): the first rows when they are here,
    else synthetic prompt/response rows under the mix's own column names."""
    mix = (native.get("algorithm") or {}).get("mix")
    files = mix.get("expert_files") if isinstance(mix, dict) else None
    if not files:
        return []
    files = [files] if isinstance(files, str) else list(files)
    rows, how = _first_rows(files, 2 * BATCH, native.get("data") or {})
    if rows is None:
        columns = {k: mix[k] for k in ("prompt_key", "response_key", "messages_key") if mix.get(k)}
        rows = _synthetic(2 * BATCH, {**native, "data": {**(native.get("data") or {}), **columns}})
        how = f"{len(rows)} synthetic rows with the mix's columns ({how})"
    out = workdir / "data" / f"{prefix}expert_files.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, default=_plain) + "\n" for r in rows))
    mix["expert_files"] = [str(out)]
    return [f"algorithm.mix.expert_files: {_short(files)} -> {how}"]


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _first_rows(files: list[str], n: int, data: dict[str, Any]) -> tuple[list[dict] | None, str]:
    from posttrain.data.sources import load_table
    from posttrain.errors import UserError

    from posttrain.files import is_hub_name, parse_dataset_entry

    base = Path(data.get("dataset_dir") or ".")
    for f in files:  # a PATH@SPLIT entry of a folder that is not here is absent as a file is
        path = parse_dataset_entry(f)[0] if isinstance(f, str) and "@" in f else f
        if isinstance(f, str) and not (f and ((base / Path(path).expanduser()).exists() or ("@" in f and is_hub_name(path)))):
            return None, "not on this machine"
    try:
        table = load_table(files, setting="data.train_files", base_dir=data.get("dataset_dir"))
    except UserError as err:
        return None, str(err).splitlines()[0][:100]
    return table.rows[:n], f"its first {min(n, len(table))} rows"


# Ground truths of the shape a built-in scorer reads (posttrain.rewards.scorers), from an arithmetic problem:
# an option letter, an instruction to follow, stdin/stdout test cases of a program printing the answer.
_TRUTHS = {
    "multiple_choice": lambda p: "B",
    "ifeval": lambda p: [{"func_name": "validate_lowercase"}],
    "code": lambda p: {"case_type": "input", "test_cases": [{"stdin": "", "expected_stdout": str(p.ground_truth)}]},
}


def _synthetic(n: int, native: dict[str, Any]) -> list[dict[str, Any]]:
    """Arithmetic (or countdown) problems under the columns the config reads (prompt, messages, response, DPO pair,
    verl's reward_model.ground_truth, the tag column), tagged so the config's scorer takes them."""
    from posttrain.tasks.registry import TASKS

    data, reward = native.get("data", {}), native.get("reward", {})
    workers = reward.get("workers") or {}
    scorers = {(reward.get("custom_reward_function") or {}).get("name"), *(w.get("worker_cls") for w in workers.values())}
    # the countdown scorer reads a JSON truth of numbers and target: countdown problems, else arithmetic ones
    task = TASKS["countdown" if "countdown_equation" in scorers else "arithmetic"]
    # one tag of each reward worker, in turn, so that every worker's domain has rows (a batch drawn
    # by data.domain_interleave_probs draws from each of them)
    tags = [w["tag_included"][0] for w in workers.values() if w.get("tag_included")]
    custom = (reward.get("custom_reward_function") or {}).get("path")
    # a detection worker's rows hold boxes and ROLL's per-row weights (posttrain.rewards.detection)
    boxes = {t for w in workers.values() if w.get("worker_cls") == "detection" for t in w.get("tag_included") or []}
    # the built-in scorers that read a ground truth of their own shape, by the tag of the worker running them
    truths = {t: _TRUTHS[w.get("worker_cls")] for w in workers.values() if w.get("worker_cls") in _TRUTHS for t in w.get("tag_included") or []}
    rng = random.Random(0)
    agent_columns = _agent_columns(native)
    rows = []
    for i in range(n):
        tag = tags[i % len(tags)] if tags else ("smoke" if custom else task.data_source)
        p = task.draw(rng, task.defaults)
        user = [{"role": "user", "content": p.prompt}]
        row = {data.get("prompt_key", "prompt"): user, data.get("response_key", "response"): p.response,
               "reward_model": {"style": "rule", "ground_truth": p.ground_truth}, "data_source": tag,
               data.get("reward_fn_key", "data_source"): tag, data.get("chosen_key", "chosen"): p.response,
               data.get("rejected_key", "rejected"): p.response[::-1] + " no", "extra_info": {}}
        if data.get("messages_key"):
            row[data["messages_key"]] = [*user, {"role": "assistant", "content": p.response}]
        if data.get("query_key"):  # a query is joined to a string prompt (ROLL's SFT rows: instruction + input)
            row[data.get("prompt_key", "prompt")], row[data["query_key"]] = p.prompt, ("" if i % 2 else "Answer with the number.")
        if data.get("system_prompt_key"):
            row[data["system_prompt_key"]] = "You are a careful calculator."
        if tag in truths:
            row["reward_model"] = {"style": "rule", "ground_truth": truths[tag](p)}
        if tag in boxes:
            row["reward_model"] = {"ground_truth": "<answer>\n[{'bbox_2d': [10, 10, 50, 50], 'label': 'box'}]\n</answer>",
                                   "format_ratio": 0.1, "accuracy_ratio": 1.0,
                                   "verifier_parm": {"det_reward_ratio": {"iou_max_label_first": 1.0, "iou_completeness": 0.3}}}
        for column, keys, value in ((data.get("prompt_key", "prompt"), data.get("prompt_dict_keys"), p.prompt),
                                    (data.get("response_key", "response"), data.get("response_dict_keys"), p.response)):
            if keys:  # the text sits inside a dict-valued cell (verl's SFT rows: extra_info.question / .answer)
                _nest(row, column, list(keys), value)
        for key in data.get("extra_info_keys") or []:  # e.g. a rubric_judge's rubric column
            row.setdefault(key, [{"description": "gives the right number", "weight": 1}])
        if data.get("prompt_format") == "tool_n1":  # Tool-N1 rows (posttrain.data.tool_n1): a tool to call, the call as the truth
            calls = json.dumps([{"name": "add", "arguments": {"a": i, "b": i}}])
            row.update(raw_system="You can call tools.", conversations=[{"from": "human", "value": f"Add {i} and {i}."}],
                       tools=[{"name": "add", "description": "Add two numbers.",
                               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}])
            row[data.get("response_key", "response")] = calls
            row["reward_model"] = {"style": "rule", "ground_truth": calls}
        for key in (data.get("selector") or {}).get("feature_keys") or []:  # per-row numbers a selector reads (a pass rate)
            row.setdefault(key, round(rng.random(), 3))
        row.update(agent_columns(i))
        rows.append(row)
    return rows


def _agent_resources(native: dict[str, Any], workdir: Path) -> list[str]:
    """A built-in agent function's files that its kwargs name but this machine lacks (the email agent's
    mailbox), built small in the smoke folder by its module's ``smoke_kwargs(workdir)``."""
    agent = (native.get("rollout") or {}).get("agent") or {}
    module, _, name = str(agent.get("function") or "").partition(":")
    if not module.startswith("posttrain.agents.") or importlib.util.find_spec(module) is None:
        return []
    loaded = importlib.import_module(module)
    kwargs = agent.get("kwargs") if isinstance(agent.get("kwargs"), dict) else {}
    check = getattr(getattr(loaded, name, None), "check_kwargs", None)
    if not hasattr(loaded, "smoke_kwargs") or check is None or not check(kwargs):
        return []
    stand_in = loaded.smoke_kwargs(workdir)
    agent["kwargs"] = {**kwargs, **stand_in}
    return [f"rollout.agent.kwargs.{k}: {_short(kwargs.get(k))} -> {v} (not on this machine: a stand-in built here)"
            for k, v in stand_in.items()]


def _agent_columns(native: dict[str, Any]) -> Any:
    """i -> the columns a built-in agent function reads from its row (its module's `smoke_row`), else none."""
    spec = ((native.get("rollout") or {}).get("agent") or {}).get("function") or ""
    module, _, _ = spec.partition(":")
    if not module.startswith("posttrain.agents.") or importlib.util.find_spec(module) is None:
        return lambda i: {}
    return getattr(importlib.import_module(module), "smoke_row", lambda i: {})


def _nest(row: dict[str, Any], column: str, keys: list[str], value: Any) -> None:
    """Put ``value`` at ``row[column][keys[0]][keys[1]]...``, keeping what the cell already holds."""
    node = row[column] = row[column] if isinstance(row.get(column), dict) else {}
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


# (section, key, smoke value or a function of the user's value): tiny sizes and short lengths.
# A key the config does not set keeps posttrain's default, except the batch and the step count.
_ALWAYS = {("data", "train_batch_size"), ("trainer", "total_training_steps")}
_SIZES = [
    ("data", "train_batch_size", BATCH), ("data", "val_batch_size", None),
    ("actor.optim", "lr_warmup_steps", lambda v: min(v, STEPS - 1)), ("critic.optim", "lr_warmup_steps", lambda v: min(v, STEPS - 1)),
    ("data", "max_prompt_length", lambda v: min(v, PROMPT_LENGTH)), ("data", "max_response_length", lambda v: min(v, RESPONSE_LENGTH)),
    ("rollout", "prompt_length", lambda v: min(v, PROMPT_LENGTH)),  # set only to equal data.max_prompt_length: shrinks with it
    ("data", "max_length", lambda v: min(v, PROMPT_LENGTH + RESPONSE_LENGTH)),
    ("model", "max_model_len", None), ("rollout", "n", lambda v: min(v, 2)),
    ("actor", "ppo_mini_batch_size", BATCH), ("critic", "ppo_mini_batch_size", BATCH),
    ("actor", "ppo_micro_batch_size_per_gpu", lambda v: min(v, 2)), ("critic", "ppo_micro_batch_size_per_gpu", lambda v: min(v, 2)),
    ("rollout", "log_prob_micro_batch_size_per_gpu", lambda v: min(v, 2)), ("ref", "log_prob_micro_batch_size_per_gpu", lambda v: min(v, 2)),
    ("critic", "forward_micro_batch_size_per_gpu", lambda v: min(v, 2)),
    ("algorithm.mix", "expert_batch_size", lambda v: min(v, BATCH)),
    ("trainer", "total_training_steps", STEPS),
]


def _sizes(native: dict[str, Any], workdir: Path, stage: bool = False) -> list[str]:
    lines = []
    for section, key, new in _SIZES:
        node = native
        for part in section.split("."):
            node = node.setdefault(part, {}) if isinstance(node, dict) else {}
        old = node.get(key)
        if old is None and (stage or (section, key) not in _ALWAYS):
            continue  # posttrain's default (a stage changes only what it sets)
        value = new(old) if callable(new) else new
        if value != old:
            node[key] = value
            lines.append(f"{section}.{key}: {old} -> {value}")
    if not stage:
        lines += _outputs(native, workdir)
        trainer = native.setdefault("trainer", {})
        loggers = trainer.get("logger") or ["console"]
        kept = [n for n in loggers if n in _LOCAL_TRACKERS] if isinstance(loggers, list) else []
        kept = list(dict.fromkeys(["console", "jsonl", *kept]))  # the smoke run's metrics.jsonl
        if kept != loggers:
            lines.append(f"trainer.logger: {loggers} -> {kept} (no remote trackers here; metrics.jsonl kept)")
        trainer["logger"] = kept
        trace = (native.get("rollout") or {}).get("trace") or {}
        if trace.get("backend"):  # rollout traces go to the tracker's store, maybe the cluster's server
            lines.append(f"rollout.trace.backend: {trace['backend']} -> None (no remote trackers here)")
            trace["backend"] = None
        trainer.pop("resume_from_path", None)
        trainer["resume_mode"] = "disable"
    return lines


TOOL_N1_PROMPT = 2048  # Tool-N1's tool instructions alone are about 1100 tiny-tokenizer tokens


def _tool_n1_room(native: dict[str, Any]) -> list[str]:
    """Tool-N1 prompts (data.prompt_format tool_n1) carry its long tool instructions: room for them."""
    data = native.get("data") or {}
    if data.get("prompt_format") != "tool_n1" or (data.get("max_prompt_length") or 0) >= TOOL_N1_PROMPT:
        return []
    line = f"data.max_prompt_length: {data.get('max_prompt_length')} -> {TOOL_N1_PROMPT} (room for Tool-N1's tool instructions in the tiny tokenizer's tokens)"
    data["max_prompt_length"] = TOOL_N1_PROMPT
    return [line]


def _unending_rounds(native: dict[str, Any]) -> list[str]:
    """Dynamic sampling draws rounds until enough groups score unalike; a tiny random model's responses
    to one prompt nearly always score alike, so the rounds would never end (or end at
    max_num_gen_batches with an error): the smoke run leaves the filter out. An agent function's turn
    rows are filtered without refilling the step (dynamic_sampling's other path): kept."""
    groups = (native.get("algorithm") or {}).get("filter_groups") or {}
    turn_rows = (native.get("env") or {}).get("train_rows") == "turn" and ((native.get("rollout") or {}).get("agent") or {}).get("function")
    if not groups.get("enable") or turn_rows:
        return []
    groups["enable"] = False
    return ["algorithm.filter_groups.enable: True -> False (a tiny random model's responses to one prompt score alike, so dynamic "
            "sampling would keep no group and draw rounds without end; the real run filters)"]


# Where a run writes, besides its run directory: moved under the smoke folder, as the run directory is.
_OUTPUTS = [("trainer", "rollout_data_dir"), ("trainer", "validation_data_dir"), ("trainer", "checkpoint_dir"),
            ("trainer", "rollout_mock_dir"), ("profiler", "save_path"), ("log", "dir")]


def _outputs(native: dict[str, Any], workdir: Path) -> list[str]:
    trainer = native.setdefault("trainer", {})
    lines = [f"trainer.default_local_dir: {trainer.get('default_local_dir')} -> {workdir / 'run'}"] if trainer.get("default_local_dir") else []
    trainer["default_local_dir"] = str(workdir / "run")
    if trainer.get("rollout_mock") == "replay":  # dumped token ids of the user's model mean nothing to the tiny one
        lines.append(f"trainer.rollout_mock: replay -> None (the tiny model generates; {trainer.pop('rollout_mock_dir', None)}'s rollouts are the real model's)")
        trainer["rollout_mock"] = None
    for section, key in _OUTPUTS:
        node = native.get(section) or {}
        if node.get(key):
            lines.append(f"{section}.{key}: {node[key]} -> {workdir / 'out' / key}")
            node[key] = str(workdir / "out" / key)
    kwargs = trainer.get("tracker_kwargs") or {}
    if kwargs:  # a tracker's folder or server is the cluster's
        lines.append(f"trainer.tracker_kwargs: {_short(kwargs)} -> {{}} (trackers write under the run directory)")
        trainer["tracker_kwargs"] = {}
    return lines


__all__ = ["machine_refusal", "smoke_config"]
