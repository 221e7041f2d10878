"""`data`: where prompts come from and how they become token ids."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class DataConfig:
    """Training/validation data files, prompt formatting, lengths and batch size."""

    train_files: list[str] = param(factory=list, doc="Training data file(s): parquet, jsonl, json or csv.", refs=["verl:data.train_files"])
    val_files: list[str] = param(factory=list, doc="Validation data file(s); empty means no validation.", refs=["verl:data.val_files"])
    train_batch_size: int = param(8, doc="Prompts sampled per training step (each gets rollout.n responses).", ge=1, refs=["verl:data.train_batch_size"])
    max_prompt_length: int = param(512, doc="Longest prompt in tokens after the chat template.", ge=1, refs=["verl:data.max_prompt_length"])
    max_response_length: int = param(512, doc="Longest generated response in tokens.", ge=1, refs=["verl:data.max_response_length"])
