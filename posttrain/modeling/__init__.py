"""Forward helpers shared by actor, reference, critic and rollout engine."""

from posttrain.modeling.logprobs import (
    TokenLogProbs,
    batch_logprobs,
    check_head_matches,
    lm_head_logits,
    response_hidden_states,
    response_logprobs,
    token_logprobs_from_hidden,
)
from posttrain.modeling.positions import concat_prompt_response, position_ids_from_mask

__all__ = [
    "TokenLogProbs",
    "batch_logprobs",
    "check_head_matches",
    "concat_prompt_response",
    "lm_head_logits",
    "position_ids_from_mask",
    "response_hidden_states",
    "response_logprobs",
    "token_logprobs_from_hidden",
]
