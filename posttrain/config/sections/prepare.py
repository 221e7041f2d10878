"""`prepare`: build the tiny model and a synthetic task before the run, so one command runs a demo.

`posttrain train` runs this section first (`posttrain.trainer.prepare`): a directory that is missing
is built, one that exists is reused. A directory built by `prepare` carries a `prepare.json` with
the settings it was built from; reusing it with other settings is refused (delete it, or point
`path`/`dir` elsewhere), so a config never trains on data it did not ask for. A directory without
that file (made by hand, e.g. with `posttrain make-model`) is reused as it is, and the run says so.

The rest of the config refers to what `prepare` builds by interpolation, e.g.
``model: {path: ${prepare.model.path}}`` and ``train_files: ${prepare.data.dir}/train.parquet``.
Nothing here is a reference-framework key: verl, ROLL and Trinity expect models and data to exist.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section


@section
class TinyModelConfig:
    """Shape of the random-init Qwen2 model `posttrain make-model tiny` builds (same defaults)."""

    layers: int = param(3, doc="Decoder layers.", ge=1)
    hidden: int = param(128, doc="Hidden size.", ge=1)
    heads: int = param(4, doc="Attention heads (must divide hidden).", ge=1)
    kv_heads: int | None = param(None, doc="Key/value heads for GQA; null uses heads.", ge=1)
    intermediate: int | None = param(None, doc="MLP size; null is 3 x hidden.", ge=1)
    vocab: int | None = param(None, doc="Vocabulary size; null is the character tokenizer's own (100).", ge=1)
    max_position: int = param(512, doc="Longest sequence in tokens.", ge=1)
    tie_embeddings: bool = param(False, doc="Share the input embedding and the LM head.")
    seed: int = param(0, doc="Initialisation seed; same shape and seed give bitwise-identical weights.", ge=0)


@section
class PrepareModelConfig:
    """The policy model to build when its directory is missing."""

    path: str | None = param(None, doc="Model directory to build or reuse; null builds no model.")
    tiny: TinyModelConfig = param(factory=TinyModelConfig, doc="Shape and seed of the tiny model built there.")


@section
class PrepareDataConfig:
    """The synthetic task files to write when their directory is missing (`posttrain make-data`)."""

    dir: str | None = param(None, doc="Directory for train/test/sft_train/dpo_*.parquet; null writes no data.")
    task: str = param("sort", doc="Registered task: sort, arithmetic, countdown (`posttrain make-data --help`).")
    options: dict[str, Any] = param(factory=dict, doc="Task options, e.g. {digits: 2, partial_credit: 0.5}; unset ones keep the task's defaults.")
    train: int = param(1000, doc="RL training rows.", ge=0)
    test: int = param(200, doc="Held-out rows (distinct, absent from every training file).", ge=0)
    sft: int | None = param(None, doc="SFT rows; null writes as many as train, 0 writes no SFT file.", ge=0)
    dpo: int | None = param(0, doc="DPO training pairs; null writes as many as train, 0 writes no DPO files.", ge=0)
    seed: int = param(0, doc="Seed of the problems drawn; same seed and options give the same files.", ge=0)


@section
class PrepareConfig:
    """Model and data built before the run when missing (so a demo needs no other command)."""

    model: PrepareModelConfig = param(factory=PrepareModelConfig, doc="The tiny model to build.")
    data: PrepareDataConfig = param(factory=PrepareDataConfig, doc="The synthetic task to write.")


#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
UNSUPPORTED: dict[str, str] = {}
