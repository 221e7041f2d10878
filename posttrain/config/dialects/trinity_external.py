"""Trinity-RFT's ``model.external_model``: an OpenAI-compatible endpoint benched as the policy.

Trinity-RFT allows it in ``mode: bench`` only and then evaluates the endpoint on the eval tasksets
with their workflows and rewards. posttrain's counterpart is ``rollout.name: external``
(posttrain.rollout.external_engine) with ``rollout.external.*``; the engine sends each row's chat
messages, so ``data.return_raw_chat`` is turned on. In another mode the translation goes through and
the loaded config refuses it (``check_external``: the endpoint's weights cannot be synced), as
Trinity-RFT's validator does.
"""

from __future__ import annotations

from posttrain.config.dialects.translate import Context

_KEY = "model.external_model"
_FIELDS = {"model_name": "rollout.external.model_name", "base_url_env": "rollout.external.base_url_env",
           "api_key_env": "rollout.external.api_key_env"}


def external_model(ctx: Context) -> None:
    if not ctx.has(_KEY):
        return
    block = ctx.get(_KEY) or {}
    keys = [f"{_KEY}.{k}" for k in block] if isinstance(block, dict) else [_KEY]
    ctx.consume(_KEY, *keys)
    if not isinstance(block, dict):
        ctx.refuse(_KEY, f"expected a mapping of enable, model_name, base_url_env, api_key_env; got {block!r}")
        return
    enable = f"{_KEY}.enable"
    if not block.get("enable", False):
        for key in keys:
            ctx.drop(key, "the external model is off (enable: false): posttrain samples from model.model_path")
        return
    unknown = sorted(set(block) - {"enable", *_FIELDS})
    for name in unknown:
        ctx.refuse(f"{_KEY}.{name}", "not a field of Trinity-RFT's external model (enable, model_name, base_url_env, api_key_env)")
    ctx.set("rollout.name", "external", enable, "the policy is an OpenAI-compatible endpoint (trainer.mode bench only)")
    ctx.set("data.return_raw_chat", True, enable, "the external engine sends each row's chat messages")
    for name, native in _FIELDS.items():
        if name in block and block[name] is not None:
            ctx.set(native, block[name], f"{_KEY}.{name}")
