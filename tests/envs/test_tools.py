"""The built-in tools, the tool config file and the Hermes parser."""

from __future__ import annotations

import doctest
import re

import pytest

from posttrain.tools import base, calculator, config, hermes, session
from posttrain.tools.calculator import evaluate
from posttrain.tools.config import build_tools, load_interactions, load_tool_config
from posttrain.tools.interpreter import CodeInterpreter
from posttrain.errors import ConfigError


@pytest.mark.parametrize("module", [base, calculator, hermes, session])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


@pytest.mark.parametrize("expression, value", [
    ("347*829", "287663"), ("1 + 2 * 3", "7"), ("(1+2)*3", "9"), ("-2**2", "-4"), ("2**-1", "0.5"), ("7//2", "3"),
    ("7 % 3", "1"), ("10/4", "2.5"), ("6/3", "2"), (".5+1.25", "1.75"), ("123456789*987654321", "121932631112635269"),
])
def test_the_calculator_computes(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize("expression, message", [
    ("__import__('os')", "unexpected character '_'"), ("2**1000", "exponent 1000"), ("1+", "ends too early"),
    ("(1+2", "not closed"), ("1 2", "unexpected '2'"), ("x" * 300, "longer than 200"), ("2^3", "unexpected character '^'"),
    ("10**64*10**64", "beyond 1e100"), ("", "non-empty"),
])
def test_the_calculator_refuses_what_is_not_arithmetic(expression, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        evaluate(expression)


def test_a_tool_config_names_file_and_line_of_each_problem(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: calculator\n    config: {type: native}\n"
                    "  - class_name: search_engine\n    config: {type: native}\n"
                    "  - class_name: calculator\n    config: {type: mcp}\n")
    with pytest.raises(ConfigError) as err:
        load_tool_config(str(path))
    text = str(err.value)
    assert f"{path}:4: tools[1].class_name: unknown tool 'search_engine'; built in: ['calculator', 'code_interpreter']" in text
    assert f"{path}:6: tools[2].config.type: 'mcp' is not supported" in text
    path.write_text("tools:\n  - class_name: calculator\n    config: {type: native\n")
    with pytest.raises(ConfigError, match=rf"{path}:4: not valid YAML"):
        load_tool_config(str(path))
    path.write_text("tools:\n  - class_name: calculator\n  - class_name: calculator\n")
    with pytest.raises(ConfigError, match=rf"{path}:3: tool name 'calculator' is used twice"):
        load_tool_config(str(path))


def test_a_user_tool_by_class_path_with_its_own_schema_and_config(tmp_path):
    (tmp_path / "my_tools.py").write_text(
        "class Echo:\n    def __init__(self, prefix=''):\n        self.prefix = prefix\n"
        "    def execute(self, arguments):\n        return self.prefix + arguments['text']\n")
    path = tmp_path / "tools.yaml"
    path.write_text(f"tools:\n  - class_name: {tmp_path / 'my_tools.py'}:Echo\n    config: {{type: native, prefix: '> '}}\n"
                    "    tool_schema:\n      type: function\n      function: {name: echo, parameters: {type: object, properties: {text: {}}}}\n")
    [spec] = load_tool_config(str(path))
    tools = build_tools([spec])
    assert spec.name == "echo" and tools["echo"].execute({"text": "hi"}) == "> hi"
    path.write_text(f"tools:\n  - class_name: {tmp_path / 'my_tools.py'}:Echo\n")
    with pytest.raises(ConfigError, match="tool_schema: missing, and .* has no default `schema`"):
        load_tool_config(str(path))
    path.write_text(f"tools:\n  - class_name: {tmp_path / 'my_tools.py'}:Echo\n    config: {{colour: red}}\n"
                    "    tool_schema: {type: function, function: {name: echo}}\n")
    with pytest.raises(ConfigError, match=rf"{path}:2: Echo\(colour\) failed"):
        build_tools(load_tool_config(str(path)))


def test_an_interaction_config_is_read_and_checked(tmp_path):
    path = tmp_path / "inter.yaml"
    path.write_text("interaction:\n  - name: a\n    class_name: collections.OrderedDict\n")
    with pytest.raises(ConfigError, match=rf"{path}:2: interaction\[0\].class_name: .* has no method start_interaction"):
        load_interactions(str(path))


def test_the_code_interpreter_runs_python_within_its_limits(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("secret")
    tool = CodeInterpreter(timeout_s=1, memory_mb=128, hidden_paths=[str(run_dir)])
    assert tool.execute({"code": "print(sum(range(10)))"}) == "45\n"
    assert "ZeroDivisionError" in tool.execute({"code": "1/0"}) and "(exit status 1)" in tool.execute({"code": "1/0"})
    assert "timed out after 1 s" in tool.execute({"code": "import time\ntime.sleep(30)"})
    assert "MemoryError" in tool.execute({"code": "x = bytearray(1 << 30)"})
    seen = tool.execute({"code": f"import os\nprint(os.listdir({str(run_dir)!r}))"})
    assert "metrics.jsonl" not in seen
    with pytest.raises(ConfigError, match="Python interpreter"):
        CodeInterpreter(hidden_paths=["/"])
