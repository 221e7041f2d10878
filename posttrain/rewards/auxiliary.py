"""Auxiliary models: named models a run serves to its reward functions and judges (reward.auxiliary_models).

`start_auxiliary` loads each model on its engine (``engine.name``: hf on CPU, vllm or sglang; built
through the rollout engine registry exactly as an LLM judge's engine, `posttrain.rewards.judge_engine`)
and serves it with posttrain's OpenAI-compatible chat endpoint (`posttrain.rollout.server`) on
127.0.0.1 at a free port, in a thread of the scoring process. The run's reward stage starts them
before it builds its reward workers and stops them when it closes (`AuxiliaryServers.stop`).

While they run, each model's base URL (``http://127.0.0.1:<port>/v1``, what an OpenAI client takes
as ``base_url``) is in the environment variable ``POSTTRAIN_AUX_<NAME>_URL`` (`env_name`), so a
custom reward function, in the scoring process or a parallel pool started from it, can call it:
with any OpenAI client, or with `chat` here (standard library only)::

    from posttrain.rewards.auxiliary import chat

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        verdict = chat("judge", [{"role": "user", "content": f"Is {solution_str!r} polite? yes or no"}], max_tokens=4)
        return float(verdict.strip().lower().startswith("yes"))

The endpoint answers one request at a time (the engine decodes one batch at a time), has no
authentication, and listens on the loopback address only.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from posttrain.errors import ConfigError


def env_name(name: str) -> str:
    """The environment variable holding auxiliary model ``name``'s base URL.

    >>> env_name("judge")
    'POSTTRAIN_AUX_JUDGE_URL'
    """
    return f"POSTTRAIN_AUX_{name.upper()}_URL"


def url(name: str) -> str:
    """The base URL of running auxiliary model ``name`` (from its environment variable)."""
    found = os.environ.get(env_name(name))
    if not found:
        raise ConfigError(f"auxiliary model {name!r} is not being served ({env_name(name)} is unset): declare it in "
                          "reward.auxiliary_models; it is served while the run scores")
    return found


def chat(model: str, messages: list[dict[str, Any]], *, max_tokens: int = 256, temperature: float = 1.0,
         base_url: str | None = None, timeout_s: float = 600.0) -> str:
    """The first choice's text of one chat completion from auxiliary model ``model`` (its URL from
    the environment unless ``base_url`` is given); temperature 0 decodes greedily."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    request = urllib.request.Request(f"{base_url or url(model)}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as err:  # the server's own message (an unsupported field, a template error)
        raise RuntimeError(f"auxiliary model {model!r} refused the request ({err.code}): {err.read().decode(errors='replace')}") from None
    return answer["choices"][0]["message"]["content"] or ""


class _Waking:
    """An engine that sleeps between requests (``engine.free_cache_engine`` on vllm/sglang): it wakes
    for each generation and goes back to sleep, so training keeps the device memory meanwhile."""

    def __init__(self, engine: Any):
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self._engine.wake_up()
        try:
            return self._engine.generate(*args, **kwargs)
        finally:
            self._engine.sleep(1)


@dataclass
class AuxiliaryServers:
    """The running endpoints, by model name; `stop` ends them and clears their variables."""

    urls: dict[str, str] = field(default_factory=dict)
    _servers: list[Any] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _env_before: dict[str, str | None] = field(default_factory=dict)

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join()
        for key, value in self._env_before.items():  # what the variables held before the run set them
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._servers.clear()
        self._threads.clear()
        self._env_before.clear()


def build_engine(model: Any, *, seed: int = 0, cluster: Any = None) -> tuple[Any, Any]:
    """(engine, tokenizer) of one AuxiliaryModelConfig, built as an LLM judge's (judge_engine)."""
    from posttrain.rewards.judge_engine import EngineJudge, judge_config

    cfg = judge_config(model.model_path, model.engine, batch_size=None, cluster=cluster)
    built = EngineJudge(cfg, dtype=model.dtype, seed=seed, where="reward.auxiliary_models.<name>")
    engine = _Waking(built.engine) if built.sleeps else built.engine
    return engine, built.tokenizer


def check_model(model: Any, where: str, cluster: Any = None) -> None:
    """Before training: the model's directory is there and this machine can run its engine."""
    from posttrain.models.loading import resolve_model_dir
    from posttrain.rewards.judge_engine import check_judge_machine

    resolve_model_dir(model.model_path, what=f"auxiliary model ({where}.model_path)")
    check_judge_machine(model.engine, cluster, where)


def check_models(models: dict[str, Any], cluster: Any = None) -> None:
    """`check_model` for every model of reward.auxiliary_models (name -> AuxiliaryModelConfig)."""
    for name, model in models.items():
        check_model(model, f"reward.auxiliary_models.{name}", cluster)


def start_auxiliary(models: dict[str, Any], *, seed: int = 0, cluster: Any = None,
                    engines: dict[str, tuple[Any, Any]] | None = None) -> AuxiliaryServers:
    """Load and serve every model of ``models`` (name -> AuxiliaryModelConfig); ``engines`` gives
    (engine, tokenizer) pairs that replace loading (fake engines in tests)."""
    from posttrain.rollout.server import ChatService, make_server

    running = AuxiliaryServers()
    try:
        for name, model in models.items():
            engine, tokenizer = (engines or {}).get(name) or build_engine(model, seed=seed, cluster=cluster)
            server = make_server(ChatService(engine, tokenizer, name), "127.0.0.1", 0)
            thread = threading.Thread(target=server.serve_forever, name=f"aux-{name}", daemon=True)
            thread.start()
            running._servers.append(server)
            running._threads.append(thread)
            running.urls[name] = f"http://127.0.0.1:{server.server_address[1]}/v1"
            running._env_before[env_name(name)] = os.environ.get(env_name(name))
            os.environ[env_name(name)] = running.urls[name]
    except BaseException:
        running.stop()
        raise
    return running
