"""LoRA in the RL stage (and SFT, DPO) on rl_helpers' 1-layer model (hidden 32, 4 heads of 8 and 4 kv
heads, MLP 96, vocabulary 100): what is trained, what the reference and the engine compute, what the
checkpoints, the final model and `posttrain export` hold, and starting from an adapter."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from posttrain.cli import main as cli_main
from posttrain.cluster.weight_sync import MergedAdapters
from posttrain.config.load import load_config
from posttrain.data import collate_prompts
from posttrain.models.logprobs import response_logprobs
from posttrain.models.lora import is_lora, quiet_peft
from posttrain.trainer.dpo import run_dpo
from posttrain.trainer.sft import run_sft
from posttrain.trainer.stage import StageContext
from rl_helpers import tiny_rl_files, tiny_rl_trainer

LORA = ("model.lora_rank=4", "model.lora_alpha=8", "actor.optim.lr=0.05")
# Rank 4 on one layer: r * (in + out) for q, k, v, o (32->32 each) and gate, up (32->96), down (96->32).
ACTOR_ADAPTER = 4 * (4 * 64 + 3 * 128)  # 2560
# The critic at rank 2, plus its new value head (32 weights and a bias) trained whole.
CRITIC_ADAPTER = 2 * (4 * 64 + 3 * 128) + 33  # 1313


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_rl_files(tmp_path_factory.mktemp("lora_rl"))


def base_model(files):
    return AutoModelForCausalLM.from_pretrained(files[1], dtype=torch.float32).eval()


def prompts(trainer, step):
    rows = trainer.sampler.next_batch()
    return collate_prompts([trainer.train_set[i] for i in rows], trainer.pad_id, uid_prefix=f"s{step}")


def logprobs_of(model, batch):
    with torch.no_grad():
        return response_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask).logprobs


def test_the_roles_share_one_base_model_and_train_only_the_adapters(files):
    trainer = tiny_rl_trainer(files, *LORA, "actor.use_kl_loss=true", "algorithm.adv_estimator=gae",
                              "critic.ppo_mini_batch_size=4", "critic.model.lora_rank=2", run="roles")
    roles = trainer.roles
    trained = [p for g in roles.actor.optimizer.param_groups for p in g["params"]]
    assert sum(p.numel() for p in trained) == ACTOR_ADAPTER
    critic = [p for g in roles.critic.optimizer.param_groups for p in g["params"]]
    assert sum(p.numel() for p in critic) == CRITIC_ADAPTER
    assert roles.reference.model is roles.actor.model  # no second copy of the weights
    assert isinstance(roles.sync, MergedAdapters)
    assert not is_lora(roles.engine.model) and roles.engine.uses_lean_decoder()  # a plain copy to merge into
    assert roles.engine.model is not roles.actor.model


def test_the_reference_is_the_base_model_and_the_engine_samples_the_merged_policy(files):
    trainer = tiny_rl_trainer(files, *LORA, "actor.use_kl_loss=true", run="merged")
    roles = trainer.roles
    roles.sync.push(roles.actor.version)
    trainer.step(prompts(trainer, 1), 1)  # one update moves the adapter; the step ends with the sync
    assert roles.actor.version == 1
    batch = roles.rollout.generate(prompts(trainer, 2), trainer.sampling, expected_version=1)
    actor = roles.actor.compute_logprobs(batch)
    base = logprobs_of(base_model(files), batch)
    assert not torch.allclose(actor, base, atol=1e-3)  # the adapter changed the policy
    # the engine's own log-probs (merged weights, lean decoder) are the actor's (LoRA layers)
    assert torch.allclose(batch.rollout_logprobs, actor, atol=1e-5)
    # the reference (adapters off) is the base model exactly, and leaves the actor as it was
    roles.actor.model.train()
    assert torch.equal(roles.reference.compute_logprobs(batch), base)
    assert roles.actor.model.training
    assert all(p.requires_grad for n, p in roles.actor.model.named_parameters() if "lora_" in n)
    assert torch.equal(roles.actor.compute_logprobs(batch), actor)


def test_checkpoints_hold_the_adapter_the_final_model_is_merged_and_export_writes_either(files, tmp_path, capsys):
    trainer = tiny_rl_trainer(files, *LORA, "trainer.total_training_steps=2", "trainer.save_freq=1", run="saved")
    trainer.fit()
    run = files[0] / "saved"
    actor = run / "checkpoints" / "global_step_2" / "actor"
    assert sorted(p.name for p in actor.iterdir() if p.suffix in (".json", ".safetensors", ".pt")) == [
        "adapter_config.json", "adapter_model.safetensors", "extra.pt", "optimizer.pt", "tokenizer.json", "tokenizer_config.json"]
    assert len(torch.load(actor / "optimizer.pt")["state"]) == 14  # AdamW moments of A and B of 7 layers, nothing else
    config = json.loads((actor / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(files[1].resolve()) and config["r"] == 4
    final = load_file(str(run / "final_model" / "model.safetensors"))
    merged = trainer.roles.engine.model.state_dict()
    assert final.keys() == merged.keys()
    assert all(torch.equal(final[k], merged[k]) for k in final)  # the policy the engine sampled from
    base = load_file(str(files[1] / "model.safetensors"))
    assert not torch.equal(final["model.layers.0.mlp.down_proj.weight"], base["model.layers.0.mlp.down_proj.weight"])
    assert torch.equal(final["model.embed_tokens.weight"], base["model.embed_tokens.weight"])  # not targeted: unchanged
    assert (run / "final_model" / "adapter" / "adapter_model.safetensors").is_file()

    assert cli_main(["export", str(run), str(tmp_path / "adapter")]) == 0
    assert "(LoRA adapter)" in capsys.readouterr().out
    assert not (tmp_path / "adapter" / "model.safetensors").exists() and (tmp_path / "adapter" / "tokenizer.json").is_file()
    with quiet_peft():
        peft_model = PeftModel.from_pretrained(base_model(files), tmp_path / "adapter")
    plain = AutoModelForCausalLM.from_pretrained(run / "final_model", dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 30, 44, 2, 9]])
    with torch.no_grad():
        assert torch.allclose(peft_model(ids).logits, plain(ids).logits, atol=1e-5)
    for source in (run, actor):  # the final model's files, or merged by peft from the checkpoint's adapter
        out = tmp_path / f"merged_{source.name}"
        assert cli_main(["export", str(source), str(out), "--merge"]) == 0
        assert "(model)" in capsys.readouterr().out
        exported = load_file(str(out / "model.safetensors"))
        assert exported.keys() == final.keys()
        assert all(torch.allclose(exported[k], final[k], atol=1e-6) for k in final)
        assert not (out / "adapter_config.json").exists()


def test_a_run_starts_from_an_adapter_given_by_lora_adapter_path(files, tmp_path):
    first = tiny_rl_trainer(files, *LORA, "trainer.total_training_steps=1", run="first")
    first.fit()
    adapter = files[0] / "first" / "final_model" / "adapter"
    second = tiny_rl_trainer(files, f"model.lora_adapter_path={adapter}", "actor.use_kl_loss=true", run="second")
    assert sum(p.numel() for g in second.roles.actor.optimizer.param_groups for p in g["params"]) == ACTOR_ADAPTER
    second.roles.sync.push(0)  # as fit() does before the first rollout
    final = load_file(str(files[0] / "first" / "final_model" / "model.safetensors"))
    engine = second.roles.engine.model.state_dict()
    assert all(torch.allclose(engine[k], final[k], atol=1e-6) for k in final)  # it continues the first run's policy
    batch = second.roles.rollout.generate(prompts(second, 1), second.sampling, expected_version=0)
    assert torch.equal(second.roles.reference.compute_logprobs(batch), logprobs_of(base_model(files), batch))


def test_the_critic_trains_its_adapter_and_value_head_only(files):
    trainer = tiny_rl_trainer(files, "algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=4", "critic.model.lora_rank=2",
                              "critic.optim.lr=0.05", run="critic")
    critic = trainer.roles.critic.model
    before = {n: p.detach().clone() for n, p in critic.named_parameters()}
    trainer.step(prompts(trainer, 1), 1)
    moved = {n for n, p in critic.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all("lora_" in n or n.startswith("score.modules_to_save") for n in moved)
    assert any(n.startswith("score.modules_to_save") for n in moved)
    assert not is_lora(trainer.roles.actor.model)  # the policy trains all its weights here


def _stage(files, name, *overrides):
    root, model = files
    cfg = load_config(None, [f"model.path={model}", *overrides, "trainer.logger=[jsonl]", "actor.ppo_micro_batch_size_per_gpu=4"])
    return StageContext(name="main", cfg=cfg, run_dir=root / name, model_path=str(model))


def test_sft_and_dpo_train_an_adapter_and_dpo_s_reference_is_the_base_model(files, tmp_path):
    from posttrain.tasks import write_task_data

    data = tmp_path / "data"
    write_task_data("sort", data, train=4, test=0, sft=8, dpo=8)
    lora = ("model.lora_rank=4", "actor.optim.lr=0.05", "trainer.total_training_steps=2", "data.train_batch_size=4", "data.max_length=48")
    sft = run_sft(_stage(files, "sft", "algorithm.kind=sft", f"data.train_files={data}/sft_train.parquet", *lora))
    dpo = run_dpo(_stage(files, "dpo", "algorithm.kind=dpo", f"data.train_files={data}/dpo_train.parquet", *lora))
    base = load_file(str(files[1] / "model.safetensors"))
    for result in (sft, dpo):
        final = load_file(str(result.final_model / "model.safetensors"))
        assert not torch.equal(final["model.layers.0.self_attn.q_proj.weight"], base["model.layers.0.self_attn.q_proj.weight"])
        assert torch.equal(final["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
        assert (result.final_model / "adapter" / "adapter_config.json").is_file()
    rows = [json.loads(line) for line in (files[0] / "dpo" / "metrics.jsonl").read_text().splitlines()]
    # Step 1: the policy (a fresh adapter) is the reference (adapters off) exactly, so every implicit
    # reward is 0; step 2 comes after an update, and the policy moved away from the reference.
    assert (rows[0]["dpo/chosen_reward"], rows[0]["dpo/margin"]) == (0.0, 0.0)
    assert rows[1]["dpo/margin"] != 0.0


@pytest.mark.parametrize("fp32", [True, False])
def test_over_a_bf16_model_the_adapters_their_moments_and_saved_files_are_fp32_unless_asked(files, fp32):
    trainer = tiny_rl_trainer(files, *LORA, "model.dtype=bf16", f"model.autocast_adapter_dtype={str(fp32).lower()}",
                              "trainer.total_training_steps=1", "trainer.save_freq=1", run=f"bf16_{fp32}")
    trainer.fit()
    want, file_dtype = (torch.float32, "F32") if fp32 else (torch.bfloat16, "BF16")
    model = trainer.roles.actor.model
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {want}
    assert {p.dtype for n, p in model.named_parameters() if "lora_" not in n} == {torch.bfloat16}
    moments = torch.load(files[0] / f"bf16_{fp32}" / "checkpoints" / "global_step_1" / "actor" / "optimizer.pt")["state"]
    assert {s["exp_avg"].dtype for s in moments.values()} == {want}
    with safe_open(str(files[0] / f"bf16_{fp32}" / "final_model" / "adapter" / "adapter_model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {file_dtype}
    merged = load_file(str(files[0] / f"bf16_{fp32}" / "final_model" / "model.safetensors"))
    assert {t.dtype for t in merged.values()} == {torch.bfloat16}  # merged in fp32, rounded once to the model's dtype
