"""`posttrain smoke` of a bench over a hosted model (`rollout.name: external`, Trinity-RFT's
`model.external_model`): the hosted model is not reachable here, so the smoke model (the tiny model
smoke wrote) answers in its place behind posttrain's own chat endpoint (posttrain.rollout.server) on a
free local port, and the config's `base_url_env` / `api_key_env` variables point at it for the run.
The request path, the validation sampling and the scoring are the bench's own."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import yaml


@contextmanager
def stand_in_endpoint(config: Path) -> Iterator[str | None]:
    """While open: the smoke config's external endpoint served locally by its tiny model (its URL),
    or None when the config does not bench an external model."""
    native = yaml.safe_load(config.read_text()) or {}
    rollout = native.get("rollout") or {}
    if rollout.get("name") != "external":
        yield None
        return
    external: dict[str, Any] = rollout.get("external") or {}
    from posttrain.models.loading import load_causal_lm, load_tokenizer
    from posttrain.rollout.hf_engine import HFEngine
    from posttrain.rollout.server import ChatService, make_server

    model = str((native.get("model") or {}).get("path"))
    tokenizer = load_tokenizer(model)
    engine = HFEngine(load_causal_lm(model, dtype="fp32").eval().requires_grad_(False),
                      pad_token_id=tokenizer.pad_token_id, copy_weights=False, tokenizer=tokenizer)
    server = make_server(ChatService(engine, tokenizer, str(external.get("model_name"))), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    names = {external.get("base_url_env") or "OPENAI_BASE_URL": url, external.get("api_key_env") or "OPENAI_API_KEY": "smoke"}
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
