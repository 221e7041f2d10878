"""`data_processor`: operator pipelines over tasks and experiences (Trinity-RFT's data processor).

The experience pipeline runs posttrain.buffer.operators on every scored batch before training
(reward filters, reward shaping, length and duplicate filters). Trinity-RFT's task pipeline runs
data-juicer operators only, which posttrain does not run: it is refused with that reason.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section

_TP = "trinity:data_processor.task_pipeline"
_EP = "trinity:data_processor.experience_pipeline"
_DJ = ("Trinity-RFT's task pipeline runs data-juicer operators, which posttrain does not run; filter or "
       "transform the task files before the run (or use data.filter_overlong_prompts)")


@section
class ExperiencePipelineConfig:
    """Operators applied in order to each scored batch before training."""

    operators: list[dict[str, Any]] = param(factory=list, doc="Operators {name, args} from posttrain.buffer.operators: reward_filter, reward_std_filter, invalid_reward_filter, reward_shaping_mapper, response_length_filter, dedup_filter, pass_rate_calculator (data_juicer refused with the reason).", refs=[f"{_EP}.operators"])


@section
class DataProcessorConfig:
    """The pipeline of named operators applied to experiences before training (Trinity-RFT's task pipeline is refused)."""

    experience_pipeline: ExperiencePipelineConfig = param(factory=ExperiencePipelineConfig, doc="Experience pipeline: operators over each scored batch, between reward and training.")


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {
    **{f"{_TP}{sub}": _DJ for sub in ("", ".num_process", ".operators", ".inputs", ".target_fields")},
    f"{_EP}.save_input": "the experiences a pipeline reads are not saved apart; a decoupled run's buffer keeps what the explorer wrote",
    f"{_EP}.input_save_path": "the experiences a pipeline reads are not saved apart; a decoupled run's buffer keeps what the explorer wrote",
    f"{_EP}.inputs": "the pipeline reads the explored batches only (no extra input buffers)",
    f"{_EP}.output": "the pipeline's output is the trainer's input (the experience buffer or the step)",
}
