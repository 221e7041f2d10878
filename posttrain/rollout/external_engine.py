"""`rollout.name: external`: an OpenAI-compatible chat endpoint served elsewhere as the policy.

Trinity-RFT's `model.external_model` benches a model behind an API with the eval tasksets' workflows
and rewards. Here the endpoint is a rollout engine: each prompt row's chat messages (the data
pipeline keeps them with `data.return_raw_chat`) go to `<base url>/chat/completions` with the
validation sampling settings (n, temperature, or 0 for greedy, top_p, max_tokens, stop, seed), and
each answer's text is tokenized with the local tokenizer so the reward path reads it like any
engine's response (EOS appended when the endpoint says the answer ended, finish_reason "stop").
The endpoint reports no log-probs of the policy: `rollout_logprobs` are zeros, and nothing trains
on these rows (`check_external` allows bench mode only); the engine refuses weight updates.

Requests fail with one line naming the URL; connection errors, timeouts and HTTP 408/409/429/5xx
are retried `max_retries` times with a doubling pause, as the OpenAI client Trinity-RFT uses does.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

import torch

from posttrain.errors import UserError
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams, StalePolicyError, Weights

_RETRIED_STATUS = {408, 409, 429}


class ExternalModelError(UserError):
    """The endpoint is unreachable, answers an HTTP error, or answers something that is not a chat completion."""


def missing_environment(cfg: Any) -> str | None:
    """The machine check of the engine: one line naming an unset environment variable, else None."""
    ext = cfg.rollout.external
    # the key first: on a machine without either, the line names the secret the user's shell holds
    for key, why in (("api_key_env", "the endpoint's API key"), ("base_url_env", "the endpoint's base URL")):
        name = getattr(ext, key)
        if not os.environ.get(name):
            return f"environment variable {name} is not set (rollout.external.{key}: {why})"
    return None


def request_body(model: str, messages: list[dict[str, Any]], params: SamplingParams) -> dict[str, Any]:
    """The chat-completions request of one prompt: greedy decoding is temperature 0."""
    body: dict[str, Any] = {
        "model": model, "messages": messages, "n": params.n, "max_tokens": params.max_new_tokens,
        "temperature": params.temperature if params.do_sample else 0.0,
    }
    if params.do_sample and params.top_p < 1.0:
        body["top_p"] = params.top_p
    if params.stop:
        body["stop"] = list(params.stop)
    if params.seed is not None:
        body["seed"] = params.seed
    return body


class ExternalEngine:
    """A RolloutEngine whose policy is a model behind an OpenAI-compatible endpoint (bench only)."""

    def __init__(self, *, base_url: str, api_key: str, model_name: str, tokenizer: Any, timeout_s: float = 600.0,
                 max_retries: int = 2, pause_s: float = 0.5):
        self.base_url, self.api_key, self.model_name = base_url.rstrip("/"), api_key, model_name
        self.tokenizer, self.timeout_s, self.max_retries, self.pause_s = tokenizer, timeout_s, max_retries, pause_s
        self.model = None  # no local weights
        self.eos_token_id = tokenizer.eos_token_id

    @property
    def weights_version(self) -> int:
        return 0

    def generate(self, prompts: PromptBatch, params: SamplingParams, *, expected_version: int, seed: int | None = None) -> RolloutBatch:
        if expected_version != 0:
            raise StalePolicyError(f"the external engine serves one fixed model (version 0), asked for version {expected_version}")
        if seed is not None and params.seed is None:
            params = SamplingParams(**{**params.__dict__, "seed": seed})
        rows: list[tuple[int, list[int]]] = []  # (prompt row, response ids)
        for i, messages in enumerate(prompts.raw_chat):
            if not isinstance(messages, list):
                raise ExternalModelError("rollout.name=external needs each row's chat messages: set data.return_raw_chat: true")
            answer = self._post(request_body(self.model_name, messages, params))
            choices = sorted(answer.get("choices") or [], key=lambda c: c.get("index", 0))
            if len(choices) != params.n:
                raise ExternalModelError(f"{self._url()}: asked for n={params.n} choices, got {len(choices)}")
            for choice in choices:
                rows.append((i, self._response_ids(choice)))
        return self._batch(prompts, rows)

    def _response_ids(self, choice: dict[str, Any]) -> list[int]:
        text = (choice.get("message") or {}).get("content") or ""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if choice.get("finish_reason") == "stop" and self.eos_token_id is not None:
            ids = ids + [self.eos_token_id]  # the answer ended by itself, as an engine's EOS says
        return ids or [self.eos_token_id if self.eos_token_id is not None else 0]

    def _batch(self, prompts: PromptBatch, rows: list[tuple[int, list[int]]]) -> RolloutBatch:
        width = max(len(ids) for _, ids in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        response = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros(len(rows), width)
        for r, (_, ids) in enumerate(rows):
            response[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[r, : len(ids)] = 1.0
        take = [i for i, _ in rows]
        return RolloutBatch(
            prompt_ids=prompts.input_ids[take], prompt_mask=prompts.attention_mask[take],
            response_ids=response, response_mask=mask, rollout_logprobs=torch.zeros(len(rows), width),
            weights_version=torch.zeros(len(rows), dtype=torch.long),
            group_index=[prompts.uid[i] for i in take], data_source=[prompts.data_source[i] for i in take],
            ground_truth=[prompts.ground_truth[i] for i in take], extra_info=[prompts.extra_info[i] for i in take],
            raw_prompt=[prompts.raw_prompt[i] for i in take],
        )

    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"}
        for attempt in range(self.max_retries + 1):
            request = urllib.request.Request(self._url(), data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                    raw = reply.read()
                break
            except urllib.error.HTTPError as err:
                detail = err.read().decode(errors="replace")[:300]
                problem = f"HTTP {err.code}: {detail}".strip()
                if err.code not in _RETRIED_STATUS and err.code < 500:
                    raise ExternalModelError(f"external model at {self._url()}: {problem}") from None
            except (urllib.error.URLError, OSError) as err:  # refused, unresolvable, timed out
                problem = str(getattr(err, "reason", err))
            except ValueError as err:  # not a URL at all
                raise ExternalModelError(f"external model at {self._url()!r}: {err}; check rollout.external.base_url_env") from None
            if attempt == self.max_retries:
                raise ExternalModelError(f"external model at {self._url()}: {problem} (after {attempt + 1} tries)")
            time.sleep(self.pause_s * 2 ** attempt)
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise ExternalModelError(f"external model at {self._url()}: the answer is not JSON: {raw[:200]!r}") from None

    def update_weights(self, weights: Weights, version: int) -> None:
        raise ExternalModelError("rollout.name=external: the endpoint's weights cannot be updated (bench mode only)")

    def sleep(self, level: int = 1) -> None:
        """Nothing to free: the model lives elsewhere."""

    def wake_up(self) -> None:
        """Nothing to restore."""


def build_external_engine(cfg: Any, model: Any, tokenizer: Any, *, seed: int, owns_weights: bool) -> ExternalEngine:
    """The engine over `rollout.external`'s endpoint; `model` is unused (None: no local weights)."""
    ext = cfg.rollout.external
    return ExternalEngine(base_url=os.environ[ext.base_url_env], api_key=os.environ[ext.api_key_env], model_name=ext.model_name,
                          tokenizer=tokenizer, timeout_s=ext.timeout_s, max_retries=ext.max_retries)
