"""Freezing a model's parameters by name prefix (ROLL's ``model_args.freeze_module_prefix``).

ROLL's rule (roll/models/model_providers.py, ``freeze_model``): every parameter whose name in
``model.named_parameters()`` starts with one of the prefixes gets ``requires_grad = False``; the
optimizer is then built over the parameters that still require gradients
(posttrain.optim.build_optimizer does the same), so a frozen parameter gets no gradient, no optimizer
state and no weight decay: it keeps its loaded value. ROLL applies it only without LoRA.

posttrain refuses two inputs ROLL passes over silently: a prefix that names no parameter (a typo or a
module of another architecture would otherwise train everything), and prefixes that freeze every
parameter (nothing would train).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from posttrain.errors import ModelError


def freeze_by_prefix(model: nn.Module, prefixes: Sequence[str], key: str = "actor.freeze_module_prefix") -> list[str]:
    """Set requires_grad False on the parameters of `model` whose names start with a prefix; return
    their names. Call it before the model is sharded and its optimizer built."""
    if not prefixes:
        return []
    named = list(model.named_parameters())
    names = [name for name, _ in named]
    unmatched = [p for p in prefixes if not any(name.startswith(p) for name in names)]
    if unmatched:
        roots = sorted({".".join(name.split(".")[:2]) for name in names})
        raise ModelError(f"{key}: {', '.join(map(repr, unmatched))} names no parameter of the model; its parameter names "
                         f"start with {', '.join(roots)} (a vision tower exists only in a vision-language policy, as model.visual)")
    frozen = [name for name in names if name.startswith(tuple(prefixes))]
    chosen = set(frozen)
    if len(frozen) == len(names):
        raise ModelError(f"{key}: {list(prefixes)} freezes every parameter of the model, so nothing would train; name fewer modules")
    for name, param in named:
        if name in chosen:
            param.requires_grad_(False)
    return frozen
