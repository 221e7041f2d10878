"""`eval`: what `posttrain eval` scores, a file of already generated responses (verl's main_eval).

The reward function is the `reward` section's (custom_reward_function, or the built-in scorer of
each data source; reward_manager, timeout_s, on_error, workers): the same loading, managers and
sandboxing as training. verl's evaluation.yaml is translated onto these keys
(posttrain.config.dialects.verl_eval).
"""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class EvalConfig:
    """The file of generated responses `posttrain eval` scores per data source, and its columns."""

    path: str | None = param(None, doc="Parquet or JSONL file of generated responses that `posttrain eval` scores, one row per prompt; null: give it as eval.path=FILE on the command line.", refs=["verl:data.path"])
    response_key: str = param("responses", doc="Column with each row's generated responses: a list of strings, each scored (the row's score is their mean), or one string. verl's evaluation.yaml calls it data.response_key.")
    data_source_key: str = param("data_source", doc="Column naming each row's data source: it picks the built-in scorer when reward.custom_reward_function.path is null, and the table reports the mean score of each data source (test_score/<data source>).", refs=["verl:data.data_source_key"])
    reward_model_key: str = param("reward_model", doc="Column with each row's reference, a dict whose ground_truth is the reward function's ground_truth argument.", refs=["verl:data.reward_model_key"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}
