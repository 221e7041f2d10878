"""`ref`: the frozen reference policy used for KL."""

from __future__ import annotations

from posttrain.config.fields import param, section


@section
class RefConfig:
    """The frozen reference policy (created when a KL term needs it)."""

    log_prob_micro_batch_size_per_gpu: int = param(8, doc="Responses per reference log-prob forward pass on one device.", ge=1, refs=["verl:actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"])
