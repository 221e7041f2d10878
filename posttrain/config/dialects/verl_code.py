"""verl's default reward for code rows with a remote sandbox: posttrain's code reward worker.

With no ``custom_reward_function.path``, verl scores each row by its ``data_source`` with its built-in
``default_compute_score``. Setting ``reward_model.sandbox_fusion.url`` changes one branch of it: rows
whose data_source is ``codecontests``, ``apps``, ``codeforces`` or ``taco`` run the response's program
against the row's test cases on that SandboxFusion service (else on verl's local prime_code checker),
and score the share of the first 10 cases passed (``continuous=True``). posttrain's ``code`` reward
worker does the same on the same service (posttrain.rewards.code: verl's ``{inputs, outputs}`` and
``assert_case`` test layouts, ``continuous``), so the line gets one, claiming those four tags. Rows of
other data sources keep verl's other scorers, which posttrain's default reward does not have: a tag
no worker claims stops the run before training, naming it (posttrain.rewards.routing).
"""

from __future__ import annotations

from typing import Any

URL = "reward_model.sandbox_fusion.url"
# verl's default_compute_score: the data sources it sends to the sandbox when a url is set
CODE_SOURCES = ["codecontests", "apps", "codeforces", "taco"]


def sandbox_code_worker(ctx: Any) -> None:
    """A sandbox url with verl's default reward (no custom function): a ``code`` worker for verl's
    code data sources, scored as verl's sandbox branch scores them (module docstring)."""
    if not ctx.get(URL) or ctx.get("custom_reward_function.path"):
        return
    worker = {"worker_cls": "code", "tag_included": list(CODE_SOURCES), "reward_kwargs": {"continuous": True}}
    ctx.set("reward.workers.code", worker, URL,
            f"verl's default reward runs the {', '.join(CODE_SOURCES)} rows on the sandbox: a code worker for those tags "
            "(the share of the first 10 test cases passed)")


HANDLERS = [sandbox_code_worker]
