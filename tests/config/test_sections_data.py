"""Schema checks of the `data` section: docs, refs, and that every data parameter of the reference
guides has a home (a field's refs or the module's UNSUPPORTED table). That each field without `todo`
changes what a run does is tests/trainer/test_honoured_keys.py's job."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import posttrain.config.sections as sections_pkg
from posttrain.config.fields import FRAMEWORKS, iter_fields
from posttrain.config.schema import Config
from posttrain.config.mapping import mapping_rows
from posttrain.config.sections import data
from posttrain.config.sections.data import DataConfig
from posttrain.config.validate import validate
from posttrain.errors import ConfigError

# Data parameters named in the verl, ROLL and Trinity-RFT configuration guides and example configs.
REFERENCE_KEYS = [
    "verl:data.train_files", "verl:data.val_files", "verl:data.prompt_key", "verl:data.max_prompt_length",
    "verl:data.max_response_length", "verl:data.train_batch_size", "verl:data.val_batch_size",
    "verl:data.return_raw_chat", "verl:data.return_full_prompt",
    "verl:data.shuffle", "verl:data.validation_shuffle", "verl:data.filter_overlong_prompts",
    "verl:data.filter_overlong_prompts_workers", "verl:data.truncation", "verl:data.image_key",
    "verl:data.video_key", "verl:data.trust_remote_code", "verl:data.custom_cls.path", "verl:data.custom_cls.name",
    "verl:data.reward_fn_key", "verl:data.use_shm", "verl:data.response_key", "verl:data.max_length",
    "verl:data.multiturn.messages_key", "verl:data.multiturn.enable", "verl:data.chat_template",
    "roll:actor_train.data_args.file_name", "roll:actor_train.data_args.prompt", "roll:actor_train.data_args.messages",
    "roll:actor_train.data_args.template", "roll:actor_train.data_args.domain_interleave_probs",
    "roll:actor_train.data_args.dataset_dir", "roll:actor_train.data_args.interleave_probs",
    "roll:actor_train.data_args.preprocessing_num_workers", "roll:validation.data_args.file_name",
    "roll:prompt_length", "roll:response_length", "roll:rollout_batch_size", "roll:val_batch_size",
]


def _data_fields():
    return [(path.removeprefix("data."), info) for path, info in iter_fields(Config) if path.startswith("data.") and not path == "data.custom_cls"]


def _all_unsupported() -> dict[str, str]:
    out = {}
    for mod in pkgutil.iter_modules(sections_pkg.__path__):
        out.update(getattr(importlib.import_module(f"posttrain.config.sections.{mod.name}"), "UNSUPPORTED", {}))
    return out


def test_every_field_has_a_one_line_doc_and_well_formed_refs():
    for name, info in _data_fields():
        assert info.doc and "\n" not in info.doc, name
        for ref in info.refs:
            framework, _, key = ref.partition(":")
            assert framework in FRAMEWORKS and key and not key.startswith(".") and " " not in key, (name, ref)


def test_my_refs_are_claimed_nowhere_else():
    mine = {ref for _, info in _data_fields() for ref in info.refs}
    others = {ref for path, info in iter_fields(Config) if not path.startswith("data.") for ref in info.refs}
    assert not mine & others
    assert not mine & set(_all_unsupported())
    assert not set(data.UNSUPPORTED) & others


@pytest.mark.parametrize("key", REFERENCE_KEYS)
def test_reference_data_keys_have_a_home(key):
    """In this section, or wherever docs/config-mapping.md puts it (data.trust_remote_code: the model's switch)."""
    mine = {ref for _, info in _data_fields() for ref in info.refs}
    documented = {f"{r.framework}:{r.key}" for r in mapping_rows()}
    assert key in mine or key in data.UNSUPPORTED or key in documented


def test_validate_accepts_one_path_and_the_implemented_fields():
    cfg = validate({"data": {
        "train_files": "train.parquet", "truncation": "left", "messages_key": "messages", "val_batch_size": 4,
        "custom_cls": {"path": "my.py", "name": "Mine"}, "apply_chat_template_kwargs": {"enable_thinking": False},
        "filter_overlong_prompts_workers": 2,
    }})
    assert cfg.data.train_files == ["train.parquet"]
    assert (cfg.data.truncation, cfg.data.messages_key, cfg.data.val_batch_size) == ("left", "messages", 4)
    assert cfg.data.custom_cls.name == "Mine"


def test_validate_refuses_bad_values():
    with pytest.raises(ConfigError) as err:
        validate({"data": {"truncation": "center", "image_key": "pics", "filter_overlong_prompts_workers": 0}})
    message = str(err.value)
    assert "data.truncation" in message and "center" in message
    assert "image_key" not in message  # a column name: rows with images are refused when the data loads
    assert "data.filter_overlong_prompts_workers" in message


def test_defaults_match_verl():
    d = DataConfig()
    assert (d.prompt_key, d.truncation, d.shuffle, d.filter_overlong_prompts, d.filter_overlong_prompts_workers) == ("prompt", "error", True, False, 1)
    assert (d.return_raw_chat, d.return_full_prompt, d.reward_fn_key, d.image_key) == (False, False, "data_source", "images")
