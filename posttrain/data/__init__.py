"""The data pipeline: files -> rows -> chat-templated token ids -> batches.

The trainer calls the builders with the `data` config section and a tokenizer, samples index
batches with `make_sampler` (resumable through its state_dict) and collates the examples:

    dataset = build_rl_dataset(cfg.data, cfg.data.train_files, tokenizer)
    sampler = make_sampler(cfg.data, len(dataset))
    batch = collate_prompts([dataset[k] for k in sampler.next_batch()], pad_token_id(tokenizer), uid_prefix="s1")

`collate_prompts` returns `posttrain.records.PromptBatch`, the rollout engine's input (re-exported here).
"""

from posttrain.data.dataset import (
    DPODataset,
    RLDataset,
    SFTDataset,
    build_dpo_dataset,
    build_rl_dataset,
    build_sft_dataset,
    make_formatter,
    pad_token_id,
)
from posttrain.data.examples import (
    DPOExample,
    PreferenceBatch,
    RLExample,
    SequenceBatch,
    SFTExample,
    collate_dpo,
    collate_prompts,
    collate_sft,
)
from posttrain.data.files import FORMATS, RowTable, as_file_list, count_rows, load_files, read_rows
from posttrain.data.prompts import PromptFormatter, resolve_chat_template, truncate
from posttrain.data.sampler import BatchSampler, make_sampler
from posttrain.records import PromptBatch

__all__ = [
    "FORMATS",
    "BatchSampler",
    "DPODataset",
    "DPOExample",
    "PreferenceBatch",
    "PromptBatch",
    "PromptFormatter",
    "RLDataset",
    "RLExample",
    "RowTable",
    "SFTDataset",
    "SFTExample",
    "SequenceBatch",
    "as_file_list",
    "build_dpo_dataset",
    "build_rl_dataset",
    "build_sft_dataset",
    "collate_dpo",
    "collate_prompts",
    "collate_sft",
    "count_rows",
    "load_files",
    "make_formatter",
    "make_sampler",
    "pad_token_id",
    "read_rows",
    "resolve_chat_template",
    "truncate",
]
