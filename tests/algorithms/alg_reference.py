"""Slow, obviously-correct loop versions of verl's documented semantics, for comparison tests.

Written independently of posttrain.algorithms (dict-of-lists per group, one token at a time), the way
verl's core_algos describes them, so a vectorisation bug in the library cannot hide in both.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch


def _groups(scores: list[float], index) -> dict:
    groups = defaultdict(list)
    for i, s in enumerate(scores):
        groups[index[i]].append((i, s))
    return groups


def _mean_std(vals: list[float]) -> tuple[float, float]:
    if len(vals) == 1:
        return 0.0, 1.0
    m = sum(vals) / len(vals)
    return m, math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def grpo(rewards, mask, index, eps=1e-6, norm=True):
    scores = rewards.double().sum(-1).tolist()
    out = [0.0] * len(scores)
    for members in _groups(scores, index).values():
        m, sd = _mean_std([s for _, s in members])
        for i, s in members:
            out[i] = (s - m) / (sd + eps) if norm else s - m
    return torch.tensor(out).unsqueeze(-1) * mask


def rloo(rewards, mask, index):
    scores = rewards.double().sum(-1).tolist()
    out = list(scores)
    for members in _groups(scores, index).values():
        n = len(members)
        if n > 1:
            for i, s in members:
                others = [t for j, t in members if j != i]
                out[i] = s - sum(others) / (n - 1)
    return torch.tensor(out).unsqueeze(-1) * mask


def opo(rewards, mask, index):
    scores = rewards.double().sum(-1).tolist()
    lengths = mask.double().sum(-1).tolist()
    out = [0.0] * len(scores)
    for members in _groups(scores, index).values():
        if len(members) == 1:
            base = 0.0
        else:
            base = sum(lengths[i] * s for i, s in members) / sum(lengths[i] for i, _ in members)
        for i, s in members:
            out[i] = s - base
    return torch.tensor(out).unsqueeze(-1) * mask


def whiten(values, mask):
    vals = [v for v, m in zip(values.flatten().tolist(), mask.flatten().tolist()) if m > 0]
    n = len(vals)
    mean = sum(vals) / n
    var = sum((v - mean) ** 2 for v in vals) / n * n / (n - 1)
    return (values.double() - mean) / math.sqrt(var + 1e-8)


def rpp_baseline(rewards, mask, index):
    scores = rewards.double().sum(-1).tolist()
    out = [0.0] * len(scores)
    for members in _groups(scores, index).values():
        m = 0.0 if len(members) == 1 else sum(s for _, s in members) / len(members)
        for i, s in members:
            out[i] = s - m
    tiled = torch.tensor(out).unsqueeze(-1) * mask.double()
    return whiten(tiled, mask) * mask


def gae(rewards, values, mask, gamma, lam):
    B, T = rewards.shape
    adv = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        valid = [t for t in range(T) if mask[b, t] > 0]
        nxt_v, nxt_a = 0.0, 0.0
        for t in reversed(valid):
            delta = float(rewards[b, t]) + gamma * nxt_v - float(values[b, t])
            nxt_a = delta + gamma * lam * nxt_a
            nxt_v = float(values[b, t])
            adv[b, t] = nxt_a
    returns = (adv + values.double()) * mask
    return whiten(adv, mask) * mask, returns


def reinforce_pp(rewards, mask, gamma):
    B, T = rewards.shape
    ret = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        running = 0.0
        for t in reversed([t for t in range(T) if mask[b, t] > 0]):
            running = float(rewards[b, t]) + gamma * running
            ret[b, t] = running
    return whiten(ret, mask) * mask, ret


def ppo_token_loss(old, new, adv, eps_low, eps_high, c):
    """Per-token dual-clip PPO loss, one scalar at a time."""
    out = torch.zeros_like(adv, dtype=torch.float64)
    for idx in range(adv.numel()):
        a = float(adv.flatten()[idx])
        r = math.exp(max(min(float(new.flatten()[idx]) - float(old.flatten()[idx]), 20.0), -20.0))
        l = max(-a * r, -a * min(max(r, 1 - eps_low), 1 + eps_high))
        if a < 0 and c is not None:
            l = min(l, -a * c)
        out.view(-1)[idx] = l
    return out


def agg(loss, mask, mode, norm=None):
    rows = []
    for lrow, mrow in zip(loss.tolist(), mask.tolist()):
        n = sum(mrow)
        if n == 0:
            continue
        tot = sum(l * m for l, m in zip(lrow, mrow))
        rows.append((tot, n))
    if mode == "token-mean":
        return sum(t for t, _ in rows) / sum(n for _, n in rows)
    if mode == "seq-mean-token-sum":
        return sum(t for t, _ in rows) / len(rows)
    if mode == "seq-mean-token-mean":
        return sum(t / n for t, n in rows) / len(rows)
    return sum(t for t, _ in rows) / len(rows) / (loss.shape[-1] if norm is None else norm)
