"""verl launch lines and ROLL/Trinity-RFT overrides through the real CLI.

A verl user's `python3 -m verl.trainer.main_ppo KEY=VALUE ...` becomes `posttrain config plan|show|train
--dialect verl KEY=VALUE ...`: verl's trainer defaults (posttrain/config/dialects/verl_defaults.yaml)
plus Hydra-style overrides; a key verl's tree lacks is an error unless added with `+`, as in Hydra.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.config import load_config
from posttrain.config.dialects import hydra
from posttrain.config.dialects.verl_launch import defaults_tree, honoured_defaults
from posttrain.errors import ConfigError
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verl_line")
    make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0)
    write_task_data("sort", root / "data", train=16, test=4)
    return root


def line(root: Path) -> list[str]:
    """A GRPO launch line as verl's examples write it (engine and GPU words left out)."""
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={root}/data/train.parquet", f"data.val_files={root}/data/test.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=32", "data.max_response_length=8",
        f"actor_rollout_ref.model.path={root}/model",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.rollout.n=4", "trainer.logger=[\"console\"]", "trainer.total_epochs=1",
        f"trainer.default_local_dir={root}/run",
    ]


def test_plan_of_a_verl_launch_line(inputs, capsys):
    assert main(["config", "plan", "--dialect", "verl", *line(inputs)]) == 0
    out = capsys.readouterr().out
    assert "responses per step             16" in out and "total training steps            4" in out


def test_show_takes_verl_defaults_for_what_the_line_leaves_out(inputs, capsys):
    assert main(["config", "show", "--dialect", "verl", *line(inputs)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    # the line's values
    assert (shown["rollout"]["n"], shown["actor"]["ppo_mini_batch_size"], shown["algorithm"]["adv_estimator"]) == (4, 2, "grpo")
    # verl's defaults where posttrain's differ: the actor's lr 1e-6 and the critic's 1e-5 (verl's
    # ppo_trainer), torch.compile on, clip-higher bounds 0.2, and the critic follows the actor's mini-batch
    assert (shown["actor"]["optim"]["lr"], shown["critic"]["optim"]["lr"]) == (1e-6, 1e-5)
    assert shown["actor"]["use_torch_compile"] is True and shown["critic"]["ppo_mini_batch_size"] == 2
    assert (shown["cluster"]["device"], shown["cluster"]["n_gpus_per_node"]) == ("auto", 0)  # verl's "cuda" describes its machine, not the run
    # a verl default is dropped from the line: the defaults' path does not exist, plan says so
    dropped = [w for w in line(inputs) if not w.startswith("actor_rollout_ref.model.path")]
    assert main(["config", "plan", "--dialect", "verl", *dropped]) == 2
    assert "deepseek-llm-7b-chat" in capsys.readouterr().err  # verl's default model path, as verl would read it


def test_hydra_override_forms(inputs, capsys):
    base = line(inputs)
    cfg = load_config(None, [*base, "trainer.logger=[console,tensorboard]", "~actor_rollout_ref.actor.kl_loss_coef",
                             "actor_rollout_ref.actor.optim.lr=3e-6"], dialect="verl")
    assert cfg.trainer.logger == ["console", "tensorboard"] and cfg.actor.optim.lr == 3e-6  # 3e-6: a float, as Hydra reads it
    assert main(["config", "plan", "--dialect", "verl", *base, "trainer.totl_epochs=3", "+trainer.total_epochs=2"]) == 2
    err = capsys.readouterr().err
    assert "command line override 'trainer.totl_epochs=3': verl's trainer config has no key trainer.totl_epochs (did you mean trainer.total_epochs?)" in err
    assert "add a new key with '+trainer.totl_epochs=3'" in err
    assert "command line override '+trainer.total_epochs=2': verl's trainer config already has trainer.total_epochs" in err
    assert "Traceback" not in err
    # a key added with + that posttrain has no home for is refused by name, pointing at the override
    assert main(["config", "plan", "--dialect", "verl", *base, "+trainer.my_knob=1"]) == 2
    assert "command line override '+trainer.my_knob=1': trainer.my_knob: no posttrain equivalent" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="cannot delete trainer.nope"):
        load_config(None, [*base, "~trainer.nope"], dialect="verl")


def test_config_path_and_name(inputs, tmp_path, capsys):
    # a verl user's own YAML: `defaults: [ppo_trainer, _self_]` is verl's tree, its keys go on top,
    # the line's overrides on top of those
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "my_grpo.yaml").write_text(textwrap.dedent("""\
        hydra: {searchpath: ["file://verl/trainer/config"]}
        defaults: [ppo_trainer, _self_]
        actor_rollout_ref: {rollout: {n: 2}, actor: {ppo_epochs: 2}}
    """))
    args = ["config", "show", f"--config-path={tmp_path}/conf", "--config-name=my_grpo", *line(inputs)[:-3]]
    assert main(args) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert (shown["rollout"]["n"], shown["actor"]["ppo_epochs"]) == (4, 2)  # the override wins over the file
    assert main(["config", "show", "--config-name", "ppo_trainer", *line(inputs)]) == 0  # verl's own name: the defaults
    capsys.readouterr()  # ppo_megatron_trainer: tests/config/test_verl_megatron.py


def test_roll_and_trinity_overrides_on_top_of_a_file(inputs, tmp_path, capsys):
    roll = tmp_path / "roll.yaml"
    roll.write_text(textwrap.dedent(f"""\
        pretrain: {inputs}/model
        rollout_batch_size: 4
        num_return_sequences_in_group: 4
        prompt_length: 32
        response_length: 8
        num_gpus_per_node: 1
        actor_train:
          training_args: {{learning_rate: 1.0e-5, per_device_train_batch_size: 2, gradient_accumulation_steps: 2}}
          data_args: {{file_name: [{inputs}/data/train.parquet]}}
        actor_infer:
          generating_args: {{temperature: 0.8, num_return_sequences: 4, max_new_tokens: 8}}
          strategy_args: {{strategy_name: hf_infer}}
    """))
    cfg = load_config(roll, ["rollout_batch_size=8", "actor_train.training_args.learning_rate=2e-5", "+pg_clip=0.1"], dialect="roll")
    assert (cfg.data.train_batch_size, cfg.actor.optim.lr, cfg.actor.clip_ratio) == (8, 2e-5, 0.1)
    assert main(["config", "plan", "--dialect", "roll", str(roll), "max_steps=3"]) == 2  # Hydra: ROLL's file has no max_steps
    assert f"the ROLL config {roll} has no key max_steps; add a new key with '+max_steps=3'" in capsys.readouterr().err
    trinity = tmp_path / "trinity.yaml"
    trinity.write_text(textwrap.dedent(f"""\
        algorithm: {{algorithm_type: grpo, repeat_times: 4}}
        model: {{model_path: {inputs}/model, max_prompt_tokens: 32, max_response_tokens: 8}}
        buffer: {{batch_size: 4, explorer_input: {{taskset: {{path: {inputs}/data, split: train}}}}}}
    """))
    cfg = load_config(trinity, ["algorithm.repeat_times=2", "buffer.total_epochs=3"], dialect="trinity")
    assert (cfg.rollout.n, cfg.trainer.total_epochs, cfg.actor.use_kl_loss) == (2, 3, True)
    assert main(["config", "plan", "--dialect", "trinity", "algorithm.repeat_times=2"]) == 2
    assert "--dialect trinity: give the Trinity-RFT config file first" in capsys.readouterr().err


def test_verl_defaults_file_is_verls_tree():
    tree = defaults_tree()
    # the keys and defaults verl's trainer documents (spot checks against verl's ppo_trainer)
    actor = tree["actor_rollout_ref"]["actor"]
    assert (actor["ppo_mini_batch_size"], actor["clip_ratio"], actor["optim"]["lr"], actor["kl_loss_type"]) == (256, 0.2, 1e-6, "low_var_kl")
    assert (tree["data"]["train_batch_size"], tree["algorithm"]["adv_estimator"], tree["trainer"]["total_epochs"]) == (1024, "gae", 30)
    assert tree["actor_rollout_ref"]["rollout"]["name"] is None  # verl's mandatory ???: left to the line
    assert not any(k.endswith("_target_") for k in hydra.leaf_keys(tree))
    assert "actor_rollout_ref.actor.optim.lr" not in honoured_defaults()  # posttrain's default is verl's: nothing to carry
    assert "data.train_batch_size" in honoured_defaults()


def test_hydra_values():
    assert hydra.parse_value('["console","wandb"]') == ["console", "wandb"]
    assert hydra.parse_value("[console,wandb]") == ["console", "wandb"]
    assert (hydra.parse_value("1e-6"), hydra.parse_value("10"), hydra.parse_value("True"), hydra.parse_value("null")) == (1e-6, 10, True, None)
    assert hydra.parse_value("${data.max_prompt_length}") == "${data.max_prompt_length}"
    with pytest.raises(ConfigError, match="expected key=value"):
        hydra.parse("trainer.total_epochs")


def test_train_from_a_verl_launch_line(inputs, tmp_path):
    # the whole run from verl's words: 2 GRPO steps, verl's actor lr 1e-6 (a default the line leaves out),
    # verl's `file` tracker is posttrain's metrics.jsonl
    words = [w for w in line(inputs) if not w.startswith(("trainer.logger", "trainer.default_local_dir"))]
    run = tmp_path / "run"
    assert main(["train", "--dialect", "verl", *words, "trainer.logger=[console,file]", f"trainer.default_local_dir={run}",
                 "trainer.total_training_steps=2", "actor_rollout_ref.actor.use_torch_compile=False"]) == 0
    rows = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "actor/lr" in r]
    assert len(steps) == 2 and all(r["actor/lr"] == pytest.approx(1e-6) for r in steps)
    assert (run / "final_model" / "config.json").is_file()


RC = "algorithm.rollout_correction."


@pytest.mark.parametrize(
    "words, algorithm, actor",
    [
        # decoupled mode (verl's default): posttrain's rollout_is* / rollout_rs* keys
        ([RC + "rollout_is=sequence", RC + "rollout_is_batch_normalize=true"],
         {"rollout_is": True, "rollout_is_level": "sequence", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True}, {}),
        ([RC + "rollout_rs='token_k1,seq_max_k2'", RC + "rollout_rs_threshold='0.6_1.6,2.5'"],
         {"rollout_is": False, "rollout_is_threshold": 2.0, "rollout_rs": "token_k1,seq_max_k2", "rollout_rs_threshold": "0.6_1.6,2.5"}, {}),
        ([RC + "rollout_is_threshold=2.0"], {"rollout_is": False, "rollout_is_threshold": None}, {}),  # verl's default: off
        # verl 0.10's "L_U": IcePop, the weights outside [L, U] set to 0; with no weights only the upper bound is read
        ([RC + "rollout_is=token", RC + "rollout_is_threshold=0.5_4.0"],
         {"rollout_is": True, "rollout_is_level": "token", "rollout_is_threshold": 4.0, "rollout_is_threshold_lower": 0.5, "rollout_is_mode": "zero"}, {}),
        ([RC + "rollout_rs=token_k2", RC + "rollout_rs_threshold=0.1", RC + "rollout_is_threshold=0.5_4.0"],
         {"rollout_is": False, "rollout_is_threshold": 4.0, "rollout_is_threshold_lower": None, "rollout_is_mode": "truncate"}, {}),
        # bypass mode: the rollout's log-probs are the old ones and the loss corrects
        ([RC + "bypass_mode=true", RC + "loss_type=reinforce", RC + "rollout_is=token", RC + "rollout_rs=token_k3", RC + "rollout_rs_threshold=0.01"],
         {"rollout_is": False, "rollout_is_threshold": None, "rollout_rs": None},
         {"reuse_rollout_logprobs": "always", "policy_loss": {"loss_mode": "bypass_mode", "loss_args": {
             "loss_type": "reinforce", "rollout_is": "token", "rollout_rs": "token_k3", "rollout_rs_threshold": 0.01}}}),
        ([RC + "bypass_mode=true", RC + "loss_type=reinforce", RC + "rollout_is=token", RC + "rollout_is_threshold=0.5_4.0"],
         {"rollout_is": False, "rollout_is_threshold": None},
         {"reuse_rollout_logprobs": "always", "policy_loss": {"loss_mode": "bypass_mode", "loss_args": {
             "loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": "0.5_4.0"}}}),
    ],
)
def test_verl_rollout_correction_lands_on_posttrains_keys(inputs, capsys, words, algorithm, actor):
    assert main(["config", "show", "--dialect", "verl", *line(inputs), *words]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert {k: shown["algorithm"][k] for k in algorithm} == algorithm
    for key, value in actor.items():
        if key == "policy_loss":
            assert shown["actor"]["policy_loss"]["loss_mode"] == value["loss_mode"]
            assert shown["actor"]["policy_loss"]["loss_args"] == value["loss_args"]
        else:
            assert shown["actor"][key] == value


@pytest.mark.parametrize(
    "words, message",
    [
        ([RC + "loss_type=dpo", RC + "bypass_mode=true"], "not one of verl's values: ppo_clip, reinforce"),
        ([RC + "rollout_rs=token_k9", RC + "rollout_rs_threshold=0.1"], "unknown rejection option(s) ['token_k9']"),
        ([RC + "rollout_rs=token_k2", RC + "rollout_rs_threshold=0.1_0.5"], "token_k2 takes one upper bound"),
        ([RC + "rollout_is=token", RC + "rollout_is_threshold=4.0_0.5"], "the bounds need 0 < L <= U"),
        ([RC + "rollout_is=token", RC + "rollout_is_threshold=0.5_4.0", "reward_model.reward_manager=prime"],
         "verl 0.8 reads a number here and stops on a string"),  # a line read as verl 0.8
    ],
)
def test_verl_rollout_correction_mistakes_are_named(inputs, capsys, words, message):
    assert main(["config", "plan", "--dialect", "verl", *line(inputs), *words]) == 2
    assert message in capsys.readouterr().err


AR = "actor_rollout_ref."


def test_verl_moe_and_server_keys_plan_at_their_defaults_and_are_refused_otherwise(inputs, capsys):
    """The reference's router replay, multi-token prediction, engine data/expert parallel ranks and Prometheus:
    keys of verl's tree that posttrain has no counterpart for; verl's default values change nothing
    (the actor's router replay: tests/config/test_router_replay_translation.py)."""
    defaults = [AR + "actor.router_replay.mode=disabled", AR + "ref.router_replay.mode=disabled", AR + "model.mtp.enable=false",
                AR + "rollout.data_parallel_size=1", AR + "rollout.expert_parallel_size=1", AR + "rollout.prometheus.enable=false",
                AR + "rollout.enable_rollout_routing_replay=false"]
    assert main(["config", "plan", "--dialect", "verl", *line(inputs), *defaults]) == 0
    capsys.readouterr()
    others = {AR + "ref.router_replay.mode=R2": "routing replay of the reference", AR + "model.mtp.enable=true": "multi-token prediction",
              AR + "rollout.expert_parallel_size=8": "splits a model only by tensor parallelism",
              AR + "rollout.prometheus.enable=true": "Prometheus metrics", AR + "rollout.enable_rollout_routing_replay=true": "(R3)"}
    assert main(["config", "plan", "--dialect", "verl", *line(inputs), *others]) == 2
    err = capsys.readouterr().err
    for word, reason in others.items():
        assert f"'{word}': {word.split('=')[0]}: not supported:" in err and reason in err, word
    assert "schema knows" not in err


def test_an_override_verl_refuses_too_says_so():
    # Hydra (under verl's launcher) refuses a plain override of a key verl's tree lacks and '+' on a
    # key it has: such a script fails in verl as well, and the one line says so
    with pytest.raises(ConfigError) as err:
        load_config(None, ["actor_rollout_ref.model.torch_dtype=bfloat16", "+actor_rollout_ref.actor.fsdp_config.model_dtype=bf16"],
                    dialect="verl")
    lines = [str(p) for p in err.value.problems]
    assert len(lines) == 2 and all("\n" not in p and "which Hydra refuses too: verl fails on this line as well" in p for p in lines)
    assert "remove it, or add a new key with '+actor_rollout_ref.model.torch_dtype=bfloat16'" in lines[0]
    assert "set it with 'actor_rollout_ref.actor.fsdp_config.model_dtype=bf16'" in lines[1]


def test_hydra_adds_a_mapping_or_list_over_a_key_and_merges_mappings():
    from posttrain.config.dialects import hydra

    tree = {"kw": {"vllm": {"a": 1}, "sglang": {}}, "dtype": "fp32"}
    out, _ = hydra.apply(tree, ["+kw={vllm: {b: 2}}", "+dtype=[bf16]"], strict=True, what="t", launcher="verl")
    assert out == {"kw": {"vllm": {"a": 1, "b": 2}, "sglang": {}}, "dtype": ["bf16"]}  # as Hydra 1.3 composes it
    with pytest.raises(ConfigError, match="t already has dtype, which Hydra refuses too"):
        hydra.apply(tree, ["+dtype=bf16"], strict=True, what="t", launcher="verl")


def test_an_empty_device_count_is_refused_as_the_machines():
    from posttrain.config.dialects.verl import BLANK_DEVICES

    with pytest.raises(ConfigError) as err:
        load_config(None, ["trainer.nnodes=", "trainer.n_gpus_per_node=8"], dialect="verl")
    (line,) = [str(p) for p in err.value.problems if "nnodes" in str(p)]
    assert line.endswith(f"trainer.nnodes (posttrain: cluster.nnodes): {BLANK_DEVICES}") and "$SLURM_JOB_NUM_NODES" in line


def test_an_empty_boolean_is_false_as_verl_reads_it(inputs):
    # sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_vllm_fsdp.sh: use_kl_loss=True, then
    # use_kl_loss=${use_kl_loss} with the variable unset; the last wins, and verl's instantiated actor
    # config tests '' for truth: no KL loss
    on = load_config(None, [*line(inputs), "actor_rollout_ref.actor.use_kl_loss=True"], dialect="verl")
    off = load_config(None, [*line(inputs), "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.use_kl_loss="], dialect="verl")
    assert (on.actor.use_kl_loss, off.actor.use_kl_loss) == (True, False)
    with pytest.raises(ConfigError, match="algorithm.gamma"):  # a number left empty stays an error
        load_config(None, [*line(inputs), "algorithm.gamma="], dialect="verl")
