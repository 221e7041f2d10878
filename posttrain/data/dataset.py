"""In-memory datasets for RL prompts, SFT sequences and DPO pairs, and the builders the trainer calls.

Rows are read and checked when a dataset is built (a missing column or a non-string prompt fails
before training starts, naming file, row and column), and every row is templated and tokenised
once to hold its length against its limit (`posttrain.data.filtering`: a row too long for
`data.truncation: error`, or a template that fails on a row, is refused at build time, not when the
sampler first draws it). Examples are tokenised again on access rather than kept, as in verl.
A dataset is a sequence: ``len(ds)`` and ``ds[k]`` -> example, k in 0..len-1.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable, Self, Sequence

from posttrain.config.sections.data import TOKENIZER_TEMPLATE, DataConfig
from posttrain.data import rows
from posttrain.data.entry_columns import own_columns, rename_entry_columns
from posttrain.data.examples import DPOExample, RLExample, SFTExample
from posttrain.data.files import RowTable, as_file_list
from posttrain.data.filtering import check_lengths
from posttrain.data.images import IMAGE_PAD, ImageInputs, has_media, row_images
from posttrain.data.prompts import Message, PromptFormatter, cut, kept_ends, resolve_chat_template, truncate
from posttrain.data.sources import load_table
from posttrain.data.templates import named_template, with_suffix
from posttrain.errors import ConfigError, DataError, ModelError
from posttrain.records import VisionInputs

SPLITS = {"train": "data.train_files", "val": "data.val_files"}


def make_formatter(cfg: DataConfig, tokenizer: Any) -> PromptFormatter:
    """The formatter `cfg` describes: chat template (named, inline, a file or the tokenizer's),
    system prompt, template variables, reply prefix. Explicit settings win over what a named
    template brings: data.system_prompt over its system prompt, data.enable_thinking and
    data.apply_chat_template_kwargs over its variables."""
    named = named_template(cfg.chat_template_name)
    if named.jinja is not None and cfg.chat_template is not None:
        raise ConfigError(f"data.chat_template_name: {cfg.chat_template_name} writes its own template, so data.chat_template "
                          f"would be ignored; unset one of them")
    template = named.jinja if named.jinja is not None else resolve_chat_template(cfg.chat_template, tokenizer)
    kwargs = {**named.kwargs, **thinking_kwargs(cfg), **cfg.apply_chat_template_kwargs}
    return PromptFormatter(
        tokenizer=tokenizer,
        chat_template=with_suffix(template, named.generation_suffix),
        system_prompt=cfg.system_prompt if cfg.system_prompt is not None else named.system_prompt,
        template_kwargs=kwargs,
        user_prefix=named.user_prefix,
        user_suffix=cfg.user_suffix or "",
        reply_prefix=cfg.reply_prefix,
    )


def entry_formatters(cfg: DataConfig, entries: list[str], tokenizer: Any) -> dict[int, PromptFormatter]:
    """{index of the entry in `entries`: its formatter} for the validation entries with a chat
    template of their own (data.val_file_settings.<entry>.chat_template); the others use the stage's."""
    where = {os.path.expanduser(e): k for k, e in enumerate(entries)}
    out: dict[int, PromptFormatter] = {}
    for entry, own in cfg.val_file_settings.items():
        k = where.get(os.path.expanduser(entry))
        if own.chat_template is None or k is None:  # an unknown entry is refused by check_val_file_settings
            continue
        template = None if own.chat_template == TOKENIZER_TEMPLATE else own.chat_template
        try:
            out[k] = make_formatter(dataclasses.replace(cfg, chat_template=template), tokenizer)
        except ConfigError as err:  # the message names data.chat_template: say which setting it was
            raise ConfigError(f"data.val_file_settings.{entry}.chat_template: {err}") from None
    return out


def refuse_prompt_only(cfg: DataConfig, kind: str) -> None:
    """SFT and DPO render finished conversations; settings that shape only a prompt's open assistant
    turn (a reply prefix, text after the assistant header) would change nothing there or break the
    loss spans, so they are refused rather than ignored."""
    if cfg.reply_prefix is not None:
        raise ConfigError(f"data.reply_prefix starts the replies of RL prompts; {kind} sequences hold their whole reply, so unset it")
    for key, name in (("data.chat_template_name", cfg.chat_template_name), *((f"data.tag_to_template.{t}", n) for t, n in cfg.tag_to_template.items())):
        if named_template(name).generation_suffix:
            raise ConfigError(f"{key}: {name} writes text after the assistant header of RL "
                              f"prompts only; {kind} data needs a template of finished turns (native, chatml, ...)")


def thinking_kwargs(cfg: DataConfig) -> dict[str, Any]:
    """{'enable_thinking': ...} when data.enable_thinking is set; a different value under the same
    name in data.apply_chat_template_kwargs is a contradiction, refused."""
    if cfg.enable_thinking is None:
        return {}
    other = cfg.apply_chat_template_kwargs.get("enable_thinking", cfg.enable_thinking)
    if other != cfg.enable_thinking:
        raise ConfigError(f"data.enable_thinking is {cfg.enable_thinking} but data.apply_chat_template_kwargs.enable_thinking "
                          f"is {other}; keep one of them")
    return {"enable_thinking": cfg.enable_thinking}


def pad_token_id(tokenizer: Any) -> int:
    """The id prompts are padded with: the pad token, else the EOS token (as verl does)."""
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            return value
    raise ModelError("the tokenizer has neither a pad token nor an EOS token; set pad_token in its tokenizer_config.json")


class _RowDataset:
    """What the three datasets share: the rows, the formatter, the config, the kept row indices.
    Each says what its length limit is (`limit_key`) and how long a row is (`length`)."""

    limit_key = "data.max_length"
    unit = "sequences"
    hint = ""
    _trim_final_newline = False  # SFT rows only (data.sft_trim_final_newline)
    images: ImageInputs | None = None  # a vision-language policy's image side (posttrain.data.images); RL and SFT rows

    def __init__(self, table: RowTable, formatter: PromptFormatter, cfg: DataConfig, indices: Sequence[int] | None = None):
        self.table = table
        self.formatter = formatter
        self.cfg = cfg
        self.indices = list(range(len(table))) if indices is None else list(indices)
        self._tag_formatters: dict[str, PromptFormatter] = {}  # data.tag_to_template: one per template named
        self.entry_formatters: dict[int, PromptFormatter] = {}  # validation entries' own templates (entry_formatters)
        self.entry_overlong: dict[int, bool] = {}  # validation entries' own overlong penalty on/off (data.val_file_settings)
        for i in self.indices:  # fail on a bad row now, not steps into training
            self.check_row(i)
            rows.row_tools(table, i, cfg)
        if cfg.tools_key is not None and not any(cfg.tools_key in table.rows[i] for i in self.indices):
            raise DataError(f"data.tools_key: no row of {', '.join(table.paths)} has a column '{cfg.tools_key}'; "
                            f"its first row's columns are {sorted(table.rows[self.indices[0]]) if self.indices else []}")

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def limit(self) -> int:
        return self.cfg.max_length

    def locate(self, i: int, column: str) -> str:
        return self.table.locate(i, column)

    def length(self, i: int) -> tuple[int, str]:
        """(tokens, column) of global row i's longest sequence before truncation."""
        raise NotImplementedError

    def check_row(self, i: int) -> None:
        """Read every cell row i needs, raising DataError on a bad one (no tokenisation)."""
        raise NotImplementedError

    def select(self, indices: Sequence[int]) -> Self:
        """The same dataset over a subset of its global row indices (rows are not re-checked)."""
        subset = copy.copy(self)
        subset.indices = list(indices)
        return subset

    def _row_index(self, k: int) -> int:
        if not -len(self.indices) <= k < len(self.indices):
            raise IndexError(f"dataset index {k} out of range for {len(self.indices)} examples")
        return self.indices[k]

    def _formatter(self, i: int) -> PromptFormatter:
        """Row i's formatter: its tag's template (data.tag_to_template, else data.chat_template_name)
        with its tool schemas (data.tools_key) as the template's `tools`."""
        formatter = self.entry_formatters.get(self.table.entry_of(i), self.formatter) if self.entry_formatters else self.formatter
        name = self.cfg.tag_to_template.get(rows.data_source(self.table, i, self.cfg)) if self.cfg.tag_to_template else None
        if name is not None:
            if name not in self._tag_formatters:
                tagged = dataclasses.replace(self.cfg, chat_template_name=name)
                self._tag_formatters[name] = make_formatter(tagged, self.formatter.tokenizer)
            formatter = self._tag_formatters[name]
        tools = rows.row_tools(self.table, i, self.cfg)
        if tools is not None:  # per row: the rows' tool sets differ
            formatter = dataclasses.replace(formatter, template_kwargs={**formatter.template_kwargs, "tools": tools})
        return formatter

    def overlong_penalty(self, i: int) -> bool | None:
        """Whether row i's validation scores carry the overlong penalty by its entry's own setting
        (data.val_file_settings.<entry>.overlong_penalty); None: the stage's (reward.overlong_buffer.enable)."""
        return self.entry_overlong.get(self.table.entry_of(i)) if self.entry_overlong else None

    def _with_system(self, i: int, messages: list[Message]) -> list[Message]:
        return self._formatter(i).with_system(messages, rows.row_system_prompt(self.table, i, self.cfg))

    def _images(self, i: int) -> list:
        """Row i's images (data.image_key) when the dataset reads images, else []."""
        value = self.table.rows[i].get(self.cfg.image_key)
        if self.images is None or not has_media(value):
            return []
        return row_images(value, self.table.locate(i, self.cfg.image_key), _base_dir(self.cfg))

    def _videos(self, i: int) -> list:
        """Row i's videos (data.video_key) as sampled frames and their frame rate, when the dataset reads media, else []."""
        value = self.table.rows[i].get(self.cfg.video_key)
        if self.images is None or not has_media(value):
            return []
        return self.images.read_videos(value, self.table.locate(i, self.cfg.video_key), _base_dir(self.cfg))

    def _encode(self, i: int, messages: list[Message], loss_from: int, column: str) -> tuple[list[int], list[int]]:
        return self._formatter(i).encode_conversation(messages, loss_from=loss_from, what=self.table.locate(i, column),
                                                      trim_final_newline=self._trim_final_newline)

    def _sequence(self, i: int, messages: list[Message], loss_from: int, column: str) -> SFTExample:
        ids, mask = self._encode(i, messages, loss_from, column)
        truncate(ids, self.cfg.max_length, self.cfg.truncation, what=self.table.locate(i, column), limit="data.max_length")
        ends = kept_ends(len(ids), self.cfg.max_length, self.cfg.truncation)  # ids and mask are cut alike
        return SFTExample(index=i, input_ids=cut(ids, *ends), loss_mask=cut(mask, *ends))


class RLDataset(_RowDataset):
    """Prompts for rollouts: chat-templated, tokenised, checked against max_prompt_length."""

    limit_key = "data.max_prompt_length"
    unit = "prompts"
    hint = ", or set data.filter_overlong_prompts: true to drop such rows"

    @property
    def limit(self) -> int:
        return self.cfg.max_prompt_length

    def length(self, i: int) -> tuple[int, str]:
        _, _, _, ids, column = self.encode_row(i)
        return len(ids), column

    def check_row(self, i: int) -> None:
        rows.prompt_cell(self.table, i, self.cfg)
        rows.row_system_prompt(self.table, i, self.cfg)
        rows.ground_truth(self.table, i, self.cfg)
        rows.data_source(self.table, i, self.cfg)
        rows.extra_info(self.table, i, self.cfg.extra_info_keys)

    def encode_row(self, i: int) -> tuple[Any, list[Message], str, list[int], str]:
        """(raw cell, messages, templated text, untruncated ids, column) of global row i; a row with
        images has one ``<|image_pad|>`` per merged patch in its ids (`vision_row`)."""
        return self.vision_row(i)[:5]

    def vision_row(self, i: int) -> tuple[Any, list[Message], str, list[int], str, VisionInputs | None]:
        """`encode_row` and the row's images and videos as the vision tower takes them (None: neither)."""
        raw, messages, column = rows.prompt_cell(self.table, i, self.cfg)
        where = self.table.locate(i, column)
        images, videos = self._images(i), self._videos(i)
        if images or videos:
            messages = self.images.place(messages, len(images), where, videos=len(videos))
        messages = self._with_system(i, messages)
        text, ids = self._formatter(i).encode_prompt(messages, what=where)
        vision = None
        if images or videos:
            vision = self.images.process(images, videos)
            ids = self.images.expand(ids, vision)
        return raw, messages, text, ids, column, vision

    def __getitem__(self, k: int) -> RLExample:
        i = self._row_index(k)
        raw, messages, text, ids, column, vision = self.vision_row(i)
        if vision is not None and len(ids) > self.limit:
            raise DataError(f"{self.table.locate(i, column)}: the prompt with its image tokens is {len(ids)} tokens, over "
                            f"{self.limit_key} {self.limit}; cutting it would cut its images, so raise {self.limit_key}, set "
                            f"data.filter_overlong_prompts: true, or lower data.image_max_pixels")
        ids = truncate(ids, self.limit, self.cfg.truncation, what=self.table.locate(i, column), limit=self.limit_key, hint=self.hint)
        return RLExample(
            index=i,
            prompt_ids=ids,
            prompt=raw,
            data_source=rows.data_source(self.table, i, self.cfg),
            ground_truth=rows.ground_truth(self.table, i, self.cfg),
            extra_info=rows.extra_info(self.table, i, self.cfg.extra_info_keys),
            raw_chat=messages if self.cfg.return_raw_chat else None,
            full_prompt=text if self.cfg.return_full_prompt else None,
            vision=vision,
        )


class SFTDataset(_RowDataset):
    """Supervised sequences: prompt + response, or whole conversations, with a loss mask."""

    @property
    def _trim_final_newline(self) -> bool:
        return self.cfg.sft_trim_final_newline

    def check_row(self, i: int) -> None:
        rows.sft_conversation(self.table, i, self.cfg)
        rows.row_system_prompt(self.table, i, self.cfg)

    def _conversation(self, i: int, images: int = 0) -> tuple[list[Message], int, str]:
        """(messages, first message the loss may cover, column) of row i, with `images` vision spans
        placed at its ``<image>`` markers (`ImageInputs.place`, as for RL prompts)."""
        messages, loss_from, column = rows.sft_conversation(self.table, i, self.cfg)
        if images:
            messages = self.images.place(messages, images, self.table.locate(i, self.cfg.image_key))
        with_system = self._with_system(i, messages)
        loss_from += len(with_system) - len(messages)  # a prepended system message shifts turns
        return with_system, loss_from, column

    def _vision_sequence(self, i: int, images: list) -> tuple[list[int], list[int], str, VisionInputs]:
        """(ids, loss mask, column, images) of a row with images: one ``<|image_pad|>`` per merged
        patch, all of them before the first trained token. The vision forward reads image tokens in
        the prompt only (`posttrain.models.vision.image_token_mask`), and an expert row's prompt ends
        where its loss starts (`posttrain.trainer.mixing`), so an image after that is refused."""
        messages, loss_from, column = self._conversation(i, len(images))
        ids, mask = self._encode(i, messages, loss_from, column)
        vision = self.images.process(images)
        ids, mask = self.images.expand_masked(ids, mask, vision)
        pad = self.images.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        if 1 in mask and pad in ids[mask.index(1):]:
            raise DataError(f"{self.table.locate(i, self.cfg.image_key)}: an image of this row comes after the first trained "
                            f"(assistant) token; images are read in the prompt only, so put every <image> marker in the "
                            f"messages before the first trained assistant turn")
        # never cut (data.truncation): a cut would take image tokens or the reply; refused when measured at build time
        if len(ids) > self.limit:
            raise DataError(f"{self.table.locate(i, column)}: the sequence with its image tokens is {len(ids)} tokens, over "
                            f"{self.limit_key} {self.limit}; cutting it could cut its images or its reply, so raise "
                            f"{self.limit_key} or lower data.image_max_pixels")
        return ids, mask, column, vision

    def length(self, i: int) -> tuple[int, str]:
        images = self._images(i)
        if images:
            ids, _, column, _ = self._vision_sequence(i, images)
            return len(ids), column
        messages, loss_from, column = self._conversation(i)
        return len(self._encode(i, messages, loss_from, column)[0]), column

    def __getitem__(self, k: int) -> SFTExample:
        i = self._row_index(k)
        images = self._images(i)
        if not images:
            return self._sequence(i, *self._conversation(i))
        ids, mask, _, vision = self._vision_sequence(i, images)
        return SFTExample(index=i, input_ids=ids, loss_mask=mask, vision=vision)


class DPODataset(_RowDataset):
    """Preference pairs: one prompt completed by `chosen_key` and by `rejected_key`."""

    def _sides(self, i: int) -> tuple[list[Message], list[Message], list[Message]]:
        _, prompt, _ = rows.prompt_cell(self.table, i, self.cfg)
        prompt = self._with_system(i, prompt)
        chosen = rows.completion(self.table, i, self.cfg.chosen_key, "data.chosen_key")
        rejected = rows.completion(self.table, i, self.cfg.rejected_key, "data.rejected_key")
        return prompt, chosen, rejected

    unit = "pairs"

    def check_row(self, i: int) -> None:
        self._sides(i)

    def length(self, i: int) -> tuple[int, str]:
        """The longer side of the pair (each side is held against data.max_length)."""
        prompt, chosen, rejected = self._sides(i)
        sides = ((prompt + chosen, self.cfg.chosen_key), (prompt + rejected, self.cfg.rejected_key))
        return max((len(self._encode(i, messages, len(prompt), column)[0]), column) for messages, column in sides)

    def __getitem__(self, k: int) -> DPOExample:
        i = self._row_index(k)
        prompt, chosen, rejected = self._sides(i)
        return DPOExample(
            index=i,
            chosen=self._sequence(i, prompt + chosen, len(prompt), self.cfg.chosen_key),
            rejected=self._sequence(i, prompt + rejected, len(prompt), self.cfg.rejected_key),
        )


def _load(cfg: DataConfig, files: str | Iterable[str], split: str) -> tuple[list[str], str]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLITS)}")
    if split == "val" and cfg.val_file_keys and cfg.custom_cls.path is not None:
        raise ConfigError("data.val_file_keys renames the columns of posttrain's own rows; a data.custom_cls dataset reads "
                          "its rows itself, so unset data.val_file_keys (or map the columns in the class)")
    return as_file_list(files, cfg.dataset_dir), SPLITS[split]


def _base_dir(cfg: DataConfig) -> Path | None:
    return Path(cfg.dataset_dir).expanduser() if cfg.dataset_dir else None


# Why a row's images cannot be trained, by what reads it (refuse_media).
NO_IMAGES_SFT = ("posttrain's SFT and DPO stages train text sequences; image rows train in RL stages (prompts, and the "
                 "mix losses' expert rows: algorithm.mix.image_key) and distillation stages with a vision-language policy "
                 "(Qwen2-VL, Qwen2.5-VL)")
NO_IMAGES_TEXT_MODEL = ("the policy (model.path) is a text-only model, which has no vision tower to read them; use a "
                        "vision-language checkpoint (Qwen2-VL, Qwen2.5-VL)")
NO_VIDEOS = ("posttrain reads videos in RL prompts only (with a vision-language policy, Qwen2-VL or Qwen2.5-VL); "
             "its SFT, DPO, distillation and expert rows carry images at most")
NO_VIDEOS_TEXT_MODEL = ("the policy (model.path) is a text-only model, which has no vision tower to read them; use a "
                        "vision-language checkpoint (Qwen2-VL, Qwen2.5-VL)")


def _table(cfg: DataConfig, files: str | Iterable[str], setting: str, images_refused: str | None = NO_IMAGES_SFT,
           videos_refused: str | None = NO_VIDEOS) -> RowTable:
    """The rows of every entry (files, dataset folders, dataset names: posttrain.data.sources); rows
    with videos, and rows with images when `images_refused` says why, are refused rather than trained as text."""
    entries = as_file_list(files)
    # validation entries may name their own columns (data.val_file_keys), checked before any file is read
    renames = own_columns(cfg, entries) if setting == SPLITS["val"] else {}
    table = load_table(entries, setting=setting, base_dir=cfg.dataset_dir)
    rename_entry_columns(table, renames, entries)
    refuse_media(table, cfg, images_refused, videos_refused)
    return table


def refuse_media(table: RowTable, cfg: DataConfig, images_refused: str | None = NO_IMAGES_SFT,
                 videos_refused: str | None = NO_VIDEOS) -> None:
    """A row whose data.video_key column holds something (not null, not empty) while `videos_refused`
    gives the reason, or whose data.image_key column does while `images_refused` does, is one
    DataError naming the file, row and key, instead of the media being dropped without a word."""
    checks = [("data.video_key", cfg.video_key, "videos", videos_refused)] if videos_refused is not None else []
    if images_refused is not None:
        checks.insert(0, ("data.image_key", cfg.image_key, "images", images_refused))
    for key, column, kind, why in checks:
        for i, row in enumerate(table.rows):
            if has_media(row.get(column)):
                raise DataError(f"{table.locate(i, column)}: this row has {kind} ({key}: {column}); {why}. Drop the "
                                f"column, or set {key} to a column the data does not have")


def build_rl_dataset(
    cfg: DataConfig, files: str | Iterable[str], tokenizer: Any, *, split: str = "train", images: ImageInputs | None = None,
) -> RLDataset:
    """The RL prompt dataset of `files` (or the user's `data.custom_cls`), overlong prompts
    dropped when `data.filter_overlong_prompts` is set. `images`: a vision-language policy's image
    side; without it a row with images is refused."""
    paths, setting = _load(cfg, files, split)
    if cfg.custom_cls.path is not None:
        from posttrain.data.custom import build_custom_dataset

        return build_custom_dataset(cfg, paths, tokenizer, RLExample)
    table = _table(cfg, files, setting, images_refused=None if images is not None else NO_IMAGES_TEXT_MODEL,
                   videos_refused=None if images is not None else NO_VIDEOS_TEXT_MODEL)
    dataset = RLDataset(table, make_formatter(cfg, tokenizer), cfg)
    dataset.images = images
    if setting == SPLITS["val"] and cfg.val_file_settings:
        entries = as_file_list(files)
        dataset.entry_formatters = entry_formatters(cfg, entries, tokenizer)
        where = {os.path.expanduser(e): k for k, e in enumerate(entries)}
        dataset.entry_overlong = {where[os.path.expanduser(e)]: own.overlong_penalty for e, own in cfg.val_file_settings.items()
                                  if own.overlong_penalty is not None and os.path.expanduser(e) in where}
    return check_lengths(dataset, cfg.truncation, drop=cfg.filter_overlong_prompts,
                         workers=cfg.filter_overlong_prompts_workers, setting=setting)


def build_sft_dataset(
    cfg: DataConfig, files: str | Iterable[str], tokenizer: Any, *, split: str = "train", images: ImageInputs | None = None,
    images_refused: str = NO_IMAGES_SFT,
) -> SFTDataset:
    """The SFT dataset of `files` (or the user's `data.custom_cls`). `images`: a vision-language
    policy's image side, which reads the rows' images (the mix losses' expert rows); without it a
    row with images is refused for the reason `images_refused`."""
    refuse_prompt_only(cfg, "SFT")
    paths, setting = _load(cfg, files, split)
    if cfg.custom_cls.path is not None:
        from posttrain.data.custom import build_custom_dataset

        return build_custom_dataset(cfg, paths, tokenizer, SFTExample)
    table = _table(cfg, files, setting, images_refused=None if images is not None else images_refused)
    dataset = SFTDataset(table, make_formatter(cfg, tokenizer), cfg)
    dataset.images = images
    return check_lengths(dataset, cfg.truncation, workers=cfg.filter_overlong_prompts_workers, setting=setting)


def build_dpo_dataset(cfg: DataConfig, files: str | Iterable[str], tokenizer: Any, *, split: str = "train") -> DPODataset:
    """The DPO pair dataset of `files` (or the user's `data.custom_cls`)."""
    refuse_prompt_only(cfg, "DPO")
    paths, setting = _load(cfg, files, split)
    if cfg.custom_cls.path is not None:
        from posttrain.data.custom import build_custom_dataset

        return build_custom_dataset(cfg, paths, tokenizer, DPOExample)
    dataset = DPODataset(_table(cfg, files, setting), make_formatter(cfg, tokenizer), cfg)
    return check_lengths(dataset, cfg.truncation, workers=cfg.filter_overlong_prompts_workers, setting=setting)
