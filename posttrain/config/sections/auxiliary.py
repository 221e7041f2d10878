"""Checks of `reward.auxiliary_models` (`AuxiliaryModelConfig` in posttrain.config.sections.reward).

They are named models a run loads and serves to its reward functions and judges.

Each auxiliary model is loaded on the engine ``engine.name`` names (built through the rollout engine
registry, as an LLM judge's engine is) and served over an OpenAI-compatible chat endpoint on
127.0.0.1 at a free port, started when the run's reward stage is built and stopped with it
(posttrain.rewards.auxiliary). The chat-judge workers (reward.workers.<name>.worker_cls ruler_judge
or rubric_judge, posttrain.rewards.chat_judges) name one in ``reward_kwargs.model``; a custom reward
function reads its URL from the environment variable ``POSTTRAIN_AUX_<NAME>_URL``.
"""

from __future__ import annotations

import re
from typing import Any

AUX_NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # it names an environment variable (upper-cased)
CHAT_JUDGES = ("ruler_judge", "rubric_judge")  # the worker_cls values that call an auxiliary model


def check_auxiliary_models(cfg: Any) -> list[str]:
    """reward.auxiliary_models names and paths, and every chat judge naming one that is there."""
    reward = getattr(cfg, "reward", None)
    models = getattr(reward, "auxiliary_models", None) or {}
    problems = []
    for name, model in models.items():
        key = f"reward.auxiliary_models.{name}"
        if not AUX_NAME.match(name):
            problems.append(f"{key}: an auxiliary model's name must be lower-case letters, digits and _ (starting with a letter): "
                            "it names the environment variable POSTTRAIN_AUX_<NAME>_URL")
        if not model.model_path:
            problems.append(f"{key}.model_path: name the model (a local directory or a cached hub name)")
    if models and reward.launch_reward_fn_async:  # as an LLM judge (check_async_reward)
        problems.append(f"reward.launch_reward_fn_async: the auxiliary models ({', '.join(models)}) generate in the training "
                        "process, on its devices, so scoring with them must not overlap the log-prob passes: turn "
                        "launch_reward_fn_async off")
    for name, worker in (getattr(reward, "workers", None) or {}).items():
        if worker.worker_cls not in CHAT_JUDGES:
            continue
        key = f"reward.workers.{name}"
        wanted = worker.reward_kwargs.get("model")
        if wanted not in models:
            known = ", ".join(models) or "none is configured"
            problems.append(f"{key}.reward_kwargs.model: a {worker.worker_cls} calls an auxiliary model by name; "
                            f"{wanted!r} is not one of reward.auxiliary_models ({known})")
        if worker.world_size is not None:
            problems.append(f"{key}.world_size: a {worker.worker_cls} calls its auxiliary model's server from the scoring "
                            "process (it needs a task's whole group together), not from a pool; leave world_size out")
    return problems
