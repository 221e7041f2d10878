"""The LLM judge's generator: judge prompts in, answers out, on the engine ``engine.name`` names.

The judge builds its engine through the rollout engine registry (`posttrain.rollout.engines`),
exactly as ``rollout.name`` builds the policy's, from a config of its own (`judge_config`): the
judge's model directory as ``model.path`` and its engine options as the ``rollout`` settings they
stand for, with ``load_format: auto`` (the engine reads the judge's weights from that directory;
nothing ever sends it weights). So there is one implementation of each engine.

- hf: the judge model is loaded on CPU and the built-in engine decodes with it,
  ``infer_batch_size`` prompts at a time.
- vllm / sglang: the library loads the weights itself; the builders are handed a stand-in module
  that carries only the judge's dtype and device (`_weights_on_disk`). ``engine.max_model_len``
  null is the judge model's ``max_position_embeddings``: a judge prompt holds the policy's prompt
  and response and the template, so the policy's lengths do not bound it. vLLM's engine core runs
  in a process of its own (`_own_engine_process`), whatever the rollout engine does.

Sampling is the judge's ``generating_args`` whichever the engine (`sampling_kwargs`: greedy unless
``do_sample``, at most ``max_new_tokens``), through the engine's `SamplingParams` contract. With ``engine.free_cache_engine`` the engine sleeps between scorings and
wakes for each (vLLM level 1 and SGLang keep the weights on the host).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import TYPE_CHECKING, Any, Iterator

import torch
from torch import nn

from posttrain.config.sections.reward import JudgeEngineConfig
from posttrain.errors import ConfigError, UserError

if TYPE_CHECKING:
    from posttrain.data.prompts import PromptFormatter


def judge_config(model_dir: str, engine: JudgeEngineConfig, *, batch_size: int | None, cluster: Any = None) -> Any:
    """The config the engine registry builds the judge's engine from (module docstring); ``cluster``:
    the stage's, whose process count bounds tensor parallelism as for the rollout engine."""
    from posttrain.config.schema import Config
    from posttrain.config.sections.model import ModelConfig
    from posttrain.config.sections.rollout import EngineKwargsConfig, RolloutConfig

    default = RolloutConfig()
    library = engine.name in ("vllm", "sglang")
    rollout = dataclasses.replace(
        default, name=engine.name, load_format="auto", tensor_model_parallel_size=engine.tensor_model_parallel_size,
        gpu_memory_utilization=engine.gpu_memory_utilization, enforce_eager=engine.enforce_eager,
        max_num_batched_tokens=engine.max_num_batched_tokens, free_cache_engine=engine.free_cache_engine,
        max_model_len=(engine.max_model_len or context_length(model_dir)) if library else None,
        max_num_seqs=default.max_num_seqs if library or batch_size is None else batch_size,
        engine_kwargs=EngineKwargsConfig(**{engine.name: dict(engine.kwargs)}) if library else EngineKwargsConfig(),
    )
    cfg = dataclasses.replace(Config(), model=ModelConfig(path=model_dir), rollout=rollout)
    return cfg if cluster is None else dataclasses.replace(cfg, cluster=cluster)


def context_length(model_dir: str) -> int:
    """The judge model's ``max_position_embeddings`` (config.json)."""
    from posttrain.models.loading import load_config

    length = getattr(load_config(model_dir, what="judge model"), "max_position_embeddings", None)
    if not isinstance(length, int) or length < 1:
        raise ConfigError(f"the judge model {model_dir} gives no max_position_embeddings in its config.json: set "
                          "reward.workers.<name>.engine.max_model_len")
    return length


def check_judge_machine(engine: JudgeEngineConfig, cluster: Any, where: str) -> None:
    """A UserError of one line when this machine cannot run the judge's engine: the rollout engine's
    own check (package, GPU, version, tensor parallelism over the stage's processes), with the
    judge's keys named (``where``: reward.workers.<name>)."""
    from posttrain.config.schema import Config
    from posttrain.config.sections.rollout import RolloutConfig
    from posttrain.rollout.registry import MACHINE_CHECKS
    from posttrain.rollout.requests import tensor_parallel_note, tensor_parallel_problem
    import posttrain.rollout.engines  # noqa: F401 (registers every engine and its check)

    rollout = dataclasses.replace(RolloutConfig(), name=engine.name, tensor_model_parallel_size=engine.tensor_model_parallel_size)
    cfg = dataclasses.replace(Config(), rollout=rollout, **({} if cluster is None else {"cluster": cluster}))
    check = MACHINE_CHECKS.get(engine.name)
    problem = check(cfg) if check is not None else None
    if engine.name in ("vllm", "sglang"):
        # every rank judges its own rows with an engine of its own, whatever a rollout engine of the
        # same library shares between worker processes: tensor parallelism needs a one-process run
        split = tensor_parallel_problem(cfg)
        if problem is None:
            problem = split
        elif split is not None and "refused too" not in problem:
            problem += tensor_parallel_note(cfg)
    if problem is not None:  # the check speaks of the rollout keys, which are the judge's engine keys here
        raise UserError(f"{where}.engine.name={engine.name}: {problem.replace('rollout.', f'{where}.engine.')}")


def _torch_dtype(dtype: str, model_dir: str) -> torch.dtype:
    """The judge's model_args.dtype as a torch dtype; auto is the one its config.json saves (as the hf
    judge loads it), float32 when it saves none."""
    from posttrain.models.loading import DTYPES, load_config

    if isinstance(DTYPES.get(dtype), torch.dtype):
        return DTYPES[dtype]
    saved = getattr(load_config(model_dir, what="judge model"), "torch_dtype", None)
    return saved if isinstance(saved, torch.dtype) else torch.float32


def _weights_on_disk(dtype: torch.dtype) -> nn.Module:
    """What the vllm and sglang builders read of a model when its engine loads the weights itself
    (load_format auto): the dtype and the device of its first parameter."""
    stand_in = nn.Module()
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    stand_in.register_parameter("probe", nn.Parameter(torch.empty(0, dtype=dtype, device=device), requires_grad=False))
    return stand_in


@contextlib.contextmanager
def _own_engine_process(name: str) -> Iterator[None]:
    """vLLM's engine core in a process of its own while the judge's engine is built. The vllm rollout
    engine runs its core in the training process (VLLM_ENABLE_V1_MULTIPROCESSING=0) to take weights
    by reference; a judge takes no weights, and in that process its sleep would go through the same
    process-wide sleep-mode allocator as the rollout engine's."""
    if name != "vllm":
        yield
        return
    before = os.environ.get(_MP)
    os.environ[_MP] = "1"
    try:
        yield
    finally:  # the rollout engine's own choice (set or not) comes back
        if before is None:
            os.environ.pop(_MP, None)
        else:
            os.environ[_MP] = before


_MP = "VLLM_ENABLE_V1_MULTIPROCESSING"


class EngineJudge:
    """A `Generate` (posttrain.rewards.judge) over the engine `judge_config` describes; ``generating_args``
    as ROLL's (max_new_tokens, do_sample, temperature, top_p, top_k, repetition_penalty)."""

    def __init__(self, cfg: Any, *, dtype: str = "fp32", generating_args: dict[str, Any] | None = None, seed: int = 0,
                 chat_template_name: str | None = None, where: str = "reward.workers.<name>", engine: Any = None):
        """``engine`` replaces the one the registry would build (a fake engine in tests)."""
        from posttrain.models.loading import load_causal_lm, load_tokenizer, resolve_model_dir
        from posttrain.rollout.base import SamplingParams

        self.tokenizer = load_tokenizer(cfg.model.path)
        self.formatter = None if chat_template_name is None else named_formatter(self.tokenizer, chat_template_name, where)
        self.params = SamplingParams(**sampling_kwargs(generating_args or {}, where))
        self.sleeps = cfg.rollout.free_cache_engine and cfg.rollout.name != "hf"  # the hf judge runs on CPU: nothing to free
        if engine is None:
            from posttrain.rollout.engines import build_engine

            if cfg.rollout.name == "hf":
                model = load_causal_lm(cfg.model.path, dtype=dtype)
            else:  # the library reads the weights from the directory (a hub name is resolved to its cached snapshot)
                cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(resolve_model_dir(cfg.model.path, what="judge model"))))
                model = _weights_on_disk(_torch_dtype(dtype, cfg.model.path))
            with _own_engine_process(cfg.rollout.name):
                engine = build_engine(cfg, model, self.tokenizer, seed=seed, owns_weights=True)
        self.engine = engine
        if self.sleeps:
            self.engine.sleep(1)

    def chat(self, text: str) -> list[int]:
        """The judge prompt's token ids: the user turn in the named template, else in the tokenizer's
        chat template, else the text."""
        if self.formatter is not None:
            messages = self.formatter.with_system([{"role": "user", "content": text}])  # longCOT_qwen2.5's system prompt
            return self.formatter.encode_prompt(messages, what="the LLM judge's prompt")[1]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]  # the template wrote the special tokens
        return self.tokenizer(text, add_special_tokens=True)["input_ids"]

    def __call__(self, texts: list[str]) -> list[str]:
        from posttrain.records import PromptBatch

        ids = [self.chat(t) for t in texts]
        width = max(len(r) for r in ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in ids])  # (B, P) left-padded
        mask = torch.tensor([[0.0] * (width - len(r)) + [1.0] * len(r) for r in ids])  # (B, P)
        if self.sleeps:
            self.engine.wake_up()
        try:
            out = self.engine.generate(PromptBatch(input_ids=input_ids, attention_mask=mask), self.params, expected_version=0)
        finally:
            if self.sleeps:  # the device memory goes back to training until the next scoring
                self.engine.sleep(1)
        lengths = out.response_mask.sum(1).long().tolist()
        return [self.tokenizer.decode(r[:n].tolist(), skip_special_tokens=True) for r, n in zip(out.response_ids, lengths)]


def unused_engine_note(engine: JudgeEngineConfig, where: str) -> str | None:
    """Options of the GPU engines set on an hf judge, which has none of them (one line), else None."""
    default = JudgeEngineConfig()
    if engine.name != "hf":
        return None
    set_ = [f.name for f in dataclasses.fields(engine) if f.name != "name" and getattr(engine, f.name) != getattr(default, f.name)]
    if not set_:
        return None
    return (f"note: {', '.join(f'{where}.engine.{k}' for k in set_)}: settings of the vllm and sglang judge engines, unused "
            f"by the hf engine this judge uses ({where}.engine.name=hf)")


def named_formatter(tokenizer: Any, name: str, where: str) -> PromptFormatter:
    """The `PromptFormatter` of named template `name` on the judge's tokenizer: the one a policy
    prompt gets from ``data.chat_template_name: name`` with no other data settings."""
    from posttrain.config.sections.data import DataConfig
    from posttrain.data.dataset import make_formatter
    from posttrain.data.templates import named_template

    if named_template(name).jinja is None and not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"{where}.chat_template_name: {name} renders the judge tokenizer's own chat template, and the judge's "
                          "tokenizer has none; name a template that writes its own text (chatml, empty, base) or leave it null "
                          "for the plain text")
    return make_formatter(DataConfig(chat_template_name=name), tokenizer)


_SAMPLING_KEYS = {"max_new_tokens": int, "do_sample": bool, "temperature": float, "top_p": float, "top_k": int,
                  "repetition_penalty": float}


def sampling_kwargs(args: dict[str, Any], where: str = "reward.workers.<name>") -> dict[str, Any]:
    """SamplingParams keywords from ROLL-style generating_args (greedy and 32 new tokens unless said).

    >>> sampling_kwargs({"max_new_tokens": 8, "temperature": 0.8, "num_beams": 1})
    {'max_new_tokens': 8, 'do_sample': False, 'temperature': 0.8}
    """
    out: dict[str, Any] = {"max_new_tokens": 32, "do_sample": False}
    for key, value in args.items():
        if key in ("num_beams", "num_return_sequences") and value == 1:
            continue  # one greedy or sampled answer per prompt is what the judge gives
        if key not in _SAMPLING_KEYS:
            raise ConfigError(
                f"{where}.generating_args.{key}: the judge does not use it; it takes {', '.join(_SAMPLING_KEYS)} "
                "(num_beams and num_return_sequences only as 1)"
            )
        out[key] = _SAMPLING_KEYS[key](value)
    return out
