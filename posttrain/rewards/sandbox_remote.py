"""A remote code sandbox (a SandboxFusion service, verl's ``reward_model.sandbox_fusion``).

When ``reward.sandbox_fusion.url`` is set, the ``code`` scorer sends each program and test input to
that service instead of running it in the local sandbox. One request per run:

    POST <url>   {"code": ..., "stdin": ..., "language": "python", "compile_timeout": s,
                  "run_timeout": s, "memory_limit_MB": mb, "files": {}, "fetch_files": []}

and the service answers ``{"status": "Success" | "Failed" | "SandboxError", "message": ...,
"compile_result": ..., "run_result": {"status": "Finished" | "TimeLimitExceeded" | "Error",
"return_code": n, "stdout": ..., "stderr": ...}}``. A run is a `RunResult` as the local sandbox's:
a run that hit the time limit has ``limit="wall"``, one that ended otherwise its return code (1 when
the service gives none for an ``Error``).

A gateway timeout (HTTP 504) is retried twice, after 1 and 2 seconds. Anything else that keeps the
program from running (refused connection, another HTTP error, ``SandboxError``, an answer that is
not the service's JSON) raises `SandboxUnavailable`: the sample is a reward failure under
``reward.on_error`` and is counted, never scored as a wrong program. At most ``max_concurrent``
requests are in flight from one scoring process (the test cases of one response go out together).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from posttrain.sandbox import Limits, RunResult

RETRY_DELAYS_S = (1.0, 2.0)  # waits before the 2nd and 3rd try of a 504
HTTP_SLACK_S = 10.0  # the request may take this much longer than the run's own time limits

_slots: dict[int, threading.BoundedSemaphore] = {}  # max_concurrent -> this process's in-flight slots
_slots_lock = threading.Lock()


class SandboxUnavailable(RuntimeError):
    """The remote sandbox could not run the program (not the program's fault)."""


def _slot(max_concurrent: int) -> threading.BoundedSemaphore:
    with _slots_lock:
        return _slots.setdefault(max_concurrent, threading.BoundedSemaphore(max_concurrent))


def request_body(code: str, stdin: str, limits: Limits, memory_limit_mb: int) -> dict[str, Any]:
    """The JSON a SandboxFusion ``run_code`` request carries (module docstring)."""
    return {
        "code": code, "stdin": stdin, "language": "python", "compile_timeout": limits.wall_s,
        "run_timeout": limits.wall_s, "memory_limit_MB": memory_limit_mb, "files": {}, "fetch_files": [],
    }


def parse_answer(answer: Any) -> RunResult:
    """A service answer as a `RunResult`; `SandboxUnavailable` when it reports its own failure.

    >>> parse_answer({"status": "Success", "run_result": {"status": "Finished", "return_code": 0, "stdout": "4\\n"}}).ok
    True
    >>> parse_answer({"status": "Failed", "run_result": {"status": "TimeLimitExceeded", "stdout": ""}}).limit
    'wall'
    """
    if not isinstance(answer, dict) or answer.get("status") not in ("Success", "Failed", "SandboxError"):
        raise SandboxUnavailable(f"the sandbox answered something that is not a SandboxFusion result: {str(answer)[:200]!r}")
    if answer["status"] == "SandboxError":
        raise SandboxUnavailable(f"the sandbox failed itself: {answer.get('message') or answer}")
    run = answer.get("run_result") or {}
    compiled = answer.get("compile_result") or {}
    if not run:  # Python has no compile step; a failure before running is the program's (a syntax error)
        return RunResult(int(compiled.get("return_code") or 1), "", str(compiled.get("stderr") or answer.get("message") or ""))
    stdout, stderr = str(run.get("stdout") or ""), str(run.get("stderr") or "")
    if run.get("status") == "TimeLimitExceeded":
        return RunResult(-9, stdout, stderr, limit="wall")
    code = run.get("return_code")
    if code is None:
        code = 0 if run.get("status") == "Finished" and answer["status"] == "Success" else 1
    return RunResult(int(code), stdout, stderr)


class RemoteSandbox:
    """Runs Python programs on a SandboxFusion service at ``url`` (module docstring)."""

    def __init__(self, url: str, *, max_concurrent: int = 64, memory_limit_mb: int = 1024):
        self.url, self.max_concurrent, self.memory_limit_mb = url, max_concurrent, memory_limit_mb

    def run(self, code: str, stdin: str = "", limits: Limits = Limits()) -> RunResult:
        body = json.dumps(request_body(code, stdin, limits, self.memory_limit_mb)).encode("utf-8")
        with _slot(self.max_concurrent):
            return parse_answer(self._post(body, timeout=2 * limits.wall_s + HTTP_SLACK_S))

    def run_all(self, jobs: list[tuple[str, str]], limits: Limits) -> list[RunResult]:
        """(code, stdin) jobs sent side by side (up to max_concurrent), results in order."""
        if len(jobs) <= 1:
            return [self.run(code, stdin, limits) for code, stdin in jobs]
        with ThreadPoolExecutor(max_workers=min(len(jobs), self.max_concurrent)) as pool:
            return list(pool.map(lambda job: self.run(job[0], job[1], limits), jobs))

    def _post(self, body: bytes, *, timeout: float) -> Any:
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        for attempt in range(len(RETRY_DELAYS_S) + 1):
            try:
                with urllib.request.urlopen(request, timeout=timeout) as reply:
                    return json.loads(reply.read().decode("utf-8"))
            except urllib.error.HTTPError as err:
                if err.code == 504 and attempt < len(RETRY_DELAYS_S):
                    time.sleep(RETRY_DELAYS_S[attempt])  # a busy gateway: try again
                    continue
                raise SandboxUnavailable(f"the sandbox at {self.url} answered HTTP {err.code} ({err.reason})") from None
            except (urllib.error.URLError, TimeoutError, OSError) as err:
                raise SandboxUnavailable(f"cannot reach the sandbox at {self.url}: {getattr(err, 'reason', err)}") from None
            except ValueError as err:
                raise SandboxUnavailable(f"the sandbox at {self.url} answered something that is not JSON: {err}") from None
        raise SandboxUnavailable(f"the sandbox at {self.url} timed out at its gateway (HTTP 504) {len(RETRY_DELAYS_S) + 1} times")
