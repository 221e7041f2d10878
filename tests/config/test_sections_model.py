"""Schema checks of the `model` section.

Every field has a one-line doc, well-formed and unique refs, defaults inside their own bounds and
choices; every model key of the reference guides has a home: a field's refs, the NEGATED_REFS table
or the UNSUPPORTED table. That each field without `todo` changes what a run does is
tests/trainer/test_honoured_keys.py's job.
"""

from __future__ import annotations

import dataclasses
import operator

import pytest

from posttrain.config.fields import FRAMEWORKS, iter_fields
from posttrain.config.sections import model
from posttrain.config.sections.model import NEGATED_REFS, UNSUPPORTED, ModelConfig


def _fields():
    return list(iter_fields(ModelConfig))


def _refs() -> list[str]:
    return [ref for _, info in _fields() for ref in info.refs]


def test_section_is_frozen_with_a_docstring():
    cfg = ModelConfig()
    assert model.ModelConfig.__doc__.strip()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.path = "x"  # type: ignore[misc]


def test_every_field_has_a_one_line_doc():
    for path, info in _fields():
        assert info.doc and "\n" not in info.doc, path


def test_refs_are_well_formed_unique_and_not_also_unsupported():
    refs = _refs()
    for ref in refs:
        framework, _, key = ref.partition(":")
        assert framework in FRAMEWORKS and key and " " not in key and not key.startswith("."), ref
    assert len(refs) == len(set(refs)), sorted({r for r in refs if refs.count(r) > 1})
    assert not set(refs) & set(UNSUPPORTED)
    assert not set(refs) & set(NEGATED_REFS)


def test_unsupported_and_negated_tables_are_well_formed():
    for key, reason in UNSUPPORTED.items():
        framework, _, dotted = key.partition(":")
        assert framework in FRAMEWORKS and dotted and " " not in dotted, key
        assert reason.strip(), key
    fields = {info.name: info for _, info in _fields()}
    for key, target in NEGATED_REFS.items():
        assert key.partition(":")[0] in FRAMEWORKS
        assert fields[target].type is bool and not fields[target].todo


def test_defaults_are_within_their_bounds_and_choices():
    ops = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}
    for path, info in _fields():
        value = info.default()
        if info.choices is not None:
            assert value in info.choices, path
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for op, bound in info.bounds.items():
                assert ops[op](value, bound), path


def test_dtype_choices_match_the_loader():
    from posttrain.models.loading import DTYPES

    assert set(model.DTYPES) == set(DTYPES)


@pytest.mark.parametrize("key", [
    "verl:actor_rollout_ref.model.path", "verl:actor_rollout_ref.model.external_lib",
    "verl:actor_rollout_ref.model.override_config", "verl:actor_rollout_ref.model.enable_gradient_checkpointing",
    "verl:actor_rollout_ref.model.enable_activation_offload", "verl:actor_rollout_ref.model.trust_remote_code",
    "verl:actor_rollout_ref.model.use_remove_padding", "verl:actor_rollout_ref.model.use_liger",
    "verl:actor_rollout_ref.model.use_fused_kernels", "verl:actor_rollout_ref.model.fused_kernel_options.impl_backend",
    "verl:actor_rollout_ref.model.use_shm", "verl:actor_rollout_ref.model.override_config.moe_config.freeze_moe_router",
    "verl:model.partial_pretrain", "verl:model.fsdp_config.model_dtype", "verl:model.external_lib",
    "verl:model.enable_gradient_checkpointing", "verl:model.trust_remote_code", "verl:model.lora_rank",
    "verl:model.lora_alpha", "verl:model.target_modules", "verl:model.use_liger", "verl:data.tokenizer",
    "roll:pretrain", "roll:actor_train.model_args.model_name_or_path", "roll:actor_train.model_args.dtype",
    "roll:actor_train.model_args.disable_gradient_checkpointing", "roll:actor_train.model_args.attn_implementation",
    "roll:actor_train.model_args.model_type",
    "trinity:model.model_path", "trinity:model.custom_chat_template", "trinity:model.chat_template_path",
    "trinity:model.max_model_len", "trinity:model.lora_configs", "trinity:model.rope_scaling",
    "trinity:model.rope_theta", "trinity:model.tinker.enable",
])
def test_reference_key_has_a_home(key):
    assert key in set(_refs()) | set(UNSUPPORTED) | set(NEGATED_REFS), f"{key} has no home"
