"""The LoRA keys of verl, ROLL and Trinity-RFT land on posttrain's model.lora_* / critic.model.lora_*
fields with each framework's semantics (ROLL: on with lora_target, rank 8 and alpha twice the rank
by default; Trinity-RFT: one adapter, rank and alpha 32 by default), what has no equivalent is
refused by name, and LoRA options without LoRA on are refused."""

from __future__ import annotations

import pytest

from posttrain.config import ConfigError, load_config
from posttrain.config.dialects import translate
from posttrain.config.dialects.lora import roll_targets


def native(raw, dialect):
    out, report = translate(raw, dialect)
    refused = {e.key: e.reason for e in report.of("refused")}
    dropped = {e.key: e.reason for e in report.of("dropped")}
    return out, refused, dropped


def test_verl_lora_keys_translate_one_to_one():
    raw = {"actor_rollout_ref": {
        "model": {"lora_rank": 32, "lora_alpha": 64, "target_modules": ["q_proj", "v_proj"], "exclude_modules": ".*layers\\.0\\..*",
                  "lora_adapter_path": "/adapters/sft", "use_shm": True},
        "rollout": {"layered_summon": True}},
        "critic": {"model": {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear", "use_shm": True}}}
    out, refused, _ = native(raw, "verl")
    assert refused == {}
    assert out["model"] == {"lora_rank": 32, "lora_alpha": 64, "target_modules": ["q_proj", "v_proj"], "exclude_modules": ".*layers\\.0\\..*",
                            "lora_adapter_path": "/adapters/sft", "use_shm": True}
    assert out["rollout"] == {"layered_summon": True}
    assert out["critic"]["model"] == {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear", "use_shm": True}
    sft, refused, _ = native({"model": {"lora_rank": 16, "lora_alpha": 32, "target_modules": "all-linear"}}, "verl")  # the SFT trainer's keys
    assert refused == {} and sft["model"] == {"lora_rank": 16, "lora_alpha": 32, "target_modules": "all-linear"}


def test_roll_turns_lora_on_with_lora_target_and_fills_its_defaults():
    out, refused, dropped = native({"actor_train": {"model_args": {"lora_target": "q_proj,k_proj, v_proj"}},
                                    "actor_infer": {"model_args": {"lora_target": "q_proj,k_proj,v_proj", "lora_rank": 8}}}, "roll")
    assert refused == {}
    assert out["model"] == {"target_modules": ["q_proj", "k_proj", "v_proj"], "lora_rank": 8, "lora_alpha": 16}
    assert set(dropped) == {"actor_infer.model_args.lora_target", "actor_infer.model_args.lora_rank"}
    assert "merged weights" in dropped["actor_infer.model_args.lora_rank"]
    out, refused, _ = native({"actor_train": {"model_args": {"lora_target": "all-linear", "lora_rank": 32, "lora_alpha": 32, "lora_dropout": 0.0}},
                              "critic": {"model_args": {"lora_target": ".*proj", "lora_rank": 4}}}, "roll")
    assert refused == {}
    assert out["model"] == {"target_modules": "all-linear", "lora_rank": 32, "lora_alpha": 32}
    assert out["critic"]["model"] == {"target_modules": ".*proj", "lora_rank": 4, "lora_alpha": 8}


def test_roll_lora_keys_without_lora_target_are_read_by_nothing_and_what_has_no_equivalent_is_refused():
    out, refused, dropped = native({"actor_train": {"model_args": {"lora_rank": 8, "lora_alpha": 16}}}, "roll")
    assert "model" not in out and refused == {}
    assert dropped["actor_train.model_args.lora_rank"].startswith("LoRA is off in ROLL without lora_target")
    _, refused, _ = native({"actor_train": {"model_args": {"lora_target": "all-linear,all-embedding", "lora_dropout": 0.05}}}, "roll")
    assert "all-embedding" in refused["actor_train.model_args.lora_target"]
    assert "no dropout" in refused["actor_train.model_args.lora_dropout"]
    _, refused, _ = native({"actor_infer": {"model_args": {"lora_rank": 8}}}, "roll")
    assert refused["actor_infer.model_args.lora_rank"].startswith("LoRA on the rollout engine alone")
    with pytest.raises(ValueError, match="all-linear mixed with other names"):
        roll_targets("all-linear,lm_head")


def test_trinity_lora_configs_is_one_adapter_with_trinity_defaults():
    out, refused, dropped = native({"model": {"lora_configs": [{"name": "policy", "target_modules": "all-linear", "lora_dtype": "auto"}]}}, "trinity")
    assert refused == {}
    assert out["model"] == {"target_modules": "all-linear", "lora_rank": 32, "lora_alpha": 32}
    assert {"model.lora_configs[0].name", "model.lora_configs[0].lora_dtype"} <= set(dropped)
    out, refused, _ = native({"model": {"lora_configs": [{"path": "/adapters/a", "exclude_modules": "lm_head", "lora_rank": 16}]}}, "trinity")
    assert refused == {}
    assert out["model"] == {"lora_adapter_path": "/adapters/a", "exclude_modules": "lm_head", "lora_rank": 16}  # the adapter's alpha
    _, refused, _ = native({"model": {"lora_configs": [{"lora_rank": 8}, {"lora_rank": 8}]}}, "trinity")
    assert refused["model.lora_configs"].startswith("expected a list of one adapter")
    _, refused, dropped = native({"model": {"lora_configs": [{"lora_dtype": "bfloat16", "fully_sharded": True}]}}, "trinity")
    assert set(refused) == {"model.lora_configs[0].fully_sharded"}
    assert dropped["model.lora_configs[0].lora_dtype"].startswith("read by nothing in Trinity-RFT")


def test_a_translated_lora_config_loads(tmp_path):
    path = tmp_path / "roll.yaml"
    path.write_text(f"pretrain: {tmp_path}/model\nactor_train:\n  model_args: {{lora_target: 'q_proj,v_proj', lora_rank: 16}}\n")
    cfg = load_config(path)
    assert (cfg.model.lora_rank, cfg.model.lora_alpha, cfg.model.target_modules) == (16, 32.0, ["q_proj", "v_proj"])


def test_roll_autocast_adapter_dtype_is_the_trained_roles_and_read_by_nothing_elsewhere():
    out, refused, dropped = native({
        "actor_train": {"model_args": {"lora_target": "q_proj", "autocast_adapter_dtype": False}},
        "critic": {"model_args": {"lora_target": "q_proj", "autocast_adapter_dtype": True}},
        "actor_infer": {"model_args": {"autocast_adapter_dtype": False}},
        "reference": {"model_args": {"lora_target": "q_proj", "lora_rank": 4, "autocast_adapter_dtype": False}}}, "roll")
    assert refused == {}
    assert out["model"]["autocast_adapter_dtype"] is False and out["critic"]["model"]["autocast_adapter_dtype"] is True
    assert dropped["actor_infer.model_args.autocast_adapter_dtype"] == "read only where ROLL builds a model it trains"
    _, _, engine = native({"actor_infer": {"strategy_args": {"strategy_name": "vllm"}, "model_args": {"autocast_adapter_dtype": False}}}, "roll")
    assert engine["actor_infer.model_args.autocast_adapter_dtype"] == "read only where ROLL builds a model it trains"  # any strategy
    assert {k for k in dropped if k.startswith("reference.")} == {
        "reference.model_args.lora_target", "reference.model_args.lora_rank", "reference.model_args.autocast_adapter_dtype"}
    assert "the reference is not trained" in dropped["reference.model_args.lora_rank"]
    _, refused, dropped = native({"actor_train": {"model_args": {"autocast_adapter_dtype": False}}}, "roll")
    assert refused == {} and dropped["actor_train.model_args.autocast_adapter_dtype"].startswith("LoRA is off in ROLL")


@pytest.mark.parametrize("overrides, message", [
    (["model.lora_alpha=32"], "model.lora_alpha: read only with LoRA on, and model.lora_rank is 0"),
    (["model.target_modules=[q_proj]", "model.exclude_modules=[k_proj]"], "model.target_modules, model.exclude_modules: read only with LoRA on"),
    (["critic.model.lora_alpha=8"], "critic.model.lora_alpha: read only with LoRA on, and critic.model.lora_rank is 0"),
    (["model.autocast_adapter_dtype=false"], "model.autocast_adapter_dtype: read only with LoRA on"),
    (["model.lora_rank=8", "trainer.save_hf_checkpoint=never", "trainer.save_freq=1"], "a LoRA run's checkpoints hold only the adapter"),
])
def test_lora_options_need_lora_on(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
    load_config(None, ["model.lora_rank=8", *[o for o in overrides if "never" not in o and "critic" not in o]])
