"""verl's Megatron trainer (`--config-name ppo_megatron_trainer`) on posttrain's FSDP2.

The line starts from verl's Megatron tree (posttrain/config/dialects/verl_megatron_defaults.yaml);
its `megatron` sections and Megatron optimizer translate as posttrain.config.dialects.verl_megatron
says. Translation rules are checked on the report of `verl_launch.launch`, the CLI on a tiny model.
"""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.config.dialects import verl_launch
from posttrain.config.dialects.verl_trees import clean
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

MEGATRON = "config/ppo_megatron_trainer.yaml"  # --config-path=config --config-name=ppo_megatron_trainer
A, R, C = "actor_rollout_ref.actor.megatron.", "actor_rollout_ref.ref.megatron.", "critic.megatron."
OTC = A + "override_transformer_config."


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verl_megatron")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=16, test=4)
    return root


def line(root: Path) -> list[str]:
    return [
        "algorithm.adv_estimator=grpo", f"data.train_files={root}/data/train.parquet", f"data.val_files={root}/data/test.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=32", "data.max_response_length=8", f"actor_rollout_ref.model.path={root}/model",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.n=4", "trainer.logger=[console]", "trainer.total_epochs=1",
    ]


# Launch lines whose keys do not act on each other, planned once each (the cases below read their reports).
OPT = "actor_rollout_ref.actor.optim."
SCENARIOS = {
    "layout": (A + "tensor_model_parallel_size=8", A + "expert_model_parallel_size=8", A + "use_dist_checkpointing=true",
               f"+{OTC}moe_token_dispatcher_type=flex", f"+{OTC}num_layers_in_last_pipeline_stage=6", f"+{OTC}moe_router_load_balancing_type=none",
               A + "context_parallel_size=2", R + "context_parallel_size=2", C + "context_parallel_size=2",
               A + "grad_offload=true", C + "optimizer_offload=true", R + "optimizer_offload=true",
               f"+{OTC}recompute_granularity=full", f"+{OTC}recompute_method=uniform",
               "critic.megatron.override_transformer_config.recompute_granularity=selective", "actor_rollout_ref.model.enable_gradient_checkpointing=true",
               A + "seed=7", R + "seed=7", A + "dtype=bfloat16", OPT + "betas=[0.9,0.95]",
               f"+{OPT}override_optimizer_config.adam_beta2=0.95", f"+{OPT}override_optimizer_config.optimizer_cpu_offload=true"),
    # the router's load-balancing loss: Megatron reads the coefficient only with a balancing type, verl's none
    "unbalanced": (f"+{OTC}moe_aux_loss_coeff=0.01",),
    "balanced": (f"+{OTC}moe_router_load_balancing_type=aux_loss", f"+{OTC}moe_aux_loss_coeff=0.01"),
    "balanced-by-model": (f"+{OTC}moe_router_load_balancing_type=aux_loss",),
    "seq-balanced": (f"+{OTC}moe_router_load_balancing_type=seq_aux_loss", f"+{OTC}moe_aux_loss_coeff=0.01"),
    # Megatron's scheduler decays to an absolute min_lr: posttrain's min_lr_ratio (a constant schedule never reads it)
    "decay": (OPT + "lr_decay_style=cosine", OPT + "min_lr=2e-7", "critic.optim.min_lr=1e-7"),
    "decay-too-low": (OPT + "lr_decay_style=linear", OPT + "min_lr=1e-5"),
    # the router z-loss: Megatron adds it whatever the balancing type; the reference trains nothing
    "z-loss": (f"+{OTC}moe_z_loss_coeff=0.001", "+critic.megatron.override_transformer_config.moe_z_loss_coeff=0.002",
               "+actor_rollout_ref.ref.megatron.override_transformer_config.moe_z_loss_coeff=0.001"),
    # the expert bias: frozen at rate 0 (the model's own routing), moved toward even loads otherwise
    "frozen-bias": (f"+{OTC}moe_router_enable_expert_bias=true", f"+{OTC}moe_router_bias_update_rate=0",
                    "+actor_rollout_ref.ref.megatron.override_transformer_config.moe_router_enable_expert_bias=true"),
    "moving-bias": (f"+{OTC}moe_router_enable_expert_bias=true",),
    "no-bias": (f"+{OTC}moe_router_enable_expert_bias=false", f"+{OTC}moe_router_bias_update_rate=0.01"),
    "critic-balanced": ("+critic.megatron.override_transformer_config.moe_router_load_balancing_type=aux_loss",),
    "own": (R + "context_parallel_size=4", A + "param_offload=false", A + "grad_offload=true", "actor_rollout_ref.model.use_remove_padding=true",
            A + "use_remove_padding=false"),
    "refused": (A + "seed=7", R + "seed=8", A + "dtype=float16", f"+{OTC}moe_z_loss_coeff=-1", f"+{OTC}moe_expert_capacity_factor=1.0",
                f"+{OTC}hidden_dropout=0.1", f"+{OTC}some_new_option=1",
                f"+{A}override_mcore_model_config.x=1", f"+{OPT}override_optimizer_config.decoupled_weight_decay=false",
                "actor_rollout_ref.model.lora.rank=8"),
}


@functools.lru_cache(maxsize=None)
def entries(scenario: str) -> dict[str, tuple[str, str | None, object, str]]:
    """foreign key -> (status, native, value, reason) of the Megatron launch line `SCENARIOS[scenario]`
    (a key translated onto two posttrain keys: its first entry)."""
    _, report, _ = verl_launch.launch(MEGATRON, list(SCENARIOS[scenario]))
    out: dict[str, tuple[str, str | None, object, str]] = {}
    for e in report.entries:
        out.setdefault(e.key, (e.status, e.native, e.value, e.reason))
    return out


def test_the_megatron_tree_is_verls_with_its_own_defaults():
    fsdp, megatron = verl_launch.defaults_tree(), verl_launch.defaults_tree("ppo_megatron_trainer")
    actor = megatron["actor_rollout_ref"]["actor"]
    assert (actor["strategy"], actor["optim"]["optimizer"], actor["megatron"]["tensor_model_parallel_size"]) == ("megatron", "adam", 1)
    assert actor["megatron"]["override_transformer_config"]["recompute_modules"] == ["core_attn"]
    assert "megatron" not in fsdp["actor_rollout_ref"]["actor"] and "fsdp_config" not in actor
    assert clean({"a": {"_target_": "x", "b": "???", "c": [1]}}) == {"a": {"b": None, "c": [1]}}  # how both files are made


def test_a_megatron_launch_line_plans_with_verls_global_mini_batch(inputs, capsys):
    words = [*line(inputs), A + "tensor_model_parallel_size=2", A + "pipeline_model_parallel_size=2", A + "expert_model_parallel_size=4"]
    assert main(["config", "plan", "--config-path=config", "--config-name=ppo_megatron_trainer", *words]) == 0
    out = capsys.readouterr().out
    # the layout keys move no numbers: 2 prompts x 4 responses per mini-batch, as without them
    assert "actor mini-batches/epoch        2" in out and "= 8 responses each" in out
    assert main(["config", "show", "--config-path=config", "--config-name=ppo_megatron_trainer.yaml", *words]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    # Megatron's adam: AdamW, no weight decay on biases and norms (a default of the Megatron tree)
    assert (shown["actor"]["optim"]["optimizer"], shown["actor"]["optim"]["decay_bias_and_norm"]) == ("adamw", False)
    assert (shown["critic"]["optim"]["optimizer"], shown["critic"]["optim"]["decay_bias_and_norm"]) == ("adamw", False)
    assert main(["config", "show", *line(inputs), "--dialect", "verl"]) == 0  # the FSDP tree keeps torch's AdamW on every parameter
    assert yaml.safe_load(capsys.readouterr().out)["actor"]["optim"]["decay_bias_and_norm"] is True


def test_a_key_the_megatron_tree_lacks_is_refused_as_hydra_does(inputs, capsys):
    assert main(["config", "plan", "--config-path=config", "--config-name=ppo_megatron_trainer", *line(inputs),
                 A + "tensor_model_paralel_size=2", "actor_rollout_ref.actor.fsdp_config.param_offload=true"]) == 2
    err = capsys.readouterr().err
    assert f"command line override '{A}tensor_model_paralel_size=2': verl's Megatron trainer config has no key {A}tensor_model_paralel_size (did you mean {A}tensor_model_parallel_size" in err
    assert "verl's Megatron trainer config has no key actor_rollout_ref.actor.fsdp_config.param_offload" in err  # an FSDP key
    assert main(["config", "plan", "--dialect", "verl", *line(inputs), A + "tensor_model_parallel_size=2"]) == 2
    assert f"verl's trainer config has no key {A}tensor_model_parallel_size" in capsys.readouterr().err  # the FSDP tree has none
    # Hydra appends (+) over a key that holds null, not over one with a value
    assert main(["config", "plan", "--config-path=config", "--config-name=ppo_megatron_trainer", *line(inputs),
                 f"+{OTC}recompute_granularity=full", f"+{A}seed=3"]) == 2
    err = capsys.readouterr().err
    assert f"already has {A}seed" in err and "recompute_granularity" not in err


def test_a_users_yaml_on_the_megatron_tree(inputs, tmp_path, capsys):
    (tmp_path / "my_megatron.yaml").write_text(textwrap.dedent("""\
        hydra: {searchpath: ["file://verl/trainer/config"]}
        defaults: [ppo_megatron_trainer, _self_]
        actor_rollout_ref: {actor: {megatron: {param_offload: true, optimizer_offload: true}}}
    """))
    assert main(["config", "show", f"--config-path={tmp_path}", "--config-name=my_megatron", *line(inputs)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["actor"]["fsdp_config"]["param_offload"] is True and shown["actor"]["fsdp_config"]["optimizer_offload"] is True


@pytest.mark.parametrize("scenario, key, expected", [
    # layout: dropped, whatever the value
    ("layout", A + "tensor_model_parallel_size", ("dropped", None)),
    ("layout", A + "expert_model_parallel_size", ("dropped", None)),
    ("layout", A + "use_dist_checkpointing", ("dropped", None)),
    ("layout", OTC + "moe_token_dispatcher_type", ("dropped", None)),
    ("layout", OTC + "num_layers_in_last_pipeline_stage", ("dropped", None)),
    ("layout", OTC + "moe_router_load_balancing_type", ("dropped", None)),
    ("unbalanced", OTC + "moe_aux_loss_coeff", ("dropped", None)),
    ("balanced", OTC + "moe_aux_loss_coeff", ("translated", "actor.moe_aux_loss_coef", 0.01)),
    ("balanced", OTC + "moe_router_load_balancing_type", ("dropped", None)),
    ("balanced-by-model", OTC + "moe_router_load_balancing_type", ("translated", "actor.moe_aux_loss_coef", None)),
    ("seq-balanced", OTC + "moe_router_load_balancing_type", ("refused", None)),
    ("seq-balanced", OTC + "moe_aux_loss_coeff", ("refused", None)),
    ("decay", OPT + "min_lr", ("translated", "actor.optim.min_lr_ratio", pytest.approx(0.2))),
    ("decay", "critic.optim.min_lr", ("dropped", None)),  # the critic's schedule stays constant
    ("decay-too-low", OPT + "min_lr", ("refused", "actor.optim.min_lr_ratio")),
    ("z-loss", OTC + "moe_z_loss_coeff", ("translated", "actor.moe_z_loss_coef", 0.001)),
    ("z-loss", "critic.megatron.override_transformer_config.moe_z_loss_coeff", ("translated", "critic.moe_z_loss_coef", 0.002)),
    ("z-loss", "actor_rollout_ref.ref.megatron.override_transformer_config.moe_z_loss_coeff", ("dropped", None)),
    ("frozen-bias", OTC + "moe_router_enable_expert_bias", ("dropped", None)),
    ("frozen-bias", OTC + "moe_router_bias_update_rate", ("dropped", None)),
    ("frozen-bias", "actor_rollout_ref.ref.megatron.override_transformer_config.moe_router_enable_expert_bias", ("dropped", None)),
    ("moving-bias", OTC + "moe_router_enable_expert_bias", ("refused", None)),  # Megatron's rate 1e-3 moves it
    ("no-bias", OTC + "moe_router_enable_expert_bias", ("dropped", None)),
    ("no-bias", OTC + "moe_router_bias_update_rate", ("dropped", None)),
    ("critic-balanced", "critic.megatron.override_transformer_config.moe_router_load_balancing_type", ("translated", "critic.moe_aux_loss_coef", None)),
    # context parallelism -> Ulysses; the reference follows the actor's unless told otherwise
    ("layout", A + "context_parallel_size", ("translated", "actor.ulysses_sequence_parallel_size", 2)),
    ("layout", R + "context_parallel_size", ("dropped", None)),
    ("own", R + "context_parallel_size", ("translated", "ref.ulysses_sequence_parallel_size", 4)),
    ("layout", C + "context_parallel_size", ("translated", "critic.ulysses_sequence_parallel_size", 2)),
    # offload: gradients go with their parameters in FSDP2
    ("layout", A + "grad_offload", ("translated", "actor.fsdp_config.param_offload", True)),
    ("own", A + "param_offload", ("translated", "actor.fsdp_config.param_offload", True)),
    ("own", A + "grad_offload", ("dropped", None)),
    ("layout", C + "optimizer_offload", ("translated", "critic.fsdp_config.optimizer_offload", True)),
    ("layout", R + "optimizer_offload", ("dropped", None)),
    # recomputation -> gradient checkpointing; which layers is Megatron's detail
    ("layout", OTC + "recompute_granularity", ("translated", "model.enable_gradient_checkpointing", True)),
    ("layout", OTC + "recompute_method", ("dropped", None)),
    ("layout", "critic.megatron.override_transformer_config.recompute_granularity", ("translated", "critic.model.enable_gradient_checkpointing", True)),
    ("layout", "actor_rollout_ref.model.enable_gradient_checkpointing", ("dropped", None)),
    ("own", "actor_rollout_ref.model.use_remove_padding", ("dropped", None)),  # verl's Megatron actor packs by megatron.use_remove_padding
    ("own", A + "use_remove_padding", ("translated", "model.use_remove_padding", False)),
    # the seed of the role's processes, the compute dtype
    ("layout", A + "seed", ("translated", "trainer.seed", 7)),
    ("layout", R + "seed", ("dropped", None)),
    ("layout", A + "dtype", ("dropped", None)),
    # Megatron's optimizer: verl passes it no betas; Megatron's own options
    ("layout", OPT + "betas", ("dropped", None)),
    ("layout", OPT + "override_optimizer_config.adam_beta2", ("translated", "actor.optim.betas", [0.9, 0.95])),
    ("layout", OPT + "override_optimizer_config.optimizer_cpu_offload", ("dropped", None)),
])
def test_each_megatron_key_lands_on_what_it_means(scenario, key, expected):
    got = entries(scenario)[key]
    assert got[: len(expected)] == expected, got


@pytest.mark.parametrize("key, reason", [
    (R + "seed", "posttrain seeds every role's processes with one seed"),
    (A + "dtype", "loss scaling"),
    (OTC + "moe_z_loss_coeff", "expected a number >= 0"),
    (OTC + "moe_expert_capacity_factor", "drops the tokens"),
    (OTC + "hidden_dropout", "override_config"),
    (OTC + "some_new_option", "can change the model's computation"),
    (A + "override_mcore_model_config", "config.json"),
    (OPT + "override_optimizer_config.decoupled_weight_decay", "no counterpart"),
    ("actor_rollout_ref.model.lora", "one adapter per Hugging Face projection"),
])
def test_numbers_changing_megatron_options_are_refused_with_the_reason(key, reason):
    status, _, _, why = entries("refused")[key]
    assert status == "refused" and reason in why, why


def test_a_moving_expert_bias_is_refused_naming_the_rate_that_would_freeze_it():
    status, _, _, why = entries("moving-bias")[OTC + "moe_router_enable_expert_bias"]
    assert status == "refused" and "updated by 0.001 after each step" in why and "moe_router_bias_update_rate=0" in why, why
    assert "the Hugging Face model's own routing" in entries("frozen-bias")[OTC + "moe_router_bias_update_rate"][3]
