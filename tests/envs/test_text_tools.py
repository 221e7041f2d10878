"""`tool_wrapper` (posttrain.envs.text_tools): which tool takes an action, the rewards and limits, the
python_code tool in the sandbox, the search tool against a local retrieval server, the entry's
checks, and a scripted episode through the agent loop."""

from __future__ import annotations

import http.server
import threading

import msgpack
import pytest

from posttrain.envs.spec import parse_custom_envs
from posttrain.envs.text_tools import PythonCodeTool, SearchTool, ToolAnswer, parse_tool_wrapper
from posttrain.errors import ConfigError


class Answer:
    """A one-action env whose reward is 1 when the action says 'done'."""

    instruction = ""

    def reset(self, seed):
        return f"question {seed}"

    def step(self, action):
        return "", float("done" in action), True, {"success": "done" in action}


def wrapped(max_tool_uses=2, **rewards):
    wrapping, problems = parse_tool_wrapper({"wrapper_args": {"max_tool_uses": max_tool_uses, **rewards},
                                             "tool_configs": [{"tool_id": "python_code", "tool_args": {"timeout": 5}}]}, "k")
    assert problems == []
    return wrapping.wrap(Answer())


def test_a_code_call_is_a_tool_turn_and_the_answer_goes_to_the_env():
    env = wrapped(tool_reward=0.05, tool_success_reward=0.1)
    first = env.reset(3)
    assert first.startswith("question 3\n") and "<code>" in first  # the env's question, then the tool's instructions
    obs, reward, done, info = env.step("let me check <code>print(6 * 7)</code> and more")
    assert obs == [{"role": "tool", "content": "Code execution result: 42\n\n"}]  # what it printed, then a new line
    assert (reward, done, info["tool_calls"]) == (pytest.approx(0.15), False, 1)
    obs, reward, done, _ = env.step("<code>raise SystemExit(3)</code>")  # a failed run: tool_reward only
    assert (reward, done) == (pytest.approx(0.05), False)
    assert obs[0]["content"].startswith("Code execution result:") and "final answer" in obs[0]["content"]  # the limit's note
    assert env.step("<code>print(1)</code> done") == ("", 1.0, True, {"success": True})  # past the limit: the env's
    env.reset(4)
    assert env.step("done")[1:3] == (1.0, True)  # no code block: the env's, and the count started again


def test_the_error_reward_replaces_the_others_and_needs_them_zero():
    env = wrapped(tool_execute_error_reward=-0.5)
    env.reset(0)
    assert env.step("<code>1/0</code>")[1] == -0.5 and env.step("<code>print(2)</code>")[1] == 0.0
    _, problems = parse_tool_wrapper({"wrapper_args": {"tool_execute_error_reward": -0.5, "tool_reward": 0.1},
                                      "tool_configs": [{"tool_id": "python_code", "tool_args": {}}]}, "k")
    assert "must be negative with tool_reward and tool_success_reward 0" in problems[0]


def test_python_code_reads_patterns_retries_undefined_names_and_reports_failures():
    tool = PythonCodeTool()
    assert tool.answer("no code here") == ToolAnswer(False, True, "")
    # the block that ends first wins; a fenced python block works too
    assert tool.answer("```python\nprint('fence')\n``` then <code>print('tag')</code>").text == "Code execution result: fence\n\n"
    assert tool.answer("<code>print(sqrt(16) + comb(4, 2))</code>").text == "Code execution result: 10.0\n\n"  # no imports written
    silent = tool.answer("<code>x = 1</code>")
    assert silent.found and silent.error  # nothing printed counts as a failed call
    failed = PythonCodeTool(keep_error_last_line=True).answer("<code>print('a')\n1/0</code>")
    assert failed.error and failed.text == "Code execution result: a\n\nZeroDivisionError: division by zero\n"
    slow = PythonCodeTool(timeout=1).answer("<code>while True: pass</code>")
    assert slow.error
    custom = PythonCodeTool(patterns=[r"<py>(.*?)</py>"], tool_instruction="use <py>")
    assert custom.instruction() == "use <py>" and custom.answer("<py>print(3)</py>").text == "Code execution result: 3\n\n"
    assert not custom.answer("<code>print(3)</code>").found


class Retrieval(http.server.BaseHTTPRequestHandler):
    requests: list = []

    def do_POST(self):  # noqa: N802
        body = msgpack.unpackb(self.rfile.read(int(self.headers["Content-Length"])))
        Retrieval.requests.append(body)
        docs = [{"document": {"contents": f"Title {i}\nText about {body['query']}"}, "score": 1.0} for i in range(body["topk"])]
        payload = msgpack.packb({"result": docs})
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_search_posts_msgpack_queries_and_formats_the_documents():
    server = http.server.HTTPServer(("127.0.0.1", 0), Retrieval)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tool = SearchTool(search_url=f"http://127.0.0.1:{server.server_port}/retrieve", topk=2)
        answer = tool.answer("<think>need it</think><search> capital of France </search>")
        assert Retrieval.requests[-1] == {"query": "capital of France", "topk": 2, "return_scores": True}
        assert answer == ToolAnswer(True, False, "\n\n<information>Doc 1(Title: Title 0) Text about capital of France\n"
                                                 "Doc 2(Title: Title 1) Text about capital of France\n</information>\n\n")
    finally:
        server.shutdown()
    down = SearchTool(search_url=f"http://127.0.0.1:{server.server_port}/retrieve", timeout=1).answer("<search>x</search>")
    assert down.found and down.error and "[SearchTool Error:" in down.text  # the model sees the failure; the episode goes on


def test_with_two_tools_the_last_one_tried_decides():
    wrapping, _ = parse_tool_wrapper({"tool_configs": [{"tool_id": "python_code", "tool_args": {}},
                                                       {"tool_id": "search", "tool_args": {"search_url": "http://127.0.0.1:9/x"}}]}, "k")
    env = wrapping.wrap(Answer())
    assert env.reset(1).count("\n") >= 3 and "Available tools:" in env.reset(1)
    # the code fails and the search tool finds no query: the action is the env's, as GEM's wrapper does it
    assert env.step("<code>1/0</code> done")[1:3] == (1.0, True)


def test_entry_checks_and_mcp_refused_only_where_played():
    ok = {"env_type": "roll_math", "env_config": {"dataset_name": "x.parquet"}}
    bad = {**ok, "tool_wrapper": {"wrapper_args": {"max_tool_uses": -1, "bonus": 1},
                                  "tool_configs": [{"tool_id": "browser", "tool_args": {}},
                                                   {"tool_id": "python_code", "tool_args": {"timeout": 0}},
                                                   {"tool_id": "search", "tool_args": {"search_url": "u", "k": 2}}]}}
    with pytest.raises(ConfigError) as e:
        parse_custom_envs({"E": bad})
    text = "\n".join(e.value.problems)
    for part in ("E.tool_wrapper.wrapper_args.bonus: unknown", "max_tool_uses: an integer >= 0 or null",
                 "tool_configs[0].tool_id: 'browser' is not a text tool", "tool_configs[1].tool_args.timeout: seconds > 0",
                 "tool_configs[2].tool_args: SearchTool.__init__() got an unexpected keyword argument 'k'"):
        assert part in text
    spec = parse_custom_envs({"E": {**ok, "tool_wrapper": {"tool_configs": [{"tool_id": "mcp", "tool_args": {"server_url": "xxx"}}]}}})["E"]
    assert "tool_configs[0].tool_id: mcp: not supported" in spec.tools.refused("env.custom_envs.E.tool_wrapper")[0]


def test_an_episode_through_the_agent_loop_renders_the_tool_answer_as_a_tool_turn(tmp_path):
    from posttrain.models.tokenizer import CHATML_TEMPLATE
    from posttrain.rollout.agent_loop import EnvSlot, LoopLimits, run_episodes
    from posttrain.rollout.base import SamplingParams
    from posttrain.rollout.turns import TurnRenderer
    from tests.rollout.test_agent_loop import TOK, ScriptedEngine

    data = tmp_path / "q.jsonl"
    data.write_text('{"problem": "2+3?", "answer": "5"}\n')
    entry = {"env_type": "roll_math", "env_config": {"dataset_name": str(data)}, "max_steps": 3,
             "agent_template": "{observation}\nBox it.",
             "tool_wrapper": {"wrapper_args": {"tool_success_reward": 0.25, "max_tool_uses": 1},
                              "tool_configs": [{"tool_id": "python_code", "tool_args": {"timeout": 5}}]}}
    spec = parse_custom_envs({"M": entry})["M"]
    engine = ScriptedEngine(["<code>print(2+3)</code>", "\\boxed{5}"])
    [traj] = run_episodes([EnvSlot(spec.make(spec.env_config), spec, 0, "g0", 0.0)], engine, SamplingParams(),
                          TurnRenderer(TOK, CHATML_TEMPLATE), LoopLimits(512, 512), "s1")
    assert [t.reward for t in traj.turns] == [0.25, 1.0] and traj.done and traj.success
    text = TOK.decode(traj.prompt_ids + traj.response_ids)
    assert "<|im_start|>user\n2+3?\n" in text and "Box it." in text  # the first turn goes through agent_template
    # the tool's answer is a tool message (this template writes it as a <tool_response> turn), not through agent_template
    assert "<tool_response>\nCode execution result: 5\n" in text and text.count("Box it.") == 1
