"""AgentScope's ReAct agent answering a question from a user's mailbox, as a posttrain agent function.

Trinity-RFT's ``email_search_workflow`` (its ``grpo_email_search`` example, after OpenPipe's ART·E)
trains an agent that searches an Enron mailbox in SQLite to answer one question per taskset row.
`email_agent` is that episode:

- **The row** is a question record: ``question``, ``answer``, ``message_ids`` (the emails that hold
  the answer), ``inbox_address``, ``query_date`` (a date, or text ``YYYY-MM-DD``); the question asked
  is the ``prompt_key`` column (``question``).
- **The mailbox** is a read-only SQLite file (``db_path``, else the environment variable
  DEFAULT_EMAIL_DB_PATH, as in Trinity-RFT) with Trinity-RFT's schema: ``emails`` (message_id,
  subject, from_address, date ``YYYY-MM-DD HH:MM:SS``, body, file_name), ``recipients`` (email_id,
  recipient_address, recipient_type to/cc/bcc) and the FTS5 index ``emails_fts`` over subject and
  body. `build_mailbox` writes one from email records (``python -m posttrain.agents.email_search
  EMAILS OUT.db``, EMAILS any data file, folder or cached hub dataset with Enron's columns
  message_id, subject, from, to, cc, bcc, date, body, file_name), keeping the emails Trinity-RFT's
  preparation keeps: a body of at most 5000 characters, at most 30 recipients, the first of each
  (subject, body, sender).
- **The tools**: ``search_emails(inbox_address, query_date, keywords)`` finds up to 10 emails of the
  inbox (sent from it or to it in to/cc/bcc) sent before the day after ``query_date`` whose subject
  or body hold every keyword (FTS5 phrases), newest first, as ``message_id`` and a 15-token
  snippet; ``read_email(message_id)`` returns the whole email. Errors are the tools' answers.
- **The agent**: AgentScope's ReActAgent with those tools, its meta tool on (as Trinity-RFT's agent
  wrapper builds it), at most ``max_turns`` iterations, a system prompt (posttrain's words) naming
  the turns, the inbox and the date, and a structured reply: ``answer`` and ``sources`` (message ids).
- **The reward** (Trinity-RFT's rubric, ART·E's): no answer is -1. With ``llm_as_a_judge`` false,
  1 when the answer is inside the reference (case-insensitive), else 0. Otherwise the judge (the
  stage's auxiliary model ``judge``) accepts the answer when its reply contains "true"; partial
  credit is 0.1 each for having found, read and cited the first reference email. A wrong attempt
  scores -1 + partial credit; "I don't know" scores the partial credit; a right answer scores
  1 (accuracy) + 1 + 0.3 when the sources are right + 0.1 / (number of sources) + 0.1 x (1 - calls /
  max_turns). An empty answer scores 0. ``accuracy`` and ``format`` are logged besides the reward.

Returned metrics: ``accuracy``, ``format``, ``actual_turns`` (the agent's model calls).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sqlite3
from typing import Any, Iterable

from posttrain.agents.agentscope_react import _agent, _as, _columns
from posttrain.rewards.auxiliary import chat

DB_VARIABLE = "DEFAULT_EMAIL_DB_PATH"  # where Trinity-RFT's tools find the mailbox
MAX_BODY_CHARS, MAX_RECIPIENTS, MAX_RESULTS = 5000, 30, 10
SYSTEM_PROMPT = """You answer questions about a user's email. Search the mailbox with the tools you are given and read \
the emails that look relevant; you have up to {max_turns} turns, so when a search finds nothing, try other keywords. \
Say what you see and what you will do next, and why. Once you have found the answer, call `generate_response` with \
the answer and the message ids of the emails it comes from; call it only then, and put no further plans in it.

The user's email address is {inbox_address}
Today's date is {query_date}
"""
JUDGE_SYSTEM = """You compare an AI assistant's answer with a reference answer to the same question.
First work out exactly what the question asks for. Then take from the reference answer only the facts needed to \
answer that. Accept the AI answer if it states every one of those facts with the same meaning (other wording, \
order or extra details that do not conflict are fine); reject it if one of them is missing or contradicted. Do not \
reject it for leaving out details the question did not ask for.
Reply with one word: true to accept, false to reject."""
ANSWER_DESCRIPTION = "The answer to the user's question, or 'I don't know' when the emails do not give it (then no sources)."
SOURCES_DESCRIPTION = "The message ids of the emails the answer comes from (usually one); empty when you do not know."
SCHEMA = """
CREATE TABLE emails (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT UNIQUE, subject TEXT, from_address TEXT,
                     date TEXT, body TEXT, file_name TEXT);
CREATE TABLE recipients (email_id INTEGER, recipient_address TEXT, recipient_type TEXT,
                         FOREIGN KEY(email_id) REFERENCES emails(id) ON DELETE CASCADE);
CREATE INDEX idx_emails_from ON emails(from_address);
CREATE INDEX idx_emails_date ON emails(date);
CREATE INDEX idx_emails_message_id ON emails(message_id);
CREATE INDEX idx_recipients_address_email ON recipients(recipient_address, email_id);
CREATE VIRTUAL TABLE emails_fts USING fts5(subject, body, content='emails', content_rowid='id');
"""


def database(db_path: str | None) -> str:
    """The mailbox file: `db_path`, else DEFAULT_EMAIL_DB_PATH; FileNotFoundError says what to set."""
    path = db_path or os.environ.get(DB_VARIABLE)
    if not path:
        raise FileNotFoundError(f"the mailbox database file not found: set rollout.agent.kwargs.db_path or the environment "
                                f"variable {DB_VARIABLE} to an SQLite file (python -m posttrain.agents.email_search EMAILS OUT.db)")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"the mailbox database file {path} not found (python -m posttrain.agents.email_search EMAILS OUT.db builds one)")
    return path


def check_kwargs(kwargs: dict[str, Any], key: str = "rollout.agent.kwargs") -> list[str]:
    """The mailbox must be on this machine before the run starts."""
    try:
        database(kwargs.get("db_path"))
    except FileNotFoundError as e:
        return [f"{key}.db_path: {e}"]
    return []


class Mailbox:
    """The two tools over one read-only connection, remembering what the agent found and read."""

    def __init__(self, path: str):
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self.found: list[str] = []
        self.read: list[str] = []

    def search(self, inbox: str, keywords: list[str], sent_before: str | None = None) -> list[dict[str, str]]:
        if not keywords:
            raise ValueError("no keywords given")
        phrases = " ".join('"' + str(k).replace('"', '""') + '"' for k in keywords)  # every keyword, each a phrase
        sql = ("SELECT e.message_id, snippet(emails_fts, -1, '<b>', '</b>', ' ... ', 15) FROM emails e "
               "JOIN emails_fts ON e.id = emails_fts.rowid WHERE emails_fts MATCH ? AND (e.from_address = ? OR EXISTS "
               "(SELECT 1 FROM recipients r WHERE r.recipient_address = ? AND r.email_id = e.id))")
        params: list[Any] = [phrases, inbox, inbox]
        if sent_before:
            sql += " AND e.date < ?"
            params.append(f"{sent_before} 00:00:00")
        rows = self.conn.execute(sql + " ORDER BY e.date DESC LIMIT ?", [*params, MAX_RESULTS]).fetchall()
        return [{"message_id": m, "snippet": s} for m, s in rows]

    def email(self, message_id: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT id, message_id, date, subject, from_address, body, file_name FROM emails WHERE message_id = ?",
                                (message_id,)).fetchone()
        if row is None:
            return None
        out = {"message_id": row[1], "date": row[2], "subject": row[3], "from_address": row[4],
               "to_addresses": [], "cc_addresses": [], "bcc_addresses": [], "body": row[5], "file_name": row[6]}
        for address, kind in self.conn.execute("SELECT recipient_address, recipient_type FROM recipients WHERE email_id = ?", (row[0],)):
            if kind.lower() in ("to", "cc", "bcc"):
                out[f"{kind.lower()}_addresses"].append(address)
        return out

    def toolkit(self) -> Any:
        a = _as()
        toolkit = a.Toolkit()

        def answer(text: str) -> Any:
            return a.ToolResponse(content=[a.TextBlock(type="text", text=text)])

        def search_emails(inbox_address: str, query_date: str, keywords: list[str], **kwargs: Any) -> Any:
            """Search the user's mailbox for emails that contain every keyword in their subject or body.

            Args:
                inbox_address (str): the user's email address.
                query_date (str): today's date, YYYY-MM-DD; emails sent after it are not searched.
                keywords (list[str]): the words or phrases every email found must contain.
            """
            try:
                day_after = (dt.datetime.strptime(query_date, "%Y-%m-%d") + dt.timedelta(days=1)).strftime("%Y-%m-%d")
                found = self.search(inbox_address, keywords, day_after)
            except Exception as e:  # noqa: BLE001 - the model reads the error and tries again
                return answer(f"Error: the search failed: {e}")
            self.found += [r["message_id"] for r in found]
            return answer(json.dumps(found))

        def read_email(message_id: str, **kwargs: Any) -> Any:
            """Read one email of the user's mailbox in full.

            Args:
                message_id (str): the email's message id, as the search returned it.
            """
            self.read.append(message_id)
            try:
                email = self.email(message_id)
            except Exception as e:  # noqa: BLE001
                return answer(f"Error: reading the email failed: {e}")
            return answer(f"Error: no email with message_id {message_id}." if email is None else json.dumps(email))

        toolkit.register_tool_function(search_emails)
        toolkit.register_tool_function(read_email)
        return toolkit


def rubric_reward(answer: str | None, sources: list[str], truth: str, expected: list[str], found: list[str], read: list[str],
                  calls: int, max_turns: int, correct: bool | None) -> dict[str, float]:
    """Trinity-RFT's (ART·E's) reward as {accuracy, format}; `correct` None: no judge (the answer must be in the truth).

    >>> rubric_reward("Friday", ["m1"], "on Friday", ["m1"], ["m1"], ["m1"], 5, 10, True)
    {'accuracy': 1.0, 'format': 1.4500000000000002}
    >>> rubric_reward("Monday", [], "on Friday", ["m1"], ["m1"], [], 2, 10, False)
    {'accuracy': -1.0, 'format': 0.1}
    """
    if answer is None:
        return {"accuracy": 0.0, "format": -1.0}
    if correct is None:
        return {"accuracy": float(answer.lower() in truth.lower()), "format": 0.0}
    first = expected[0] if expected else None
    partial = 0.0
    for where in (found, read, sources):  # summed in the source's order, so the floats are its floats
        partial += 0.1 if first is not None and first in where else 0.0
    if answer != "" and not correct:
        return {"accuracy": -1.0, "format": partial}
    if answer == "I don't know":
        return {"accuracy": 0.0, "format": partial}
    if correct:
        score = 1.0 + (0.3 if first is not None and first in sources else 0.0)
        score += 0.1 / len(sources) if sources else 0.0
        score += 0.1 * (1 - calls / max_turns)
        return {"accuracy": 1.0, "format": score}
    return {"accuracy": 0.0, "format": 0.0}  # an empty answer the judge accepted nowhere: the source's fallthrough


async def email_agent(base_url: str, row: dict[str, Any], *, prompt_key: str = "question", response_key: str = "answer",
                      max_turns: int = 10, db_path: str | None = None, llm_as_a_judge: bool = True, max_tokens: int | None = 4096,
                      judge: str = "judge", judge_max_tokens: int = 128) -> dict[str, float]:
    """One question answered from the mailbox and scored (module docstring)."""
    question, truth = _columns(row, prompt_key, response_key)
    missing = [k for k in ("question", "answer", "message_ids", "inbox_address", "query_date") if k not in row]
    if missing:
        raise KeyError(f"the row has no column {missing} (its columns: {sorted(row)}); an email question row has question, "
                       "answer, message_ids, inbox_address and query_date")
    mailbox = Mailbox(database(db_path))
    date = row["query_date"]
    date = date.strftime("%Y-%m-%d") if isinstance(date, (dt.date, dt.datetime)) else str(date)
    a = _as()
    from pydantic import BaseModel, Field

    class Answer(BaseModel):
        answer: str = Field(description=ANSWER_DESCRIPTION)
        sources: list[str] = Field(description=SOURCES_DESCRIPTION)

    prompt = SYSTEM_PROMPT.format(max_turns=max_turns, inbox_address=row["inbox_address"], query_date=date)
    agent = _agent(base_url, prompt, max_tokens, code_tool=False, meta_tool=True, max_iters=max_turns, name="react_agent",
                   toolkit=mailbox.toolkit())
    try:
        reply = await agent.reply(a.Msg("user", question, role="user"), structured_model=Answer)
    finally:
        mailbox.conn.close()
    metadata = reply.metadata if isinstance(reply.metadata, dict) else {}
    answer, sources = metadata.get("answer"), list(metadata.get("sources") or [])
    calls = agent.model.calls
    correct: bool | None = None
    if answer is not None and llm_as_a_judge:
        messages = [{"role": "system", "content": JUDGE_SYSTEM},
                    {"role": "user", "content": f"Question: {row['question']}\nReference answer: {row['answer']}\nAI answer: {answer}"}]
        try:
            verdict = await asyncio.to_thread(chat, judge, messages, max_tokens=judge_max_tokens)
            correct = "true" in verdict.lower()
        except Exception:  # noqa: BLE001 - a failed judge call counts as a wrong answer, as in the workflow
            correct = False
    scores = rubric_reward(answer, sources, str(truth), list(row["message_ids"] or []), mailbox.found, mailbox.read,
                           calls, max_turns, correct)
    return {"reward": scores["accuracy"] + scores["format"], **scores, "actual_turns": float(calls)}


email_agent.check_kwargs = check_kwargs  # type: ignore[attr-defined]  (read by posttrain.trainer.agent_fn)


def build_mailbox(emails: Iterable[dict[str, Any]], path: str) -> dict[str, int]:
    """Write the mailbox database from Enron-style email records (module docstring); the counts kept and skipped."""
    if os.path.exists(path):
        os.remove(path)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    seen: set[tuple[Any, Any, Any]] = set()
    counts = {"kept": 0, "too_long_or_too_many_recipients": 0, "duplicates": 0}
    with conn:
        for email in emails:
            lists = {kind: [str(a) for a in (email.get(kind) or []) if a] for kind in ("to", "cc", "bcc")}
            body = email.get("body") or ""
            if len(body) > MAX_BODY_CHARS or sum(map(len, lists.values())) > MAX_RECIPIENTS:
                counts["too_long_or_too_many_recipients"] += 1
                continue
            key = (email.get("subject"), body, email.get("from"))
            if key in seen:
                counts["duplicates"] += 1
                continue
            seen.add(key)
            date = email["date"]
            date = date.strftime("%Y-%m-%d %H:%M:%S") if isinstance(date, dt.datetime) else str(date)
            cursor = conn.execute("INSERT INTO emails (message_id, subject, from_address, date, body, file_name) VALUES (?, ?, ?, ?, ?, ?)",
                                  (email["message_id"], email.get("subject"), email.get("from"), date, body, email.get("file_name")))
            conn.executemany("INSERT INTO recipients (email_id, recipient_address, recipient_type) VALUES (?, ?, ?)",
                             [(cursor.lastrowid, a, kind) for kind, addresses in lists.items() for a in addresses])
            counts["kept"] += 1
        conn.execute("INSERT INTO emails_fts (rowid, subject, body) SELECT id, subject, body FROM emails")
    conn.close()
    return counts


# `posttrain smoke`'s stand-ins (posttrain.trainer.smoke): a mailbox of a few emails and questions on it.
_SMOKE_INBOX = "kay.mann@enron.com"
_SMOKE_EMAILS = [
    {"message_id": f"<smoke-{i}@enron.com>", "subject": subject, "from": "jeff.dasovich@enron.com", "to": [_SMOKE_INBOX],
     "date": f"2001-0{i + 1}-1{i} 09:30:00", "body": body, "file_name": f"mann-k/inbox/{i}."}
    for i, (subject, body) in enumerate([
        ("Meeting moved", "The site visit moved to Thursday at 3pm in room 22C."),
        ("Turbine contract", "The turbine contract price is 41 million dollars, signed by both parties."),
        ("Lunch", "Lunch on Friday is at the Italian place on Louisiana Street."),
    ])
]


def smoke_kwargs(workdir: Any) -> dict[str, str]:
    """The mailbox a smoke run searches (its three emails), written under ``workdir``."""
    path = os.path.join(str(workdir), "smoke_mailbox.db")
    build_mailbox(_SMOKE_EMAILS, path)
    return {"db_path": path}


def smoke_row(i: int) -> dict[str, Any]:
    """The columns an email question row needs, asking about one of `smoke_kwargs`'s emails."""
    questions = [("When is the site visit?", "Thursday at 3pm"), ("What is the turbine contract price?", "41 million dollars"),
                 ("Where is Friday's lunch?", "the Italian place on Louisiana Street")]
    question, answer = questions[i % 3]
    return {"question": question, "answer": answer, "message_ids": [_SMOKE_EMAILS[i % 3]["message_id"]],
            "inbox_address": _SMOKE_INBOX, "query_date": "2001-12-31"}


def main(argv: list[str] | None = None) -> int:
    import argparse

    from posttrain.data.sources import load_table

    parser = argparse.ArgumentParser(prog="python -m posttrain.agents.email_search", description="Build the email agent's mailbox database.")
    parser.add_argument("emails", help="a data file, dataset folder or cached hub dataset of Enron-style email records")
    parser.add_argument("out", help="the SQLite file to write")
    args = parser.parse_args(argv)
    counts = build_mailbox(load_table([args.emails], setting="emails").rows, args.out)
    print(f"{args.out}: {counts['kept']} emails ({counts['too_long_or_too_many_recipients']} too long or with too many recipients "
          f"and {counts['duplicates']} duplicates left out)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
