"""One forward row per prompt group: the prompt once, then each of its responses (an explicit,
work-changing option: `actor.share_prompt_forward`).

GRPO-style batches hold n responses per prompt, so a padded or packed forward computes every prompt
n times. Here a group's row is `[prompt | response 1 | ... | response n]` with a 4-D attention mask
that lets each response see the prompt and its own earlier tokens only, and position ids that
continue every response from the end of the prompt. Each response token then gets the hidden state
it gets alone: the same attention over the same keys, up to float rounding. The gradient reaching
the prompt's activations is the sum over the n responses, as with n separate copies.

The work changes: prompt tokens are computed once instead of n times (with 8 responses of 16
tokens after a 25-token prompt, 2,450 token positions become ~1,200), while attention now spans a
row of prompt + all responses (its mask hides most of it, but dense kernels still compute it), so
the option pays when prompts are long relative to responses. `shared_prompt_supported` checks once
per model and attention kernel that the model honours a custom 4-D mask; a model that does not
keeps the ordinary path.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor, nn

from posttrain.models.packing import PackedBatch, _contiguous

_SUPPORTED: "weakref.WeakKeyDictionary[nn.Module, dict[str, bool]]" = weakref.WeakKeyDictionary()
# Attention kernels whose mask input we know how to write: bool (True = attend) or additive float.
_MASK_KINDS = {"sdpa": "bool", "eager": "additive"}


def pack_shared_prompts(
    prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor, pad_id: int = 0
) -> PackedBatch | None:
    """Rows of `[prompt | responses...]` per group of identical prompts, with a (K, 1, W, W) bool
    mask; None when no prompt repeats or the masks are not the record layout."""
    B, P = prompt_ids.shape
    T = response_ids.shape[1]
    a = prompt_mask.sum(1).long()  # (B,)
    c = response_mask.sum(1).long()  # (B,)
    if bool((a == 0).any()) or not (_contiguous(prompt_mask, a, left=True) and _contiguous(response_mask, c, left=False)):
        return None
    key = torch.cat([prompt_ids, prompt_mask.long()], dim=1)  # (B, 2P)
    _, group = torch.unique(key, dim=0, return_inverse=True)  # (B,)
    K = int(group.max()) + 1
    if K == B:
        return None
    members: list[list[int]] = [[] for _ in range(K)]
    for i, g in enumerate(group.tolist()):
        members[g].append(i)
    a_l, c_l = a.tolist(), c.tolist()
    widths = [a_l[m[0]] + sum(c_l[i] for i in m) for m in members]
    W = max(widths)
    ids = torch.full((K, W), pad_id, dtype=prompt_ids.dtype)
    pos = torch.zeros(K, W, dtype=torch.long)
    seg = torch.full((K, W), -1, dtype=torch.long)  # 0 prompt, j + 1 response j, -1 unused
    gather = torch.zeros(B, T, dtype=torch.long)
    pids, rids = prompt_ids.cpu(), response_ids.cpu()
    for g, m in enumerate(members):
        n_p = a_l[m[0]]
        ids[g, :n_p] = pids[m[0], P - n_p :]
        pos[g, :n_p] = torch.arange(n_p)
        seg[g, :n_p] = 0
        start = n_p
        for j, i in enumerate(m):
            n_r = c_l[i]
            ids[g, start : start + n_r] = rids[i, :n_r]
            pos[g, start : start + n_r] = torch.arange(n_p, n_p + n_r)
            seg[g, start : start + n_r] = j + 1
            # Token 0 is predicted by the prompt's last position, token t > 0 by its predecessor.
            gather[i, :n_r] = g * W + torch.cat([torch.tensor([n_p - 1]), torch.arange(start, start + n_r - 1)])
            start += n_r
    q, k = seg.unsqueeze(2), seg.unsqueeze(1)  # (K, W, 1), (K, 1, W)
    causal = torch.ones(W, W, dtype=torch.bool).tril()  # (W, W)
    visible = ((k == 0) & (q >= 0)) | ((k == q) & (q != 0))  # prompt keys for real queries; own segment
    mask = (causal & visible) | torch.eye(W, dtype=torch.bool)  # every query sees at least itself
    device = prompt_ids.device
    valid = torch.arange(T, device=device)[None, :] < c[:, None]  # (B, T)
    return PackedBatch(
        ids.to(device), pos.to(device), gather.to(device), valid, attention_mask=mask.unsqueeze(1).to(device)
    )


def mask_for_kernel(model: nn.Module, mask: Tensor, dtype: torch.dtype) -> Tensor | None:
    """The bool mask in the form the model's attention kernel takes, or None for other kernels."""
    kind = _MASK_KINDS.get(str(getattr(model.config, "_attn_implementation", None)))
    if kind == "bool":
        return mask
    if kind == "additive":
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    return None


@torch.no_grad()
def shared_prompt_supported(model: nn.Module) -> bool:
    """Whether a prompt shared by two responses gives each response its stand-alone hidden states."""
    kernel = str(getattr(model.config, "_attn_implementation", None))
    known = _SUPPORTED.setdefault(model, {})
    if kernel not in known:
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        vocab = getattr(model.config, "get_text_config", lambda: model.config)().vocab_size
        prompt = torch.tensor([[1, 2, 3]] * 2, device=device) % vocab
        response = torch.tensor([[4, 5], [6, 0]], device=device) % vocab
        packed = pack_shared_prompts(
            prompt, torch.ones(2, 3, device=device), response, torch.tensor([[1.0, 1.0], [1.0, 0.0]], device=device)
        )
        mask = mask_for_kernel(model, packed.attention_mask, dtype) if packed is not None else None
        if mask is None:
            known[kernel] = False
            return False
        body = model.get_decoder()
        was_training = model.training
        model.eval()
        try:
            out = body(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=mask, use_cache=False)
            shared = out.last_hidden_state.reshape(-1, out.last_hidden_state.shape[-1])[packed.gather[packed.valid]]
            alone = [body(input_ids=torch.cat([prompt[i : i + 1], response[i : i + 1, :n]], 1), use_cache=False)
                     .last_hidden_state[0, 2 : 2 + n] for i, n in ((0, 2), (1, 1))]
        finally:
            model.train(was_training)
        expected = torch.cat(alone).float()
        err = float((shared.float() - expected).abs().max())
        known[kernel] = err <= 1e-4 * max(1.0, float(expected.abs().max()))
    return known[kernel]
