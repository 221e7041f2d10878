"""actor.router_replay.mode R2 on tiny random MoE models: the old-log-prob forward records every
token's experts in the row layout, the update's forwards route to exactly those (even after the
weights moved, when the model's own choice differs), the replayed experts' weights follow each
family's own rule, and a dense model is refused naming the key."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from posttrain.errors import ConfigError
from posttrain.models.moe import router_modules
from posttrain.models.positions import concat_prompt_response
from posttrain.models.router_replay import WEIGHT_RULES, replay_routers
from worker_helpers import LENGTHS, make_batch, sgd_actor

L, K = 2, 2


def _qwen3(norm: bool = True):
    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=L,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=8, num_experts_per_tok=K,
        decoder_sparse_step=1, max_position_embeddings=64, norm_topk_prob=norm,
    )
    model = Qwen3MoeForCausalLM(config).float()
    for module, _ in router_modules(model):  # HF initialises Qwen3-MoE routers at zero: every token would tie
        torch.nn.init.normal_(module.weight, std=1.0)
    return model.train()


def _mixtral():
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=64, hidden_size=16, intermediate_size=16, num_hidden_layers=L, num_attention_heads=2, num_key_value_heads=1,
        head_dim=8, num_local_experts=8, num_experts_per_tok=K, max_position_embeddings=64,
    )
    model = MixtralForCausalLM(config).float()
    for module, _ in router_modules(model):
        torch.nn.init.normal_(module.weight, std=1.0)
    return model.train()


def _batch(model):
    batch = make_batch(model.config.vocab_size)
    batch.advantages = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(3)) * batch.response_mask
    return batch


def _own_routes(model, batch) -> torch.Tensor:
    """(B, S, L, K) each real token's top-k experts straight from the padded batch, in the row layout."""
    ids, attention, positions = concat_prompt_response(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    chosen = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: chosen.append(out[2])) for m, _ in router_modules(model)]
    with torch.no_grad():
        model.model(input_ids=ids, attention_mask=attention, position_ids=positions)
    for h in hooks:
        h.remove()
    index = torch.stack(chosen, dim=1).view(ids.shape[0], ids.shape[1], L, K)  # (B, S_pad, L, K)
    S = int(attention.sum(1).max())
    out = torch.zeros(ids.shape[0], S, L, K, dtype=torch.long)
    for b in range(ids.shape[0]):
        real = index[b][attention[b] > 0]
        out[b, : len(real)] = real
    return out


def _experts_seen(model):
    """Forward pre-hooks on each MoE block's experts: the (N, K) indices its tokens are sent to."""
    seen: list[torch.Tensor] = []
    blocks = [m for n, m in model.named_modules() if n.endswith("mlp.experts")]
    handles = [b.register_forward_pre_hook(lambda _m, args: seen.append(args[1].detach().clone())) for b in blocks]
    return seen, handles


@pytest.mark.parametrize("build", [_qwen3, _mixtral])
@pytest.mark.parametrize("batching", [dict(pack=True), dict(pack=False), dict(pack=True, micro_batch_size=3),
                                      dict(pack=False, max_tokens_per_micro_batch=20)])
def test_the_record_is_every_tokens_top_k_in_the_row_layout(build, batching):
    model = build()
    batch = _batch(model)
    actor = sgd_actor(model, router_replay=True, **batching)
    logprobs, routes = actor.old_logprobs_and_routes(batch)
    assert routes.dtype == torch.uint8 and routes.shape == (len(LENGTHS), max(p + t for p, t in LENGTHS), L, K)
    torch.testing.assert_close(logprobs, actor.compute_logprobs(batch), rtol=0, atol=1e-6)
    expected = _own_routes(model, batch)
    for b, (p, t) in enumerate(LENGTHS):  # the sets of experts per token (top-k order may differ on ties only)
        got = routes[b, : p + t].long().sort(-1).values
        assert torch.equal(got, expected[b, : p + t].sort(-1).values), b
        assert int(routes[b, p + t :].abs().sum()) == 0


@pytest.mark.parametrize("build", [_qwen3, _mixtral])
@pytest.mark.parametrize("pack", [True, False])
def test_the_update_routes_to_the_recorded_experts_after_the_weights_moved(build, pack):
    model = build()
    batch = _batch(model)
    # recorded in micro-batches of 3, replayed in one micro-batch of all rows: the layout is the rows', not the forward's
    batch.old_logprobs, batch.routes = sgd_actor(model, router_replay=True, pack=pack, micro_batch_size=3).old_logprobs_and_routes(batch)
    with torch.no_grad():  # move the routers: now the model's own choice differs for many tokens
        for module, _ in router_modules(model):
            module.weight.add_(torch.randn(module.weight.shape, generator=torch.Generator().manual_seed(5)) * 2.0)
    recorded = batch.routes.long().sort(-1).values
    own = _own_routes(model, batch).sort(-1).values
    real = torch.zeros(recorded.shape[:2], dtype=torch.bool)
    for b, (p, t) in enumerate(LENGTHS):
        real[b, : p + t] = True
    assert int((own != recorded).any(-1).any(-1)[real].sum()) > 5  # tokens whose own top-k is no longer the recorded one

    layout = _layout(batch, pack)
    for replay in (True, False):
        trained = copy.deepcopy(model)
        seen, handles = _experts_seen(trained)
        sgd_actor(trained, router_replay=replay, pack=pack).update(batch)  # one micro-batch: one forward
        for h in handles:
            h.remove()
        for layer, index in enumerate(seen[-L:]):  # the update's forward (before it: packing_supported's probes)  # (N, K) per decoder slot
            slots = layout.rows >= 0
            sent = index[slots].sort(-1).values  # (n, K) the experts each real token went to
            want = recorded[layout.rows[slots], layout.positions[slots], layer]
            mine = own[layout.rows[slots], layout.positions[slots], layer]
            if replay:
                assert torch.equal(sent, want)
            else:
                assert torch.equal(sent, mine) and not torch.equal(sent, want)


def _layout(batch, pack: bool):
    """Where each slot of the update's one forward comes from (its micro-batch is the whole batch, untrimmed)."""
    from posttrain.models.packing import pack_batch
    from posttrain.models.router_replay import RouteLayout

    if pack:
        packed = pack_batch(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
        assert packed is not None
        return RouteLayout(packed.token_rows.reshape(-1), packed.token_positions.reshape(-1))
    return RouteLayout.of_padded(batch.attention_mask)


def test_the_first_update_forward_gives_the_old_log_probs_and_checkpointing_replays_too():
    """Recorded padded in micro-batches of 3, replayed packed in one: ratio 1 on the first forward.
    With the routers moved after the record, a gradient-checkpointed update (whose backward runs
    each layer's forward again) gets the gradients of the plain replayed update."""
    model = _qwen3()
    batch = _batch(model)
    batch.old_logprobs, batch.routes = sgd_actor(model, router_replay=True, pack=False, micro_batch_size=3).old_logprobs_and_routes(batch)
    actor = sgd_actor(copy.deepcopy(model), router_replay=True, pack=True)
    seen = []
    loss_fn = actor.loss_fn
    actor.loss_fn = lambda **kw: seen.append(kw["logprob"].detach()) or loss_fn(**kw)
    actor.update(batch)
    torch.testing.assert_close(seen[0], batch.old_logprobs, rtol=0, atol=2e-6)

    with torch.no_grad():
        for module, _ in router_modules(model):
            module.weight.add_(torch.randn(module.weight.shape, generator=torch.Generator().manual_seed(5)) * 2.0)
    plain, checkpointed = copy.deepcopy(model), copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for m in (plain, checkpointed):
        sgd_actor(m, router_replay=True, pack=True).update(batch)
    for (name, a), (_, b) in zip(plain.named_parameters(), checkpointed.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7, msg=name)
    unreplayed = copy.deepcopy(model)
    unreplayed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    sgd_actor(unreplayed, pack=True).update(batch)
    gate = "model.layers.0.mlp.gate.weight"
    assert not torch.allclose(dict(unreplayed.named_parameters())[gate].grad, dict(plain.named_parameters())[gate].grad)


def _router(cls_name: str, **config):
    import transformers.models as models

    module = {"Qwen3MoeTopKRouter": "qwen3_moe", "Qwen2MoeTopKRouter": "qwen2_moe", "OlmoeTopKRouter": "olmoe",
              "MixtralTopKRouter": "mixtral", "GptOssTopKRouter": "gpt_oss"}[cls_name]
    cls = getattr(getattr(models, module), f"modeling_{module}").__dict__[cls_name]
    base = dict(num_experts_per_tok=2, num_experts=6, num_local_experts=6, hidden_size=8, norm_topk_prob=False)
    base.update(config)
    router = cls(type("Config", (), base)())
    torch.manual_seed(1)
    for p in router.parameters():
        torch.nn.init.normal_(p)
    return router


@pytest.mark.parametrize("name,config", [("Qwen3MoeTopKRouter", {"norm_topk_prob": True}), ("Qwen3MoeTopKRouter", {}),
                                         ("Qwen2MoeTopKRouter", {}), ("OlmoeTopKRouter", {"norm_topk_prob": True}),
                                         ("MixtralTopKRouter", {}), ("GptOssTopKRouter", {})])
def test_each_weight_rule_is_its_routers_own_at_the_replayed_experts(name, config):
    router = _router(name, **config)
    hidden = torch.randn(5, 8, generator=torch.Generator().manual_seed(2))
    logits, weights, index = router(hidden)
    torch.testing.assert_close(WEIGHT_RULES[name](router, logits, index), weights, rtol=0, atol=0)  # its own choice: unchanged
    other = torch.tensor([[5, 0]] * 5)  # experts the router did not pick: the rule at those, by hand
    got = WEIGHT_RULES[name](router, logits, other)
    if name == "GptOssTopKRouter":
        expected = torch.softmax(logits[:, [5, 0]], dim=-1)
    else:
        expected = torch.softmax(logits.float(), dim=-1)[:, [5, 0]]
        if name == "MixtralTopKRouter" or config.get("norm_topk_prob"):
            expected = expected / expected.sum(-1, keepdim=True)
    torch.testing.assert_close(got, expected.to(got.dtype), rtol=1e-6, atol=1e-7)


def test_a_dense_model_is_refused_naming_the_key():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dense = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(ConfigError, match=r"actor.router_replay.mode: R2 .* no MoE router"):
        replay_routers(dense)
    assert len(replay_routers(_qwen3())) == L


def test_an_update_without_recorded_routes_is_refused():
    model = _qwen3()
    batch = _batch(model)
    batch.old_logprobs = torch.zeros_like(batch.response_mask)
    with pytest.raises(ValueError, match="no recorded routes"):
        sgd_actor(model, router_replay=True).update(batch)


def test_the_router_loss_beside_replay_reads_the_current_logits():
    """moe_aux_loss_coef with R2: the load-balancing loss is computed from the router logits, as
    without replay (verl's patched router also computes it from the logits, not the replayed choice)."""
    model = _qwen3()
    batch = _batch(model)
    batch.old_logprobs, batch.routes = sgd_actor(model, router_replay=True).old_logprobs_and_routes(batch)
    replayed = sgd_actor(copy.deepcopy(model), router_replay=True, moe_aux_loss_coef=0.5, moe_top_k=K).update(batch)
    plain = sgd_actor(copy.deepcopy(model), moe_aux_loss_coef=0.5, moe_top_k=K).update(batch)
    assert replayed["actor/moe_aux_loss"] == pytest.approx(plain["actor/moe_aux_loss"], rel=1e-6)
    assert replayed["actor/moe_aux_loss"] > 0
