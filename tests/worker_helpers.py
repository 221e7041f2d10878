"""Builders shared by the worker tests (a module name no other test folder uses).

The batches are hand-made so that every row has a different prompt and response length: the
micro-batch arithmetic is only tested when trimming and token packing change the shapes.
"""

from __future__ import annotations

import torch

from posttrain.records import RolloutBatch
from posttrain.workers import Actor, ActorSettings, Critic, CriticSettings

def tiny_moe_config(**overrides):
    """A 2-layer Qwen3-MoE of 4 experts, 2 per token (hidden 16): the router-loss tests' model."""
    from transformers import Qwen3MoeConfig

    shape = dict(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=4, num_experts_per_tok=2,
                 decoder_sparse_step=1, max_position_embeddings=64, router_aux_loss_coef=0.001)
    return Qwen3MoeConfig(**{**shape, **overrides})


# (prompt length, response length) per row: all different, two rows with a long response.
LENGTHS = [(3, 5), (5, 2), (2, 7), (4, 1), (1, 6), (5, 4), (3, 3)]
P_MAX, T_MAX = 5, 7


def make_batch(vocab: int, lengths=LENGTHS, seed: int = 0) -> RolloutBatch:
    """Left-padded prompts and right-padded responses with random ids; padding ids are 0."""
    g = torch.Generator().manual_seed(seed)
    B = len(lengths)
    P = max(p for p, _ in lengths)
    T = max(t for _, t in lengths)
    prompt_ids = torch.zeros(B, P, dtype=torch.long)  # (B, P)
    prompt_mask = torch.zeros(B, P)  # (B, P)
    response_ids = torch.zeros(B, T, dtype=torch.long)  # (B, T)
    response_mask = torch.zeros(B, T)  # (B, T)
    for i, (p, t) in enumerate(lengths):
        prompt_ids[i, P - p :] = torch.randint(3, vocab, (p,), generator=g)
        prompt_mask[i, P - p :] = 1.0
        response_ids[i, :t] = torch.randint(3, vocab, (t,), generator=g)
        response_mask[i, :t] = 1.0
    return RolloutBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        rollout_logprobs=torch.zeros(B, T),
        weights_version=torch.zeros(B, dtype=torch.long),
        group_index=[f"g{i // 2}" for i in range(B)],
        data_source=["toy"] * B,
        ground_truth=[None] * B,
        extra_info=[{} for _ in range(B)],
        raw_prompt=[""] * B,
    )


def answer_batch(tokenizer, answers: list[str], groups: list[str] | None = None, data_source: str = "posttrain/sort") -> RolloutBatch:
    """A batch whose responses are `answers` (each ended by EOS, right-padded) to 2-token prompts with
    ground truth "12": what the reward stage's tests score. `groups`: each row's group (one group "u")."""
    ids = [tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for a in answers]
    width = max(map(len, ids))
    n = len(answers)
    return RolloutBatch(
        prompt_ids=torch.ones(n, 2, dtype=torch.long), prompt_mask=torch.ones(n, 2),
        response_ids=torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in ids]),  # (B, T)
        response_mask=torch.tensor([[1.0] * len(row) + [0.0] * (width - len(row)) for row in ids]),  # (B, T)
        rollout_logprobs=torch.zeros(n, width), weights_version=torch.zeros(n, dtype=torch.long),
        group_index=groups if groups is not None else ["u"] * n,
        data_source=[data_source] * n, ground_truth=["12"] * n, extra_info=[{}] * n, raw_prompt=[None] * n,
    )


def noisy(t: torch.Tensor, mask: torch.Tensor, scale: float, seed: int) -> torch.Tensor:
    """`t` plus Gaussian noise on valid positions (so PPO ratios differ from 1 and clipping binds)."""
    g = torch.Generator().manual_seed(seed)
    return (t + scale * torch.randn(t.shape, generator=g)) * mask


class NoSchedule:
    """A scheduler that counts its steps and changes nothing."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> None:
        self.steps += 1


def actor_settings(**kw) -> ActorSettings:
    base = dict(
        temperature=1.0,
        loss_mode="vanilla",
        loss_options={"clip_ratio": 0.2, "clip_ratio_c": 3.0},
        loss_agg_mode="token-mean",
        loss_scale_factor=None,
        entropy_coeff=0.0,
        use_kl_loss=False,
        kl_loss_coef=0.0,
        kl_loss_type="low_var_kl",
        ppo_epochs=1,
        mini_batch_size=len(LENGTHS),
        micro_batch_size=len(LENGTHS),
        max_tokens_per_micro_batch=None,
        grad_clip=None,
        shuffle=False,
    )
    base.update(kw)
    return ActorSettings(**base)


def sgd_actor(model, lr: float = 0.0, scheduler=None, **kw) -> Actor:
    """An actor with plain SGD: lr=0 leaves the weights and keeps the last step's gradients in .grad."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    return Actor(model, opt, scheduler or NoSchedule(), actor_settings(**kw))


def critic_settings(**kw) -> CriticSettings:
    base = dict(
        ppo_epochs=1,
        mini_batch_size=len(LENGTHS),
        micro_batch_size=len(LENGTHS),
        cliprange_value=0.5,
        grad_clip=None,
    )
    base.update(kw)
    return CriticSettings(**base)


def sgd_critic(model, lr: float = 0.0, **kw) -> Critic:
    return Critic(model, torch.optim.SGD(model.parameters(), lr=lr), NoSchedule(), critic_settings(**kw))


def grads(model) -> dict[str, torch.Tensor]:
    """Every parameter's gradient (zeros where a parameter got none), cloned."""
    return {
        n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
        for n, p in model.named_parameters()
    }


def assert_same_grads(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rtol=1e-4, atol=1e-7) -> None:
    """Equal to float rounding. Summing micro-batches in another order moves each entry by a few
    ulps of the largest terms summed, not of the entry itself, so the absolute tolerance grows with
    the tensor's scale (token-sum losses have gradients ~T times larger than token-mean ones)."""
    for name in a:
        scale = float(b[name].abs().max())
        torch.testing.assert_close(a[name], b[name], rtol=rtol, atol=atol + 1e-5 * scale, msg=lambda m: f"{name}: {m}")


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
