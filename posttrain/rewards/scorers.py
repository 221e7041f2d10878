"""Which function a reward worker's ``worker_cls`` names: a built-in scorer, a file or a module.

``worker_cls`` is one of

- a built-in scorer's name (`BUILTIN_SCORERS`): ``tasks`` (posttrain's synthetic tasks, by the
  sample's data_source), ``math`` (symbolic equivalence), ``math_verify_first`` (the first
  expression of the whole response against the reference's: RM-Gallery's math_verify_reward),
  ``multiple_choice``, ``code`` (the local
  sandbox), ``ifeval`` (verifiable instructions), ``think_answer`` (accuracy + format of an
  R1-style ``<think>``/``<answer>`` response), ``countdown_equation`` (TinyZero's Countdown reward),
  ``math_boxed`` (the last boxed answer after Qwen2.5-Math's answer cleaning), ``dapo_math`` and
  ``bots_math`` (Reasoning360's DAPO grader: Trinity-RFT's math_dapo_reward, BOTS), ``tool_n1`` (Tool-N1's
  tool-call match), ``detection`` (ROLL's box detection reward: IoU matchings and COCO AP), ``video_r1``
  (Video-R1's accuracy by question type plus format: ROLL's VideoR1RewardWorker);
  ``llm_judge`` is a worker of its own
  (`posttrain.rewards.judge`);
- ``path/to/file.py:name``: a function (or class) in a Python file, as custom_reward_function;
- ``package.module:name``: a function (or class) importable from ``sys.path``.

A class is built once per process with the worker's ``reward_kwargs`` and its instances are called
per sample (ROLL's reward workers are classes too). Every function is checked (imported, signature
bound) before training starts.
"""

from __future__ import annotations

from typing import Any

from posttrain.errors import ConfigError
from posttrain.rewards.function import RewardFunction, load_reward_function

# name -> (module, function); imported on first use, so a scorer's packages load only when used.
BUILTIN_SCORERS: dict[str, tuple[str, str]] = {
    "tasks": ("posttrain.tasks", "compute_score"),
    "math": ("posttrain.rewards.math_scorer", "math_score"),
    "math_verify_first": ("posttrain.rewards.math_verify_first", "math_verify_first_score"),
    "multiple_choice": ("posttrain.rewards.choice", "multiple_choice_score"),
    "code": ("posttrain.rewards.code", "code_score"),
    "ifeval": ("posttrain.rewards.instructions", "ifeval_score"),
    "think_answer": ("posttrain.rewards.think_answer", "think_answer_score"),
    "countdown_equation": ("posttrain.rewards.countdown_equation", "countdown_equation_score"),
    "math_boxed": ("posttrain.rewards.math_boxed", "math_boxed_score"),
    "dapo_math": ("posttrain.rewards.dapo_math", "dapo_math_score"),
    "bots_math": ("posttrain.rewards.dapo_math", "bots_math_score"),
    "tool_n1": ("posttrain.rewards.tool_n1", "tool_n1_score"),
    "detection": ("posttrain.rewards.detection", "detection_score"),
    "video_r1": ("posttrain.rewards.video_r1", "video_r1_score"),
}


def load_scorer(worker_cls: str, kwargs: dict[str, Any], setting: str) -> RewardFunction:
    """The checked, picklable function ``worker_cls`` names (module docstring); ``setting`` is the
    config key errors name (``reward.workers.<name>.worker_cls``).

    >>> load_scorer("tasks", {}, "k").label
    'posttrain.tasks:compute_score'
    """
    settings = (setting, setting)
    if worker_cls in BUILTIN_SCORERS:
        module, name = BUILTIN_SCORERS[worker_cls]
        return load_reward_function(None, name, kwargs, module=module, settings=settings)
    where, colon, name = worker_cls.rpartition(":")
    if not colon or not where or not name:
        hint = " (a class path? write it as package.module:ClassName)" if "." in worker_cls else ""
        raise ConfigError(
            f"{setting}: unknown scorer {worker_cls!r}{hint}; use a built-in ({', '.join(BUILTIN_SCORERS)}), "
            "path/to/file.py:function or package.module:function"
        )
    if where.endswith(".py") or "/" in where:
        return load_reward_function(where, name, kwargs, settings=settings)
    return load_reward_function(None, name, kwargs, module=where, settings=settings)
