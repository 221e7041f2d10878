"""A short RL run of `posttrain train` on a tiny random Qwen3-MoE policy with
actor.router_replay.mode R2: it completes, logs the update, and trains other weights than the same
run without replay (both recompute the old log-probs; four epochs of two mini-batches: after the first optimizer step the routers'
own choice drifts from the recorded one, which only R2 keeps)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from knob_harness import Assets, observe
from posttrain.models.moe import router_modules
from posttrain.models.tiny import make_tiny_model
from posttrain.tasks import write_task_data

EPOCHS = ("actor.reuse_rollout_logprobs=never", "actor.ppo_epochs=4", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=4", "actor.optim.lr=0.03")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Assets:
    root = tmp_path_factory.mktemp("router_replay_run")
    dense = make_tiny_model(root / "dense", layers=1, hidden=32, heads=4, seed=0)  # for its tokenizer
    vocab = json.loads((dense / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=8, num_experts_per_tok=2,
        decoder_sparse_step=1, max_position_embeddings=128, tie_word_embeddings=False,
    ))
    for module, _ in router_modules(model):  # HF starts Qwen3-MoE routers at zero: every token would tie
        torch.nn.init.normal_(module.weight, std=1.0)
    model.save_pretrained(root / "moe")
    for path in dense.iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "chat_template", "generation_config")):
            shutil.copy(path, root / "moe" / path.name)
    write_task_data("sort", root / "data", train=8, test=4)
    return Assets(root, root / "moe", root / "data")


def test_an_rl_run_with_routing_replay_completes_and_trains_otherwise(assets):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        replayed = observe(assets, ("actor.router_replay.mode=R2", *EPOCHS), "r2")
        plain = observe(assets, EPOCHS, "plain")
    finally:
        torch.set_num_threads(threads)
    assert replayed.exit == (0, "") and plain.exit == (0, "")
    steps = {step for _file, step, name, _value in replayed.metrics if name == "actor/pg_loss"}
    assert steps == {1, 2}
    assert replayed.responses[0] == plain.responses[0]  # step 1's batch sampled alike: the runs part at the update
    assert replayed.weights != plain.weights
