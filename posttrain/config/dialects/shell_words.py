"""Bash's reading of a script, for the forms launch scripts use: no command is ever run.

`commands(text)` (posttrain.config.dialects.shell_lexer) splits a script into simple commands of raw
words; `Shell.run(raw)` applies a command's assignments to its variables or
returns its words expanded as bash expands them (quoting, ``$VAR``, ``${VAR:-d}``, trims, arrays,
``$((...))``, field splitting of unquoted expansions). What it cannot expand (an unset variable, a
command substitution other than a path or date helper) expands to nothing and is listed in
`Shell.unresolved`. Used by posttrain.config.dialects.launch_script.
"""

from __future__ import annotations

import ast
import importlib.util
import fnmatch
import operator
import re
import time
from pathlib import PurePosixPath

from posttrain.config.dialects.shell_lexer import close_group, close_quote, commands

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?=)(.*)$", re.S)
_DECLARE = ("export", "local", "declare", "readonly", "typeset")

# ---- expansion ------------------------------------------------------------------------------------

class Shell:
    """Variables and the expansion of raw words into fields, as bash does for these forms."""

    def __init__(self, env: dict[str, str], script: str):
        self.vars: dict[str, str | list[str]] = dict(env)
        self.vars.setdefault("PWD", env.get("PWD", "."))
        self.script = script
        self.unresolved: list[str] = []
        # which unset variables left a value empty: per variable assigned one (NNODES=$SLURM_JOB_NUM_NODES),
        # and per `key=` word of the last command run (so that a message can name the variable)
        self.blank_from: dict[str, list[str]] = {}
        self.blanks: dict[str, list[str]] = {}
        self._missed: list[str] = []
        # variables whose value stands on a gap (a command not run, an unset variable), and whether
        # an expansion since `guessed_read` was last cleared read one: a branch is not judged on them
        self.guessed: set[str] = set()
        self.guessed_read = False

    def run(self, raw: list[str]) -> list[str] | None:
        """Apply a command's assignments; return its expanded words (None for a pure assignment)."""
        rest = raw[1:] if raw[0] in _DECLARE else raw
        rest = [w for w in rest if not (raw[0] in _DECLARE and w.startswith("-"))]
        assigns = [_ASSIGN.match(w) for w in rest]
        if rest and all(assigns):
            for m in assigns:
                self._assign(m.group(1), m.group(2), m.group(3))
            return None
        if raw[0] in _DECLARE or raw[0] == "unset":
            if raw[0] == "unset":
                for name in raw[1:]:
                    self.vars.pop(name, None)
            return None
        self.blanks = {}
        out = []
        for word in raw:
            self._missed = []
            fields = self.fields(word)
            for f in fields:
                key = re.fullmatch(r"\+{0,2}([\w.\-]+)=", f)
                if key and self._missed:
                    self.blanks[key.group(1)] = list(dict.fromkeys(self._missed))
            out += fields
        return out

    def _assign(self, name: str, op: str, value: str) -> None:
        if value.startswith("(") and value.endswith(")"):
            # the items may span lines (a newline inside the parentheses separates items, not commands)
            items = [f for command in commands(value[1:-1] + "\n") for w in command for f in self.fields(w)]
            old = self.vars.get(name, [])
            self.vars[name] = (list(old) if op == "+=" and isinstance(old, list) else []) + items
            return
        self._missed, self.guessed_read = [], False
        text = self._joined(value)
        if self.guessed_read:
            self.guessed.add(name)
        else:
            self.guessed.discard(name)
        old = self.vars.get(name, "")
        self.vars[name] = (_scalar(old) + text) if op == "+=" else text
        if self.vars[name] == "" and self._missed:
            self.blank_from[name] = list(dict.fromkeys(self._missed))
        else:
            self.blank_from.pop(name, None)

    def fields(self, raw: str) -> list[str]:
        """One raw word -> its fields (an unquoted expansion splits on whitespace; ``"$@"`` is none)."""
        pieces, _ = self._expand(raw)
        fields: list[str] = []
        current: str | None = None
        for text, splittable in pieces:
            if text is None:  # a field boundary ("${arr[@]}" items)
                if current is not None:
                    fields.append(current)
                current = None
                continue
            if not splittable:
                current = (current or "") + text
                continue
            parts = text.split()
            if not parts:
                continue
            if text[:1].isspace() and current is not None:
                fields.append(current)
                current = None
            for k, part in enumerate(parts):
                if k > 0:
                    fields.append(current)
                    current = None
                current = (current or "") + part
            if text[-1:].isspace():
                fields.append(current)
                current = None
        if current is not None:
            fields.append(current)
        return fields

    def _expand(self, raw: str, assignment: bool = False) -> tuple[list[tuple[str | None, bool]], bool]:
        """``[(text, splittable)]`` pieces of a raw word; (None, False) marks a field boundary."""
        out: list[tuple[str | None, bool]] = []
        i, n = 0, len(raw)
        while i < n:
            c = raw[i]
            if c == "'":
                j = close_quote(raw, i)
                out.append((raw[i + 1:j - 1], False))
                i = j
            elif c == '"':
                j = close_quote(raw, i)
                out += self._double_quoted(raw[i + 1:j - 1])
                i = j
            elif c == "\\" and i + 1 < n:
                out.append((raw[i + 1], False))
                i += 2
            elif c == "$":
                text, i = self._dollar(raw, i)
                if isinstance(text, list):
                    for item in text:
                        out += [(None, False), (item, not assignment)]
                    out.append((None, False))
                else:
                    out.append((text, not assignment))
            else:
                out.append((c, False))
                i += 1
        return out, True

    def _joined(self, raw: str) -> str:
        """A raw word expanded without field splitting (assignments, defaults, arithmetic)."""
        return " ".join(f for f in _join_fields(self._expand(raw, assignment=True)[0]))

    def _double_quoted(self, body: str) -> list[tuple[str | None, bool]]:
        out: list[tuple[str | None, bool]] = []
        i = 0
        while i < len(body):
            c = body[i]
            if c == "\\" and i + 1 < len(body) and body[i + 1] in '$`"\\\n':
                out.append((body[i + 1], False))
                i += 2
            elif c == "$":
                text, i = self._dollar(body, i)
                if isinstance(text, list):  # "${arr[@]}": one field per item; "$@": none
                    for item in text:
                        out += [(None, False), (item, False)]
                    out.append((None, False))
                else:
                    out.append((text, False))
            else:
                out.append((c, False))
                i += 1
        return out

    def _dollar(self, s: str, i: int) -> tuple[str | list[str], int]:
        """Expand the ``$...`` at ``s[i]``: ``(value, index after it)``; arrays and ``$@`` give lists."""
        if s.startswith("$((", i):
            j = close_group(s, i + 1)
            return self._arith(s[i + 3:j - 2]), j
        if s.startswith("$(", i):
            j = close_group(s, i + 1)
            return self._substitute(s[i + 2:j - 1]), j
        if s.startswith("${", i):
            j = close_group(s, i + 1)
            return self._braced(s[i + 2:j - 1]), j
        if i + 1 < len(s) and s[i + 1] in "@*":
            return [], i + 2  # the script's own arguments: none
        if i + 1 < len(s) and s[i + 1] in "#?$!":
            return "0", i + 2
        if i + 1 < len(s) and s[i + 1].isdigit():
            return self.script if s[i + 1] == "0" else self._get(f"#positional{s[i + 1]}"), i + 2
        m = _NAME.match(s, i + 1)
        if not m:
            return "$", i + 1
        return self._get(m.group(0)), m.end()

    def _get(self, name: str) -> str:
        self.guessed_read = self.guessed_read or name in self.guessed
        if name not in self.vars:
            shown = f"${name.removeprefix('#positional')} (an argument of the script)" if name.startswith("#") else f"${name}"
            self._gap(f"{shown} is not set (expanded to nothing)")
            self._missed.append(name)
            return ""
        if name in self.blank_from and self.vars[name] == "":
            self._missed += self.blank_from[name]
        return _scalar(self.vars[name])

    def _braced(self, body: str) -> str | list[str]:
        if body.startswith("#"):
            value = self.vars.get(body[1:], "")
            return str(len(value))
        if body.startswith("@"):
            return []  # ${@:2}: the script's own arguments, none
        m = _NAME.match(body) or re.match(r"\d+", body)
        if not m:
            self._gap(f"${{{body}}} is not understood (expanded to nothing)")
            return ""
        name, rest = m.group(0), body[m.end():]
        self.guessed_read = self.guessed_read or name in self.guessed
        if name.isdigit():  # a positional argument: the script is given none
            name = f"#positional{name}"
        if name == "BASH_SOURCE" and rest in ("", "[0]"):
            return self.script
        if rest in ("[@]", "[*]"):
            value = self.vars.get(name, [])
            return list(value) if isinstance(value, list) else [value]
        index = re.fullmatch(r"\[(\d+)\]", rest)
        if index:
            value = self.vars.get(name, [])
            items = value if isinstance(value, list) else [value]
            k = int(index.group(1))
            return items[k] if k < len(items) else ""
        op = re.match(r":?[-=+?]", rest)
        if rest == "":
            return self._get(name)
        if op is None and rest[:1] in "/%#":
            return self._trim(name, rest)
        if op is None:
            self._gap(f"${{{body}}}: the operator {rest[:2]!r} is not understood (expanded to nothing)")
            return ""
        word = self._joined(rest[op.end():])
        value = self.vars.get(name)
        empty = value is None or (op.group(0).startswith(":") and _scalar(value) == "")
        kind = op.group(0)[-1]
        if kind == "-":
            return word if empty else _scalar(value)
        if kind == "=":
            if empty:
                self.vars[name] = word
            return _scalar(self.vars[name])
        if kind == "+":
            return "" if empty else word
        if empty:
            self._gap(f"${{{body}}}: {name} is not set (the script would stop here)")
        return "" if empty else _scalar(value)

    def _trim(self, name: str, rest: str) -> str:
        """``${V/a/b}``, ``${V//a/b}`` (literal a), ``${V%glob}``, ``${V%%glob}``, ``${V#glob}``, ``${V##glob}``."""
        value = self._get(name)
        if rest[0] == "/":
            every = rest.startswith("//")
            pattern, _, repl = rest[2 if every else 1:].partition("/")
            return value.replace(pattern, repl) if every else value.replace(pattern, repl, 1)
        longest = rest[:2] in ("%%", "##")
        glob = rest[2 if longest else 1:]
        cuts = range(len(value) + 1)
        if rest[0] == "%":  # the shortest (or longest) matching suffix removed
            ends = [k for k in (cuts if longest else reversed(cuts)) if fnmatch.fnmatchcase(value[k:], glob)]
            return value[:ends[0]] if ends else value
        starts = [k for k in (reversed(cuts) if longest else cuts) if fnmatch.fnmatchcase(value[:k], glob)]
        return value[starts[0]:] if starts else value

    def _arith(self, expr: str) -> str:
        text = self._joined(expr)
        text = _NAME.sub(lambda m: _scalar(self.vars.get(m.group(0), "0")) or "0", text)
        try:
            return str(_int_eval(ast.parse(text.strip(), mode="eval").body))
        except (SyntaxError, ValueError, ZeroDivisionError, TypeError):
            self._gap(f"$(({expr})) is not integer arithmetic posttrain reads (expanded to nothing)")
            return ""

    def _substitute(self, command: str) -> str:
        """The few command substitutions that name a path or a date, or that ask whether a Python
        module is installed (`_import_probe`); anything else is a gap."""
        probe = _IMPORT_PROBE.fullmatch(command.strip())
        if probe:
            return _import_probe(probe)
        parts = [[f for w in raw for f in self.fields(w)] for raw in commands(command + "\n")]
        words = parts[0] if parts else []
        if len(parts) == 2 and parts[1] == ["pwd"] and words[:1] == ["cd"]:  # $(cd DIR && pwd)
            return next((w for w in words[1:] if not w.startswith("-")), "")
        if words == ["pwd"]:
            return _scalar(self.vars.get("PWD", "."))
        if words[:1] == ["date"]:
            fmt = next((w[1:] for w in words[1:] if w.startswith("+")), "%a %b %d %H:%M:%S %Z %Y")
            return time.strftime(fmt)
        if len(words) == 2 and words[0] in ("basename", "dirname"):
            path = PurePosixPath(words[1])
            return path.name if words[0] == "basename" else str(path.parent)
        self._gap(f"$({command}) is a command posttrain does not run (expanded to nothing)")
        return ""

    def _gap(self, what: str) -> None:
        self.guessed_read = True  # the expansion under way stands on this gap
        if what not in self.unresolved:
            self.unresolved.append(what)


# `python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu`: verl's scripts pick the device by
# whether a module imports
_IMPORT_PROBE = re.compile(r"python3?\s+-c\s+(['\"])import\s+([A-Za-z_][\w.]*)\1\s*(?:2>\s*/dev/null\s*)?"
                           r"&&\s*echo\s+([\w.\-]+)\s*\|\|\s*echo\s+([\w.\-]+)")


def _import_probe(m: re.Match) -> str:
    """What the probe prints on this machine: the first word when the module is installed here (found
    on the path: nothing is imported or run), else the second."""
    try:
        found = importlib.util.find_spec(m.group(2)) is not None
    except (ImportError, ValueError):  # a submodule of a package that is not there
        found = False
    return m.group(3) if found else m.group(4)


def _join_fields(pieces: list[tuple[str | None, bool]]) -> list[str]:
    """Pieces -> fields at the boundaries only (no splitting on whitespace)."""
    fields, current = [], ""
    for text, _ in pieces:
        if text is None:
            if current:
                fields.append(current)
            current = ""
        else:
            current += text
    return fields + ([current] if current else [])


def _scalar(value: str | list[str]) -> str:
    return value[0] if isinstance(value, list) and value else ("" if isinstance(value, list) else value)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod,
        ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}


def _int_eval(node: ast.AST) -> int:
    """Integer arithmetic as bash's ``$((...))``: + - * / % ** and parentheses (``/`` truncates)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _int_eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _int_eval(node.left), _int_eval(node.right)
        if isinstance(node.op, ast.Div):
            return int(left / right)  # bash truncates toward zero
        if type(node.op) in _OPS:
            return _OPS[type(node.op)](left, right)
    raise ValueError("not integer arithmetic")



__all__ = ["Shell", "commands"]
