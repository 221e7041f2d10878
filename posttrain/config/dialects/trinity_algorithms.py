"""Trinity-RFT's algorithm types as compositions of posttrain's registered parts.

A Trinity ``algorithm.algorithm_type`` names a bundle of defaults (Trinity-RFT's
``trinity/algorithm/algorithm.py``, each type's ``default_config``): an advantage function, a policy
loss, a KL loss, an entropy loss and a sample strategy, plus whether a critic runs. posttrain keeps
those parts separate (``algorithm.kind``, ``algorithm.adv_estimator`` with ``adv_estimator_args``,
``actor.policy_loss.loss_mode`` with ``loss_args``, ``actor.use_kl_loss``, ``algorithm.mix``,
``ref.model_path``), so a type translates into the fields its parts select. Keys the file writes
itself (``advantage_fn``, ``policy_loss_fn``, their ``*_args``) win over the type's defaults, as in
Trinity-RFT. A file without ``algorithm_type`` is Trinity's default type, ``ppo``.

The KL defaults of each type are in posttrain.config.dialects.trinity_defaults (they predate this
table); the ``kl`` column here is what that module reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrinityType:
    """One algorithm type's default parts, in Trinity-RFT's names."""

    kind: str  # posttrain algorithm.kind
    advantage_fn: str | None  # Trinity advantage_fn (None: the kind has none)
    policy_loss_fn: str  # Trinity policy_loss_fn
    kl_loss_fn: str = "k2"  # Trinity kl_loss_fn default of the type
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    teacher: bool = False  # reads a teacher's log-probs (explorer.auxiliary_models[0] -> ref.model_path)
    expert: bool = False  # mixes expert SFT rows (auxiliary buffer -> algorithm.mix)


TYPES: dict[str, TrinityType] = {
    "ppo": TrinityType("rl", "ppo", "ppo"),
    "grpo": TrinityType("rl", "grpo", "ppo"),
    # GRPO with the advantages computed in the trainer rather than the explorer, where posttrain always
    # computes them (its RL step, posttrain.trainer.advantages): the same parts and defaults as grpo
    "grpo_verl": TrinityType("rl", "grpo", "ppo"),
    "reinforceplusplus": TrinityType("rl", "reinforceplusplus", "ppo"),
    "rloo": TrinityType("rl", "rloo", "ppo"),
    "opmd": TrinityType("rl", "opmd", "opmd"),
    "asymre": TrinityType("rl", "asymre", "opmd", kl_loss_fn="none"),
    "topr": TrinityType("rl", "reinforce", "topr"),
    "cispo": TrinityType("rl", "grpo", "cispo"),
    "gspo": TrinityType("rl", "grpo", "gspo"),
    "sapo": TrinityType("rl", "grpo", "sapo"),
    "sppo": TrinityType("rl", "opmd", "sppo", kl_loss_fn="none"),
    "rec": TrinityType("rl", "rec", "rec"),
    "mix": TrinityType("rl", "grpo", "mix", expert=True),
    "mix_chord": TrinityType("rl", "grpo", "mix_chord", expert=True),
    "on_policy_distill": TrinityType("rl", "on_policy_distill", "ppo", kl_loss_fn="none", advantage_fn_args={"kl_coef": 1.0}, teacher=True),
    "jsd": TrinityType("rl", "jsd", "ppo", kl_loss_fn="none", advantage_fn_args={"kl_coef": 1.0, "lambda_coef": 0.5}, teacher=True),
    # GRPO over the env group's episodes, trained as one row per turn (trinity_batches sets env.train_rows: turn)
    "multi_step_grpo": TrinityType("rl", "step_wise_grpo", "ppo"),
    "sft": TrinityType("sft", None, "sft", kl_loss_fn="none"),
    # RAFT (Dong et al. 2023): the SFT loss on the experiences the workflow returns (no advantages, no
    # reference); the RAFT workflows return only their successes (trinity_envs sets the row filters).
    # grpo is computed and unused: the sft loss reads no advantages.
    "raft": TrinityType("rl", "grpo", "sft", kl_loss_fn="none"),
    "dpo": TrinityType("dpo", None, "dpo"),
}

#: Types posttrain does not run, with the reason the loader gives.
REFUSED: dict[str, str] = {}

#: Trinity advantage_fn -> (posttrain estimator, options it implies).
ADVANTAGE_FNS: dict[str, tuple[str, dict[str, Any]]] = {
    "ppo": ("gae", {}),
    "grpo": ("grpo", {}),
    "grpo_verl": ("grpo", {}),  # Trinity's verl-side GRPO: (s - mean_g) / (std_g + 1e-6), a group of one 0/1, as grpo
    # Trinity normalises each episode's reward in its task group and gives it to every step; one
    # posttrain agentic row is a whole episode (reward: the sum of its turns'), so this is GRPO
    "step_wise_grpo": ("grpo", {}),
    "reinforceplusplus": ("reinforce_plus_plus", {}),
    "rloo": ("rloo", {}),
    "remax": ("remax", {}),
    "opmd": ("opmd", {}),
    "asymre": ("asymre", {}),
    "rec": ("rec", {}),
    "reinforce": ("reinforce", {"reinforce_mode": "outcome"}),  # Trinity's: the sequence score on every token
    "on_policy_distill": ("on_policy_distill", {}),
    "jsd": ("jsd", {}),
}

#: Trinity advantage functions posttrain has no estimator for, with the reason.
REFUSED_ADVANTAGE_FNS: dict[str, str] = {}

#: Trinity advantage functions that are GRPO plus an entropy-dynamics token filter (Trinity-RFT's
#: examples/entropy): advantage_fn -> (algorithm.token_filter.type, Trinity's default_args used when
#: the file gives no advantage_fn_args, the constructor's defaults used for an option the args omit).
TOKEN_FILTER_FNS: dict[str, tuple[str, dict[str, float], dict[str, float]]] = {
    "clipb": ("clip_b", {"mu": 2.5}, {"mu": 2.5}),
    "clipv": ("clip_v", {"mu": 8.5, "max_frac": 1e-4}, {"mu": 2.0, "max_frac": 1e-4}),
}
ADVANTAGE_FNS.update({name: ("grpo", {}) for name in TOKEN_FILTER_FNS})  # (s - mean_g) / (std_g + epsilon), as grpo

#: Trinity policy_loss_fn -> posttrain policy loss (registry names).
POLICY_LOSS_FNS: dict[str, str] = {
    "ppo": "vanilla", "opmd": "opmd", "topr": "topr", "cispo": "cispo", "gspo": "gspo", "sapo": "sapo",
    "sppo": "sppo", "rec": "rec", "mix": "mix", "mix_chord": "mix_chord", "importance_sampling": "importance_sampling",
    "sft_is": "sft_is", "sft_phi": "sft_phi", "sft": "sft", "dpo": "dpo",
}

#: policy_loss_fn_args keys that are posttrain fields of their own (the rest go to loss_args).
LOSS_ARG_FIELDS = {"clip_range": "actor.clip_ratio", "clip_range_low": "actor.clip_ratio_low",
                   "clip_range_high": "actor.clip_ratio_high", "clip_ratio_c": "actor.clip_ratio_c"}
#: policy_loss_fn_args keys that say how Trinity-RFT sizes its batches, not what the loss computes.
LOSS_ARG_BATCHING = ("use_dynamic_bsz", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "ngpus_trainer",
                     "train_batch_size_usual", "train_batch_size_expert")


def known_types() -> str:
    """Every type name Trinity-RFT registers, for the unknown-type message."""
    return ", ".join(sorted([*TYPES, *REFUSED]))
