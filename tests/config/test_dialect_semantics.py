"""ROLL and Trinity-RFT keys mean what they mean in their framework, not posttrain's defaults.

Each test states the framework's own semantics in a comment (read from its config dataclasses and
workers) and checks that the translated config makes posttrain compute the same thing.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest
import torch

from posttrain.algorithms.kl import kl_penalty
from posttrain.algorithms.policy_losses import ppo_clip_loss
from posttrain.algorithms.value import value_loss
from posttrain.config import ConfigError, load_config
from posttrain.config.dialects import translate
from posttrain.trainer.rl_settings import loss_options


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _roll(tmp_path: Path, extra: str) -> Path:
    """A small ROLL RLVR pipeline config, plus ``extra`` top-level YAML."""
    base = textwrap.dedent(f"""\
        pretrain: {tmp_path}/model
        rollout_batch_size: 2
        num_return_sequences_in_group: 4
        prompt_length: 32
        response_length: 8
        adv_estimator: grpo
        num_gpus_per_node: 1
        actor_train:
          training_args: {{learning_rate: 1.0e-5, per_device_train_batch_size: 2, gradient_accumulation_steps: 2}}
          data_args: {{file_name: [{tmp_path}/train.parquet]}}
        actor_infer:
          generating_args: {{temperature: 0.8, top_p: 0.9, top_k: 20, num_return_sequences: 4, max_new_tokens: 8}}
          strategy_args: {{strategy_name: hf_infer}}
    """)
    return _write(tmp_path / "roll.yaml", base + extra)


def _native(raw: dict, dialect: str) -> tuple[dict, object]:
    return translate(raw, dialect)


def _at(native: dict, dotted: str, default=KeyError):
    node = native
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is KeyError:
                raise KeyError(dotted)
            return default
        node = node[part]
    return node


def _one_token_loss(cfg, ratio: float, advantage: float) -> float:
    """The actor's policy loss of one token with this ratio and advantage, under ``cfg``."""
    old = torch.zeros(1, 1)
    return float(ppo_clip_loss(old_logprob=old, logprob=old + math.log(ratio), advantages=torch.full((1, 1), advantage),
                               response_mask=torch.ones(1, 1), **loss_options(cfg)).loss)


# ---- ROLL ------------------------------------------------------------------------------------------


def test_roll_dual_clip_bound_is_one_plus_twice_pg_clip(tmp_path):
    # ROLL's actor workers, with dual_clip_loss: loss = -min(r A, clip(r, 1-e, 1+e) A), then for A < 0
    # loss = -max(-loss, (1 + 2 pg_clip) A): the bound is 1 + 2 x pg_clip, not a separate constant.
    cfg = load_config(_roll(tmp_path, "dual_clip_loss: true\npg_clip: 0.1\n"))
    assert (cfg.actor.dual_clip, cfg.actor.clip_ratio_c, cfg.actor.clip_ratio) == (True, pytest.approx(1.2), 0.1)
    # ratio 2, A = -1: the clipped surrogate is 2.0, ROLL's dual clip caps it at (1 + 2 x 0.1) x 1 = 1.2
    assert _one_token_loss(cfg, ratio=2.0, advantage=-1.0) == pytest.approx(1.2)
    # ROLL's default dual_clip_loss is false: no cap at all (posttrain's own default would cap at 3.0)
    plain = load_config(_roll(tmp_path, ""))
    assert plain.actor.dual_clip is False and _one_token_loss(plain, ratio=5.0, advantage=-1.0) == pytest.approx(5.0)
    _, report = translate({"dual_clip_loss": True, "pg_clip": None}, "roll")
    assert "1 + 2 x pg_clip" in report.entry("dual_clip_loss").reason and report.entry("dual_clip_loss").status == "refused"


def test_roll_validation_samples_with_its_generating_args(tmp_path):
    # ROLL's validation worker generates with GeneratingArguments: do_sample defaults to true and
    # temperature/top_p/top_k to 0.95/0.7/50, so validation samples unless the file turns it off.
    extra = "validation:\n  data_args: {file_name: [x.jsonl]}\n  generating_args: {temperature: 0.6, max_new_tokens: 8}\n"
    cfg = load_config(_roll(tmp_path, extra))
    val = cfg.rollout.val_kwargs
    assert (val.do_sample, val.temperature, val.top_p, val.top_k) == (True, 0.6, 0.7, 50)
    greedy = load_config(_roll(tmp_path, extra.replace("temperature: 0.6", "do_sample: false")))
    assert greedy.rollout.val_kwargs.do_sample is False
    # training generation: what actor_infer.generating_args omits takes ROLL's defaults too
    native, _ = translate({"actor_infer": {"generating_args": {"temperature": 0.8}}}, "roll")
    assert _at(native, "rollout") == {"temperature": 0.8, "top_p": 0.7, "top_k": 50}
    assert _at(native, "rollout.val_kwargs", None) is None  # no validation worker, no validation settings


def test_roll_nulls_mean_off(tmp_path):
    # ROLL's PPOConfig: value_clip Optional (null: the value loss is not clipped), target_kl Optional
    # (null: the fixed KL controller; a number selects the adaptive one), and the example files'
    # `reward_norm: None` / `reward_norm: null` normalise nothing.
    cfg = load_config(_roll(tmp_path, "value_clip: ~\ntarget_kl: ~\nreward_norm: None\n"))
    assert cfg.critic.cliprange_value is None and cfg.algorithm.kl_ctrl.type == "fixed"
    assert (cfg.algorithm.reward_norm_mean, cfg.algorithm.reward_norm_std) == (None, None)
    assert load_config(_roll(tmp_path, "reward_norm: null\n")).algorithm.reward_norm_mean is None
    assert load_config(_roll(tmp_path, "")).critic.cliprange_value is None  # ROLL's default is null too
    # null clipping: a value that moved 2.0 from the rollout's is penalised in full (0.5 x 2^2)
    v = torch.tensor([[2.0]])
    unclipped = value_loss(v, torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), cfg.critic.cliprange_value)
    assert float(unclipped.loss) == pytest.approx(2.0)
    adaptive = load_config(_roll(tmp_path, "target_kl: 0.05\nvalue_clip: 0.2\n"))
    assert (adaptive.algorithm.kl_ctrl.type, adaptive.algorithm.kl_ctrl.target_kl, adaptive.critic.cliprange_value) == ("adaptive", 0.05, 0.2)


def _mini(strategy: dict, devices: str, per_device: int = 2, steps: int = 4, n: int = 8):
    raw = {"num_return_sequences_in_group": n, "actor_train": {
        "training_args": {"per_device_train_batch_size": per_device, "gradient_accumulation_steps": steps},
        "device_mapping": devices, "strategy_args": strategy}}
    native, report = translate(raw, "roll")
    return _at(native, "actor.ppo_mini_batch_size", None), report.entry("actor_train.training_args.gradient_accumulation_steps")


def test_roll_gradient_accumulation_counts_data_parallel_ranks():
    # ROLL: one optimizer step takes per_device_train_batch_size x gradient_accumulation_steps responses
    # on each data-parallel rank, and the ranks are devices / (TP x PP x CP) for Megatron, devices /
    # ulysses_size for FSDP2. 16 devices at TP 2, CP 2: 4 ranks x 2 x 4 = 32 responses = 4 prompts of 8.
    megatron = {"strategy_name": "megatron_train", "strategy_config": {"tensor_model_parallel_size": 2, "context_parallel_size": 2}}
    prompts, entry = _mini(megatron, "list(range(0,16))")
    assert prompts == 4 and "4 data-parallel ranks (16 devices / TP 2 x PP 1 x CP 2)" in entry.reason
    prompts, _ = _mini({"strategy_name": "deepspeed_train"}, "list(range(0,16))")
    assert prompts == 16  # no model parallelism: every device is a rank
    raw = {"num_return_sequences_in_group": 4, "actor_train": {"model_args": {"ulysses_size": 2},
           "training_args": {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 8},
           "device_mapping": "list(range(0,8))", "strategy_args": {"strategy_name": "fsdp2_train"}}}
    native, _ = translate(raw, "roll")
    assert native["actor"]["ppo_mini_batch_size"] == 8  # 8 / 2 ranks x 1 x 8 / 4
    prompts, entry = _mini({"strategy_name": "megatron_train", "strategy_config": {"tensor_model_parallel_size": 3}}, "list(range(0,16))")
    assert prompts is None and entry.status == "refused" and "TP 3 x PP 1 x CP 1 = 3" in entry.reason


# ---- Trinity-RFT -----------------------------------------------------------------------------------


def test_trinity_kl_loss_follows_the_algorithm_type():
    # Trinity-RFT's algorithm types: ppo and grpo default to kl_loss_fn k2 with kl_coef 0.001 and
    # kl_penalty_fn none; sft uses none; the KL loss is on exactly when kl_loss_fn is not none, KL in
    # the reward exactly when kl_penalty_fn is not none. No algorithm_type is Trinity's default, ppo.
    native, _ = translate({"algorithm": {"algorithm_type": "grpo", "repeat_times": 4}}, "trinity")
    actor = native["actor"]
    assert (actor["use_kl_loss"], actor["kl_loss_type"], actor["kl_loss_coef"]) == (True, "k2", 0.001)
    assert native["algorithm"]["use_kl_in_reward"] is False
    assert translate({"buffer": {"batch_size": 4}}, "trinity")[0]["actor"]["use_kl_loss"] is True  # ppo
    off, _ = translate({"algorithm": {"algorithm_type": "grpo", "kl_loss_fn": "none"}}, "trinity")
    assert off["actor"]["use_kl_loss"] is False and "kl_loss_type" not in off["actor"]
    sft, report = translate({"algorithm": {"algorithm_type": "sft", "kl_loss_fn": "none"}}, "trinity")
    assert "use_kl_loss" not in sft.get("actor", {}) and report.entry("algorithm.kl_loss_fn").status == "dropped"
    reward, _ = translate({"algorithm": {"algorithm_type": "ppo", "kl_penalty_fn": "k3", "kl_penalty_fn_args": {"kl_coef": 0.01}}}, "trinity")
    assert (reward["algorithm"]["use_kl_in_reward"], reward["algorithm"]["kl_penalty"], reward["algorithm"]["kl_ctrl"]["kl_coef"]) == (True, "k3", 0.01)
    # Trinity's k2 is (log pi - log pi_ref)^2 / 2: posttrain's k2 gives the same number
    assert float(kl_penalty(torch.tensor([[0.1]]), torch.tensor([[-0.3]]), "k2")) == pytest.approx(0.5 * 0.4**2)
    stage, _ = translate({"stages": [{"stage_name": "s", "algorithm": {"algorithm_type": "sft"}}, {"stage_name": "r", "algorithm": {"algorithm_type": "grpo"}}]}, "trinity")
    assert "actor" not in stage["stages"][0] and stage["stages"][1]["actor"]["use_kl_loss"] is True


@pytest.mark.parametrize("model, expected", [
    ({"max_model_len": 100, "max_response_tokens": 30}, (100, 70, 30)),  # prompt = max_model_len - response
    ({"max_model_len": 100, "max_prompt_tokens": 40}, (100, 40, 60)),  # response = max_model_len - prompt
    ({"max_model_len": 101}, (101, 50, 51)),  # neither: split in half
    ({"max_prompt_tokens": 40, "max_response_tokens": 20}, (60, 40, 20)),  # max_model_len is the sum
    ({"max_model_len": 100, "max_response_tokens": 150}, (100, 1, 99)),  # response capped at max_model_len - 1
])
def test_trinity_lengths_are_derived_like_trinity(model, expected):
    # Trinity-RFT's model validation derives the missing one of max_model_len, max_prompt_tokens and
    # max_response_tokens from the others, in these four ways.
    native, _ = translate({"model": model}, "trinity")
    got = (native["model"]["max_model_len"], native["data"]["max_prompt_length"], native["data"]["max_response_length"])
    assert got == expected


def test_trinity_lengths_that_do_not_fit_are_refused():
    _, report = translate({"model": {"max_model_len": 50, "max_prompt_tokens": 40, "max_response_tokens": 20}}, "trinity")
    entry = report.entry("model.max_model_len")
    assert entry.status == "refused" and "(40 + 20) exceeds max_model_len (50)" in entry.reason


def test_trinity_critic_and_dynamic_batching_defaults(tmp_path):
    # Trinity-RFT: trainer.use_dynamic_bsz defaults to true and trainer.max_token_len_per_gpu to
    # ceil(2 x max_model_len / ulysses_sequence_parallel_size); both apply to actor and critic, a
    # budget below max_model_len / sp is raised to it, and the critic's mini-batch is the actor's.
    raw = {"algorithm": {"algorithm_type": "ppo", "repeat_times": 4}, "model": {"max_model_len": 100},
           "buffer": {"batch_size": 4, "train_batch_size": 16}}
    native, _ = translate(raw, "trinity")
    for role in ("actor", "critic"):
        assert (native[role]["use_dynamic_bsz"], native[role]["ppo_max_token_len_per_gpu"], native[role]["ppo_mini_batch_size"]) == (True, 200, 4)
    raw["trainer"] = {"max_token_len_per_gpu": 30, "use_dynamic_bsz": False}
    native, report = translate(raw, "trinity")
    assert native["critic"]["ppo_max_token_len_per_gpu"] == 100 and "raised" in report.entry("trainer.max_token_len_per_gpu").reason
    assert native["critic"]["use_dynamic_bsz"] is False
    # a role's value in the inline verl config wins over the trainer-wide one
    raw["trainer"] = {"trainer_config": {"critic": {"use_dynamic_bsz": False, "ppo_mini_batch_size": 2}}}
    native, _ = translate(raw, "trinity")
    assert (native["critic"]["use_dynamic_bsz"], native["actor"]["use_dynamic_bsz"], native["critic"]["ppo_mini_batch_size"]) == (False, True, 2)
    raw["trainer"] = {"ulysses_sequence_parallel_size": 2}  # Trinity-RFT gives it to actor, reference and critic
    native, _ = translate(raw, "trinity")
    assert native["actor"]["ulysses_sequence_parallel_size"] == native["critic"]["ulysses_sequence_parallel_size"] == 2
    assert native.get("ref", {}).get("ulysses_sequence_parallel_size") is None  # null: the actor's size
    path = _write(tmp_path / "t.yaml", "algorithm: {algorithm_type: ppo, repeat_times: 2}\nmodel: {model_path: m, max_model_len: 64}\nbuffer: {batch_size: 4}\n")
    cfg = load_config(path)
    assert (cfg.critic.use_dynamic_bsz, cfg.critic.ppo_max_token_len_per_gpu, cfg.critic.ppo_mini_batch_size, cfg.data.max_prompt_length) == (True, 128, 4, 32)


def test_refusals_still_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"dual_clip_loss \(posttrain: actor.dual_clip\): expected true or false, got .sometimes."):
        load_config(_roll(tmp_path, "dual_clip_loss: sometimes\n"))
