"""Dialect loaders: verl, ROLL and Trinity-RFT files detected, translated, loaded or refused.

The five real example configs in tests/config/reference_configs are read as published; small hand-written
files check that what translates loads with `load_config` and keeps its values, and that what
posttrain refuses is refused in one message naming each key and its reason.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from omegaconf import OmegaConf

from posttrain.cli import main
from posttrain.config import ConfigError, load_config
from posttrain.config.checks import check_device_mapping
from posttrain.config.dialects import convert, detect, read_foreign, translate
from posttrain.config.dialects.values import parse_device_list
from posttrain.errors import UserError

REPO = Path(__file__).resolve().parents[2]
REFERENCE = Path(__file__).resolve().parent / "reference_configs"  # real ROLL / Trinity-RFT example files, as published

ROLL_RLVR = "roll_qwen2.5-7B-rlvr_megatron_rlvr_config.yaml"
ROLL_SOKOBAN = "roll_qwen2.5-0.5B-agentic_agentic_val_sokoban.yaml"
ROLL_ENVS = "roll_config_traj_envs.yaml"
TRINITY_GSM8K = "trinity_grpo_gsm8k_gsm8k.yaml"
TRINITY_LAKE = "trinity_grpo_frozen_lake_frozen_lake.yaml"


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _entry(report, key):
    entry = report.entry(key)
    assert entry is not None, f"{key} missing from the report"
    return entry


# ---- detection ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, dialect", [(ROLL_RLVR, "roll"), (ROLL_SOKOBAN, "roll"), (ROLL_ENVS, "roll"), (TRINITY_GSM8K, "trinity"), (TRINITY_LAKE, "trinity")])
def test_reference_configs_are_detected(name, dialect):
    assert detect(yaml.safe_load((REFERENCE / name).read_text())) == dialect


def test_native_examples_and_verl_files_are_detected():
    for example in sorted((REPO / "examples").glob("*.yaml")):
        assert detect(yaml.safe_load(example.read_text())) == "native", example
    assert detect({"actor_rollout_ref": {"actor": {"ppo_epochs": 1}}, "data": {"train_batch_size": 4}}) == "verl"
    assert detect({"data": {"train_batch_size": 4}}) == "native"  # shared keys only: read as posttrain's


def test_a_tie_between_dialects_asks_for_dialect():
    with pytest.raises(ConfigError, match="--dialect"):
        detect({"actor_rollout_ref": {"actor": {}}, "actor_train": {"model_args": {}}}, "x.yaml")


# ---- the reference configs ------------------------------------------------------------------------


def test_roll_rlvr_translation_names_keys():
    report = read_foreign(REFERENCE / ROLL_RLVR).report
    mini = _entry(report, "actor_train.training_args.gradient_accumulation_steps")
    assert (mini.status, mini.native, mini.value) == ("translated", "actor.ppo_mini_batch_size", 64)  # 1 x 32 x 16 devices / 8
    # megatron_train reads recompute_granularity (full here), not model_args.disable_gradient_checkpointing (false)
    assert _entry(report, "actor_train.model_args.disable_gradient_checkpointing").status == "dropped"
    gc = _entry(report, "actor_train.strategy_args.strategy_config.recompute_granularity")
    assert (gc.native, gc.value) == ("model.enable_gradient_checkpointing", True)
    assert _entry(report, "track_with").value == ["console", "jsonl", "tensorboard"]
    megatron = _entry(report, "actor_train.strategy_args.strategy_name")
    assert (megatron.status, megatron.native, megatron.value) == ("translated", "actor.strategy", "fsdp2")
    vllm = _entry(report, "actor_infer.strategy_args.strategy_name")
    assert (vllm.status, vllm.native, vllm.value) == ("translated", "rollout.name", "vllm")
    # strategy_config goes to the vLLM constructor: rollout keys where posttrain has them, the rest as they are
    assert _entry(report, "actor_infer.strategy_args.strategy_config.gpu_memory_utilization").native == "rollout.gpu_memory_utilization"
    block = _entry(report, "actor_infer.strategy_args.strategy_config.block_size")
    assert (block.status, block.native, block.value) == ("translated", "rollout.engine_kwargs.vllm.block_size", 16)
    mapping = _entry(report, "actor_infer.device_mapping")  # 12 of 16 devices: the engines on workers 0..11
    assert (mapping.status, mapping.native, mapping.value) == ("translated", "cluster.device_mapping.rollout", list(range(12)))
    # the same layout written natively is accepted; engines on devices that overlap training otherwise are refused
    native = {"cluster": {"nnodes": 2, "n_gpus_per_node": 8, "device_mapping": {"actor": list(range(16)), "rollout": list(range(12))}}}
    assert check_device_mapping(OmegaConf.create(native)) == []
    native["cluster"]["device_mapping"]["rollout"] = list(range(4, 16))
    problems = check_device_mapping(OmegaConf.create(native))
    assert len(problems) == 1 and "the rollout's devices 4..15 beside training on 0..15" in problems[0]
    assert _entry(report, "hydra.run.dir").status == "dropped"
    assert _entry(report, "reference.model_args.dtype").status == "dropped"  # same dtype as the policy


def test_roll_sokoban_translation_names_keys():
    report = read_foreign(REFERENCE / ROLL_SOKOBAN).report
    colocated = _entry(report, "actor_train.device_mapping")  # all 8 devices of the node: posttrain's default
    assert (colocated.status, colocated.native, colocated.value) == ("translated", "cluster.device_mapping.actor", [])
    assert _entry(report, "actor_train.training_args.gradient_accumulation_steps").value == 1024  # 2 x 64 x 8 / 1
    assert "traj_envs.yaml not found" in _entry(report, "defaults[0]").reason
    assert "cannot resolve interpolation" in _entry(report, "custom_envs.SimpleSokoban").reason
    # an episode's prompt and everything after it: model.max_model_len; each limit alone may take all but a token
    assert {(e.native, e.value) for e in report.entries if e.key == "sequence_length" and e.status == "translated"} == {
        ("model.max_model_len", 8192), ("data.max_prompt_length", 8191), ("data.max_response_length", 8191)}
    group = _entry(report, "train_env_manager.group_size")  # honoured since the agent loop (docs/agentic.md)
    assert (group.status, group.native, group.value) == ("translated", "env.train_env_manager.group_size", 8)
    render = _entry(report, "render_save_dir")  # validation episodes' frames, as text (posttrain.rollout.episode_render)
    assert (render.status, render.native) == ("translated", "env.render_save_dir")
    assert _entry(report, "reward_normalization.grouping").status == "translated"  # the default value: nothing to refuse
    assert _entry(report, "reference.strategy_args.strategy_name").status == "dropped"  # hf_infer is posttrain's engine


def test_roll_hydra_include_is_composed(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "examples").mkdir()
    shutil.copy(REFERENCE / ROLL_ENVS, tmp_path / "config" / "traj_envs.yaml")
    shutil.copy(REFERENCE / ROLL_SOKOBAN, tmp_path / "examples" / "sokoban.yaml")
    report = read_foreign(tmp_path / "examples" / "sokoban.yaml").report
    assert report.entry("defaults[0]") is None  # found and merged
    envs = _entry(report, "custom_envs")
    assert envs.status == "translated" and envs.native == "env.custom_envs"
    simple = envs.value["SimpleSokoban"]
    assert simple["max_tokens_per_step"] == 64  # the including file's value wins over traj_envs.yaml's 128
    assert simple["env_config"]["max_steps"] == 10 and simple["env_config"]["format_penalty"] == -0.15
    assert _entry(report, "action_pattern").status == "dropped"


def test_roll_envs_fragment():
    report = read_foreign(REFERENCE / ROLL_ENVS).report
    assert report.refused == [] and _entry(report, "env_manager_cls").status == "dropped"  # a template variable
    assert _entry(report, "agent_template").status == "dropped"


def test_trinity_gsm8k_translation_names_keys():
    report = read_foreign(REFERENCE / TRINITY_GSM8K).report
    kinds = [(e.native, e.value) for e in report.entries if e.key == "algorithm.algorithm_type"]
    assert kinds == [("algorithm.kind", "rl"), ("algorithm.adv_estimator", "grpo"), ("actor.policy_loss.loss_mode", "vanilla")]
    assert (_entry(report, "explorer.rollout_model.dtype").native, _entry(report, "explorer.rollout_model.dtype").value) == ("rollout.dtype", "bf16")
    path = _entry(report, "buffer.explorer_input.taskset.path")  # a hub name: read from the local cache when built
    assert (path.status, path.native, path.value) == ("translated", "data.train_files", ["openai/gsm8k:main@train"])
    assert _entry(report, "buffer.explorer_input.eval_tasksets[0].path").value == ["openai/gsm8k:main@test"]
    assert _entry(report, "trainer.trainer_type").status == "dropped"
    assert _entry(report, "buffer.explorer_input.taskset.format.prompt_key").native == "data.prompt_key"


def test_trinity_frozen_lake_env_path(tmp_path, monkeypatch):
    monkeypatch.delenv("TRINITY_TASKSET_PATH", raising=False)
    report = read_foreign(REFERENCE / TRINITY_LAKE).report
    assert "TRINITY_TASKSET_PATH" in _entry(report, "buffer.explorer_input.taskset.path").reason
    offload = _entry(report, "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.param_offload")
    assert (offload.status, offload.native) == ("translated", "actor.fsdp_config.param_offload")
    assert _entry(report, "algorithm.policy_loss_fn_args.clip_range_high").value == 0.28
    pq.write_table(pa.table({"prompt": ["a"]}), tmp_path / "train.parquet")
    pq.write_table(pa.table({"prompt": ["b"]}), tmp_path / "test.parquet")
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(tmp_path))
    foreign = read_foreign(REFERENCE / TRINITY_LAKE)  # frozen_lake_workflow: the taskset rows are the episodes
    envs = foreign.native["env"]["custom_envs"]
    assert envs["frozen_lake"]["episode_files"] == [str(tmp_path / "train.parquet")]
    assert envs["frozen_lake_eval0"]["episode_files"] == [str(tmp_path / "test.parquet")]
    assert "train_files" not in foreign.native["data"] and "val_files" not in foreign.native["data"]
    assert foreign.native["rollout"]["val_kwargs"] == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "do_sample": True, "n": 4}


def test_convert_cli_translates_every_key_of_trinitys_gsm8k(tmp_path, capsys):
    out = tmp_path / "native.yaml"
    assert main(["config", "convert", str(REFERENCE / TRINITY_GSM8K), str(out)]) == 0  # math_workflow: R1 prompt, think_answer
    text = out.read_text()
    assert "# REFUSED" not in text and "think_answer" in text and "0 refused" in capsys.readouterr().out


@pytest.mark.parametrize("name", [ROLL_SOKOBAN, TRINITY_LAKE])
def test_convert_cli_on_reference_configs(name, tmp_path, capsys):
    out = tmp_path / "native.yaml"
    assert main(["config", "convert", str(REFERENCE / name), str(out)]) == 1  # written, with refused keys
    text = out.read_text()
    assert text.startswith("# Converted by `posttrain config convert`") and "# REFUSED" in text
    printed = capsys.readouterr().out
    assert "refused: " in printed and str(out) in printed


def test_converted_roll_rlvr_loads(tmp_path):
    out = tmp_path / "rlvr.yaml"
    assert main(["config", "convert", str(REFERENCE / ROLL_RLVR), str(out)]) == 0  # every key translated (its judge on vLLM too)
    assert "# REFUSED" not in out.read_text()
    cfg = load_config(out)
    assert (cfg.actor.ppo_mini_batch_size, cfg.data.train_batch_size, cfg.rollout.n) == (64, 64, 8)
    assert (cfg.model.dtype, cfg.algorithm.adv_estimator, cfg.actor.optim.lr) == ("bf16", "reinforce", 1e-6)
    assert (cfg.rollout.name, cfg.rollout.engine_kwargs.vllm) == ("vllm", {"block_size": 16})


# ---- hand-written files that load -----------------------------------------------------------------

VERL_GRPO = """\
    data:
      train_files: {d}/train.parquet
      val_files: {d}/test.parquet
      train_batch_size: 4
      max_prompt_length: 32
      max_response_length: 8
    actor_rollout_ref:
      model:
        path: {d}/model
        enable_gradient_checkpointing: false
      actor:
        ppo_mini_batch_size: 4
        ppo_micro_batch_size_per_gpu: 16
        use_kl_loss: true
        kl_loss_coef: 0.002
        optim:
          lr: 1e-4
      rollout:
        n: 4
        temperature: 0.9
    algorithm:
      adv_estimator: grpo
    trainer:
      total_training_steps: 2
      logger: ['console', 'jsonl']
      default_local_dir: {d}/run
      n_gpus_per_node: 0
"""


def test_verl_grpo_loads_with_its_values(tmp_path):
    path = _write(tmp_path / "verl.yaml", VERL_GRPO.format(d=tmp_path))
    cfg = load_config(path, ["trainer.seed=7"])  # overrides are posttrain keys
    assert cfg.data.train_files == [f"{tmp_path}/train.parquet"] and cfg.model.path == f"{tmp_path}/model"
    assert (cfg.rollout.n, cfg.rollout.temperature, cfg.algorithm.kind, cfg.algorithm.adv_estimator) == (4, 0.9, "rl", "grpo")
    assert (cfg.actor.use_kl_loss, cfg.actor.kl_loss_coef, cfg.actor.optim.lr) == (True, 0.002, 1e-4)
    assert (cfg.trainer.total_training_steps, cfg.trainer.seed, cfg.model.enable_gradient_checkpointing) == (2, 7, False)
    out = tmp_path / "native.yaml"
    assert main(["config", "convert", str(path), str(out)]) == 0
    assert load_config(out) == load_config(path)


def test_roll_snippet_loads_with_its_values(tmp_path):
    path = _write(tmp_path / "roll.yaml", f"""\
        exp_name: tiny
        seed: 3
        pretrain: {tmp_path}/model
        rollout_batch_size: 2
        num_return_sequences_in_group: 4
        prompt_length: 32
        response_length: 8
        adv_estimator: grpo
        reward_norm: group
        reward_shift: true
        num_gpus_per_node: 1
        actor_train:
          model_args: {{dtype: bfloat16, disable_gradient_checkpointing: true}}
          training_args: {{learning_rate: 2.0e-5, per_device_train_batch_size: 2, gradient_accumulation_steps: 2}}
          data_args: {{file_name: [{tmp_path}/train.parquet], prompt: question}}
          device_mapping: list(range(0,1))
        actor_infer:
          generating_args: {{temperature: 0.8, top_p: 0.95, num_return_sequences: 4, max_new_tokens: 8}}
          strategy_args: {{strategy_name: hf_infer}}
    """)
    cfg = load_config(path)
    assert (cfg.trainer.experiment_name, cfg.trainer.seed, cfg.model.path) == ("tiny", 3, f"{tmp_path}/model")
    assert (cfg.data.train_batch_size, cfg.rollout.n, cfg.rollout.temperature, cfg.rollout.name) == (2, 4, 0.8, "hf")
    assert (cfg.algorithm.reward_norm_mean, cfg.algorithm.reward_norm_std) == ("group", None)  # shift only
    assert (cfg.model.dtype, cfg.model.enable_gradient_checkpointing, cfg.data.prompt_key) == ("bf16", False, "question")
    assert (cfg.actor.optim.lr, cfg.actor.ppo_micro_batch_size_per_gpu, cfg.actor.ppo_mini_batch_size) == (2e-5, 2, 1)
    assert cfg.cluster.device_mapping.actor == []  # the one device there is: colocated


def test_trinity_snippet_with_stages_loads(tmp_path):
    pq.write_table(pa.table({"q": ["1+1"]}), tmp_path / "train.parquet")
    path = _write(tmp_path / "trinity.yaml", f"""\
        project: p
        name: n
        continue_from_checkpoint: true
        algorithm: {{algorithm_type: grpo, repeat_times: 4, optimizer: {{lr: 3.0e-5}}}}
        model: {{model_path: {tmp_path}/model, max_response_tokens: 8, max_prompt_tokens: 32}}
        buffer:
          batch_size: 8
          total_epochs: 2
          explorer_input:
            taskset: {{path: {tmp_path}, split: train, format: {{prompt_key: q}}, rollout_args: {{temperature: 0.7}}}}
        monitor: {{monitor_type: tensorboard}}
        stages:
          - stage_name: warmup
            algorithm: {{algorithm_type: sft}}
          - stage_name: rft
    """)
    cfg = load_config(path)
    assert (cfg.trainer.project_name, cfg.trainer.experiment_name, cfg.trainer.resume_mode) == ("p", "n", "auto")
    assert (cfg.algorithm.kind, cfg.algorithm.adv_estimator, cfg.rollout.n, cfg.actor.optim.lr) == ("rl", "grpo", 4, 3e-5)
    assert cfg.data.train_files == [str(tmp_path / "train.parquet")] and cfg.data.prompt_key == "q"
    assert (cfg.rollout.temperature, cfg.trainer.total_epochs, cfg.trainer.logger) == (0.7, 2, ["console", "jsonl", "tensorboard"])
    assert cfg.actor.ppo_mini_batch_size == 8  # one optimizer step per batch, as in Trinity-RFT
    assert cfg.stages == [{"name": "warmup", "algorithm": {"kind": "sft"}}, {"name": "rft"}]


# ---- refusals -------------------------------------------------------------------------------------


def test_refused_keys_make_one_message_naming_each(tmp_path, capsys):
    path = _write(tmp_path / "roll.yaml", f"""\
        pretrain: {tmp_path}/model
        rollout_batch_size: 8
        actor_train:
          strategy_args: {{strategy_name: megatron_infer}}
        actor_infer:
          strategy_args: {{strategy_name: vllm}}
        my_own_knob: 3
    """)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    problems = err.value.problems
    assert f"{path}: actor_train.strategy_args.strategy_name (posttrain: actor.strategy): ROLL runs actor_train with megatron_train, not megatron_infer" in problems[0]
    assert problems[1].startswith(f"{path}: my_own_knob: no posttrain equivalent")
    assert "posttrain config convert" in problems[2] and len(problems) == 3
    assert main(["train", str(path)]) == 2  # one message, nothing trained or written
    assert "my_own_knob" in capsys.readouterr().err
    assert not (tmp_path / "checkpoints").exists()


def test_bad_value_names_the_foreign_key(tmp_path):
    path = _write(tmp_path / "verl.yaml", VERL_GRPO.format(d=tmp_path).replace("lr: 1e-4", "lr: -1.0"))
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.optim\.lr \(posttrain: actor\.optim\.lr: must be > 0"):
        load_config(path)


def test_conflicting_keys_are_refused():
    _, report = translate({"num_return_sequences_in_group": 8, "actor_infer": {"generating_args": {"num_return_sequences": 4}}}, "roll")
    entry = _entry(report, "actor_infer.generating_args.num_return_sequences")
    assert entry.status == "refused" and "conflicts with num_return_sequences_in_group (8)" in entry.reason


def test_trinity_raft_and_unknown_algorithm_types():
    native, _ = translate({"algorithm": {"algorithm_type": "raft"}}, "trinity")  # the SFT loss on the rollouts
    assert (native["algorithm"]["kind"], native["actor"]["policy_loss"]["loss_mode"], native["actor"]["use_kl_loss"]) == ("rl", "sft", False)
    _, report = translate({"algorithm": {"algorithm_type": "grpoo"}}, "trinity")
    reason = _entry(report, "algorithm.algorithm_type").reason
    assert reason.startswith("unknown algorithm_type 'grpoo'") and "mix_chord" in reason and "multi_step_grpo" in reason


def test_device_lists():
    assert parse_device_list("list(range(0,8,2))") == [0, 2, 4, 6]
    assert parse_device_list([3, 4]) == [3, 4]
    _, report = translate({"actor_train": {"device_mapping": "__import__('os')"}}, "roll")
    assert "cannot read device list" in _entry(report, "actor_train.device_mapping").reason


# ---- the convert command --------------------------------------------------------------------------


def test_convert_cli_exit_codes(tmp_path, capsys):
    verl = _write(tmp_path / "verl.yaml", VERL_GRPO.format(d=tmp_path))
    assert main(["config", "convert", str(verl)]) == 0  # no OUT: the YAML on stdout, the summary on stderr
    captured = capsys.readouterr()
    assert "actor_rollout_ref.actor.optim.lr -> actor.optim.lr" in captured.out and "0 refused" in captured.err
    assert yaml.safe_load(captured.out)["actor"]["optim"]["lr"] == 1e-4
    native = tmp_path / "native.yaml"
    native.write_text("data: {train_batch_size: 4}\nactor: {ppo_epochs: 1}\n")
    out = tmp_path / "out.yaml"
    assert main(["config", "convert", str(native), str(out)]) == 2 and not out.exists()
    assert "already a posttrain config" in capsys.readouterr().err
    assert main(["config", "convert", str(tmp_path / "missing.yaml"), str(out)]) == 2 and not out.exists()
    assert main(["config", "convert", str(native), str(out), "--dialect", "verl"]) == 1  # forced: keys verl lacks
    assert "actor.ppo_epochs: no posttrain equivalent" in out.read_text()


def test_convert_api_raises_user_error_for_native(tmp_path):
    path = _write(tmp_path / "n.yaml", "actor: {ppo_epochs: 2}\n")
    with pytest.raises(UserError):
        convert(path)


def test_trinity_engine_types_name_the_vllm_engine(tmp_path):
    for engine_type in ("vllm", "vllm_async"):  # "the same meaning" in Trinity-RFT's guide
        raw = {"mode": "both", "explorer": {"rollout_model": {"engine_type": engine_type, "gpu_memory_utilization": 0.7}}}
        report = read_foreign(tmp_path / "trinity.yaml", "trinity", raw=raw).report
        name = _entry(report, "explorer.rollout_model.engine_type")
        assert (name.status, name.native, name.value) == ("translated", "rollout.name", "vllm")
        assert _entry(report, "explorer.rollout_model.gpu_memory_utilization").native == "rollout.gpu_memory_utilization"


def test_a_trinity_rl_file_naming_no_engine_samples_with_vllm_as_trinity_does(tmp_path):
    """Trinity-RFT's InferenceModelConfig.engine_type defaults to vllm: a file that names none runs its
    explorer on vLLM, and so does posttrain (hf only when the file says so, as a laptop override)."""
    def engine(raw):
        native, report = translate(raw, "trinity")
        return native.get("rollout", {}).get("name"), [e for e in report.entries if e.key == "explorer.rollout_model.engine_type"]

    name, entries = engine({"mode": "both", "algorithm": {"algorithm_type": "grpo"}})
    assert name == "vllm" and entries[0].status == "translated" and entries[0].reason == "Trinity-RFT's default (not written in the file): vllm"
    assert engine({"algorithm": {"algorithm_type": "grpo"}, "explorer": {"rollout_model": {"engine_type": "hf"}}})[0] == "hf"
    assert engine({"mode": "train", "algorithm": {"algorithm_type": "grpo"}})[0] is None  # no explorer
    assert engine({"algorithm": {"algorithm_type": "sft"}})[0] is None  # SFT samples nothing
    images = {"algorithm": {"algorithm_type": "grpo"}, "buffer": {"explorer_input": {"taskset": {"format": {"image_key": "images"}}}}}
    name, entries = engine(images)  # posttrain's vLLM adapter takes no images: the hf engine, said in the report
    assert name == "hf" and "passes images and videos to its hf engine only" in entries[0].reason
    external = {"algorithm": {"algorithm_type": "grpo"}, "mode": "bench",
                "model": {"external_model": {"enable": True, "model_name": "m", "base_url_env": "U"}}}
    assert engine(external)[0] == "external"


def test_trinity_s_micro_batch_loss_scale_is_by_rows_unless_fixed_for_a_token_mean():
    """Trinity-RFT's actor scales each micro-batch's loss by 1 / the accumulation steps (its dp_actor),
    unless trainer.fix_actor_microbatch_loss_scale is true and the loss is a token mean: then by the
    micro-batch's share of the mini-batch's tokens, posttrain's default."""
    def weight(algorithm, **trainer):
        native, report = translate({"algorithm": algorithm, **({"trainer": trainer} if trainer else {})}, "trinity")
        return native.get("actor", {}).get("micro_batch_weight"), {e.key: e for e in report.entries}

    value, entries = weight({"algorithm_type": "grpo"})
    assert value == "rows" and entries["trainer.fix_actor_microbatch_loss_scale"].reason.startswith("Trinity-RFT's default (not written in the file): false")
    assert weight({"algorithm_type": "grpo"}, fix_actor_microbatch_loss_scale=True)[0] == "normaliser"
    # the critic (PPO's GAE) is verl's legacy critic, by rows whatever the key says
    native, _ = translate({"algorithm": {"algorithm_type": "ppo"}, "trainer": {"fix_actor_microbatch_loss_scale": True}}, "trinity")
    assert native["critic"]["micro_batch_weight"] == "rows" and native["actor"]["micro_batch_weight"] == "normaliser"
    assert "micro_batch_weight" not in translate({"algorithm": {"algorithm_type": "grpo"}}, "trinity")[0].get("critic", {})
    assert weight({"algorithm_type": "grpo", "loss_agg_mode": "seq-mean-token-mean"}, fix_actor_microbatch_loss_scale=True)[0] == "rows"
    # Trinity-RFT's dynamic batch size (its default) cuts micro-batches as verl does: rows-weighted means of the same rows
    native, _ = translate({"algorithm": {"algorithm_type": "ppo"}}, "trinity")
    assert native["actor"]["dynamic_bsz_partition"] == native["critic"]["dynamic_bsz_partition"] == "balanced"
    native, _ = translate({"algorithm": {"algorithm_type": "grpo"}, "trainer": {"use_dynamic_bsz": False}}, "trinity")
    assert "dynamic_bsz_partition" not in native["actor"]
    native, _ = translate({"algorithm": {"algorithm_type": "grpo"}, "trainer": {"fix_actor_microbatch_loss_scale": True}}, "trinity")
    assert "dynamic_bsz_partition" not in native["actor"]  # normaliser weights: the cut changes nothing
    # SFT: the batch's token mean with the fix, else each micro-batch's weighted by its sequences
    def scope(algorithm, **trainer):
        native, report = translate({"algorithm": algorithm, **({"trainer": trainer} if trainer else {})}, "trinity")
        return native.get("actor", {}).get("sft_loss_scope"), {e.key: e.status for e in report.entries}

    fixed = scope({"algorithm_type": "sft"}, fix_actor_microbatch_loss_scale=True)
    assert fixed[0] is None and fixed[1]["trainer.fix_actor_microbatch_loss_scale"] == "dropped"
    assert scope({"algorithm_type": "sft"})[0] == scope({"algorithm_type": "sft"}, fix_actor_microbatch_loss_scale=False)[0] == "micro_batch_rows"
    assert translate({"algorithm": {"algorithm_type": "sft"}}, "trinity")[0]["actor"]["dynamic_bsz_partition"] == "balanced"
    # DPO: per-pair means weighted by rows are the batch's pair mean (posttrain's); by tokens they are not
    assert scope({"algorithm_type": "dpo"}, fix_actor_microbatch_loss_scale=False)[1]["trainer.fix_actor_microbatch_loss_scale"] == "dropped"
    assert scope({"algorithm_type": "dpo"}, fix_actor_microbatch_loss_scale=True)[1]["trainer.fix_actor_microbatch_loss_scale"] == "refused"


def test_a_translation_reads_list_entries_by_the_report_s_indexed_keys():
    """Context.get takes the keys the report writes (``eval_tasksets[0].path``): a handler that reads
    an eval taskset by its key gets it, not the default."""
    from posttrain.config.dialects.translate import _at

    tree = {"buffer": {"explorer_input": {"eval_tasksets": [{"path": "a"}, {"path": "b", "ids": [3, 4]}]}}}
    assert _at(tree, "buffer.explorer_input.eval_tasksets[1].path", None) == "b"
    assert _at(tree, "buffer.explorer_input.eval_tasksets[1].ids[1]", None) == 4
    assert _at(tree, "buffer.explorer_input.eval_tasksets[2].path", "none") == "none"  # past the list
    assert _at(tree, "buffer.explorer_input[0]", "none") == "none"  # a mapping is not indexed
