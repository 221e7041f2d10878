"""The remote code sandbox (reward.sandbox_fusion): the code scorer's programs go to a local HTTP
server that imitates SandboxFusion's run_code API (it runs the posted Python in a subprocess);
requests carry the limits, max_concurrent bounds the requests in flight, a 504 is retried, and a
sandbox that cannot run the program is a counted reward failure, not a wrong program."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from posttrain.config.load import load_config
from posttrain.errors import ConfigError
from posttrain.rewards import build_reward_manager
from posttrain.rewards.code import code_score
from posttrain.rewards.types import RewardInput
from posttrain.trainer.rewarding import reward_function

TESTS = {"case_type": "input", "test_cases": [{"stdin": "2 3\n", "expected_stdout": "5\n"}, {"stdin": "4 4\n", "expected_stdout": "8\n"}]}
RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
WRONG = "```python\nprint(0)\n```"


class FakeSandbox:
    """A SandboxFusion stand-in: runs each posted program, records requests and requests in flight."""

    def __init__(self, mode: str = "run", barrier: int = 0):
        self.mode, self.requests, self.in_flight, self.most = mode, [], 0, 0
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(barrier, timeout=10) if barrier else None
        self.failures_left = 1  # "gateway" mode: one 504 first
        sandbox = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = sandbox.answer(body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run_code"

    def answer(self, body):
        with self.lock:
            self.requests.append(body)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            gateway = self.mode == "gateway" and self.failures_left > 0
            if gateway:
                self.failures_left -= 1
        try:
            if gateway:
                return 504, {"detail": "gateway timeout"}
            if self.mode == "broken":
                return 200, {"status": "SandboxError", "message": "no runner available"}
            if self.barrier is not None:
                self.barrier.wait()  # returns only once that many requests are in flight together
            return 200, self.run(body)
        finally:
            with self.lock:
                self.in_flight -= 1

    @staticmethod
    def run(body):
        try:
            done = subprocess.run([sys.executable, "-I", "-c", body["code"]], input=body["stdin"] or "", capture_output=True,
                                  text=True, timeout=body["run_timeout"])
        except subprocess.TimeoutExpired:
            return {"status": "Failed", "run_result": {"status": "TimeLimitExceeded", "stdout": "", "stderr": ""}}
        run = {"status": "Finished", "return_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        return {"status": "Success" if done.returncode == 0 else "Failed", "run_result": run, "compile_result": None}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sandbox():
    servers = []

    def make(*args, **kwargs):
        servers.append(FakeSandbox(*args, **kwargs))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_programs_run_on_the_remote_sandbox_with_its_limits(sandbox):
    box = sandbox()
    remote = {"url": box.url, "max_concurrent": 4, "memory_limit_mb": 256}
    assert code_score("code", RIGHT, TESTS, sandbox_fusion=remote, wall_s=3) == {"score": 1.0, "pass_rate": 1.0, "timeouts": 0.0}
    assert code_score("code", WRONG, TESTS, sandbox_fusion=remote)["score"] == 0.0
    loop = code_score("code", "while True: pass", {"case_type": "assert", "test_cases": [{"assert_code": "assert 1"}]},
                      sandbox_fusion=remote, wall_s=1)
    assert loop == {"score": 0.0, "pass_rate": 0.0, "timeouts": 1.0}
    first = box.requests[0]
    assert first["memory_limit_MB"] == 256 and first["run_timeout"] == 3 and first["language"] == "python"
    assert {r["stdin"] for r in box.requests[:2]} == {"2 3\n", "4 4\n"} and "print(a + b)" in first["code"]  # sent together
    assert len(box.requests) == 5  # 2 + 2 cases, 1 assert case


def test_max_concurrent_bounds_the_requests_in_flight(sandbox):
    cases = {"case_type": "input", "test_cases": [{"stdin": f"{i} 1\n", "expected_stdout": f"{i + 1}\n"} for i in range(4)]}
    together = sandbox(barrier=2)  # answers only when two requests are in flight at once
    out = code_score("code", RIGHT, cases, sandbox_fusion={"url": together.url, "max_concurrent": 2, "memory_limit_mb": 64})
    assert out["score"] == 1.0 and together.most == 2
    one = sandbox()
    code_score("code", RIGHT, cases, sandbox_fusion={"url": one.url, "max_concurrent": 1, "memory_limit_mb": 64})
    assert one.most == 1 and len(one.requests) == 4


def test_a_gateway_timeout_is_retried_and_an_unusable_sandbox_is_a_counted_failure(sandbox):
    gateway = sandbox("gateway")
    assert code_score("code", RIGHT, TESTS, sandbox_fusion={"url": gateway.url, "max_concurrent": 1, "memory_limit_mb": 64})["score"] == 1.0
    assert len(gateway.requests) == 3  # one 504, then both cases
    broken = sandbox("broken")
    fn = lambda **kw: code_score(**kw, sandbox_fusion={"url": broken.url, "max_concurrent": 2, "memory_limit_mb": 64})  # noqa: E731
    manager = build_reward_manager("naive", fn, on_error="fixed", failure_reward=-1.0)
    out = manager.score([RewardInput("code", RIGHT, TESTS)])
    assert out.scores == [-1.0] and out.num_failures == 1
    with pytest.raises(Exception, match="the sandbox failed itself: no runner available"):
        build_reward_manager("naive", fn).score([RewardInput("code", RIGHT, TESTS)])
    gone = build_reward_manager("naive", lambda **kw: code_score(**kw, sandbox_fusion={"url": "http://127.0.0.1:9/run_code", "max_concurrent": 1, "memory_limit_mb": 64}))
    with pytest.raises(Exception, match="cannot reach the sandbox at http://127.0.0.1:9/run_code"):
        gone.score([RewardInput("code", RIGHT, TESTS)])


def test_the_url_reaches_the_code_worker_and_needs_one(sandbox):
    box = sandbox()
    cfg = load_config(None, ["reward.workers.c.worker_cls=code", "reward.workers.c.tag_included=[kod]",
                             f"reward.sandbox_fusion.url={box.url}", "reward.sandbox_fusion.memory_limit_mb=128",
                             "reward.sandbox_fusion.max_concurrent=3"])
    fn = reward_function(cfg)["c"]
    assert fn(data_source="kod", solution_str=RIGHT, ground_truth=TESTS, extra_info={})["score"] == 1.0
    assert [r["memory_limit_MB"] for r in box.requests] == [128, 128]
    with pytest.raises(ConfigError, match="reward.sandbox_fusion.url: only a code reward worker"):
        load_config(None, [f"reward.sandbox_fusion.url={box.url}"])


# verl's layout of a code row's tests ({inputs, outputs}), as its apps/codecontests/taco rows carry them
VERL_TESTS = {"inputs": ["2 3\n", "4 4\n", "1 1\n", "0 0\n"], "outputs": ["5\n", "8\n", "2\n", "1\n"]}  # the last is wrong on purpose


def test_a_verl_line_with_a_sandbox_url_scores_verls_code_rows_on_it(sandbox, tmp_path):
    # run_deepseek7b_llm_sandbox_fusion.sh: verl's default reward sends codecontests/apps/codeforces/taco
    # rows to the sandbox and scores the share of the first 10 cases passed
    box = sandbox()
    cfg = load_config(None, [f"reward_model.sandbox_fusion.url={box.url}", "reward_model.sandbox_fusion.max_concurrent=8",
                             "reward_model.reward_manager=prime"], dialect="verl")
    worker = cfg.reward.workers["code"]
    assert (worker.worker_cls, worker.tag_included, worker.reward_kwargs) == ("code", ["codecontests", "apps", "codeforces", "taco"], {"continuous": True})
    fn = reward_function(cfg)["code"]
    out = fn(data_source="apps", solution_str=RIGHT, ground_truth=json.dumps(VERL_TESTS), extra_info={})
    assert (out["score"], out["pass_rate"]) == (0.75, 0.75)  # 3 of 4 cases, as verl's continuous score
    assert len(box.requests) == 4 and {r["stdin"] for r in box.requests} == set(VERL_TESTS["inputs"])
    # a custom reward function replaces verl's default one (verl then leaves the url unused): no worker
    (tmp_path / "mine.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    with pytest.raises(ConfigError, match="reward.sandbox_fusion.url: only a code reward worker"):
        load_config(None, [f"reward_model.sandbox_fusion.url={box.url}", f"custom_reward_function.path={tmp_path / 'mine.py'}"], dialect="verl")


def test_continuous_counts_the_first_ten_cases_and_verl_layouts_are_read(monkeypatch):
    import posttrain.rewards.code as code
    from posttrain.rewards.code import read_tests
    from posttrain.sandbox import RunResult

    # a stand-in for the local sandbox that runs `print(input())`: each case's stdin comes back
    monkeypatch.setattr(code, "run_python", lambda program, stdin, limits: RunResult(0, stdin, ""))

    many = {"inputs": [f"{i}\n" for i in range(11)], "outputs": [f"{i}\n" for i in range(10)] + ["x\n"]}
    echo = "```python\nprint(input())\n```"
    assert code_score("apps", echo, many, continuous=True)["score"] == 1.0  # the failing case is past the 10th
    assert code_score("apps", echo, many) == {"score": 0.0, "pass_rate": 10 / 11, "timeouts": 0.0}
    assert read_tests({"assert_case": ["assert f(1) == 2"], "inputs": [""], "outputs": [None]}) == ("assert", [{"assert_code": "assert f(1) == 2"}])
    with pytest.raises(ValueError, match="call-based test cases"):
        read_tests({"inputs": ["[1]"], "outputs": ["2"], "fn_name": "f"})
