"""`data_processor`: operator pipelines over tasks and experiences (Trinity-RFT's data processor)."""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section

_TODO = "task/experience processing pipelines; data processing issue"


@section
class DataProcessorConfig:
    """Pipelines of named operators applied to tasks before exploring and to experiences before training."""

    task_pipeline: dict[str, Any] = param(factory=dict, doc="Task pipeline: operators (name, args), inputs, target_fields, num_process; its output feeds the explorer.", todo=_TODO, refs=["trinity:data_processor.task_pipeline", "trinity:data_processor.task_pipeline.num_process", "trinity:data_processor.task_pipeline.operators", "trinity:data_processor.task_pipeline.inputs", "trinity:data_processor.task_pipeline.target_fields"])
    experience_pipeline: dict[str, Any] = param(factory=dict, doc="Experience pipeline: operators (name, args) such as data_juicer scoring or reward_shaping_mapper.", todo=_TODO, refs=["trinity:data_processor.experience_pipeline", "trinity:data_processor.experience_pipeline.operators"])


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}
