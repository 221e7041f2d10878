"""posttrain's email agent (posttrain.agents.email_search), Trinity-RFT's email_search_workflow: the
mailbox database built from email records as Trinity-RFT's preparation builds it, the two tools, the
real AgentScope ReActAgent driven by a scripted policy, and the ART·E rubric reward."""

from __future__ import annotations

import datetime as dt
import json

import pytest

pytest.importorskip("agentscope", reason="the agentscope extra (pip install 'posttrain[agentscope]')")

from agent_helpers import call, scripted_episode  # noqa: E402
from posttrain.agents import email_search  # noqa: E402
from posttrain.agents.email_search import Mailbox, build_mailbox, check_kwargs, email_agent, rubric_reward  # noqa: E402

ME, BOSS = "kay@enron.com", "boss@enron.com"


def mail(i, subject, body, sender=BOSS, to=(ME,), day=1, **extra):
    return {"message_id": f"<m{i}>", "subject": subject, "body": body, "from": sender, "to": list(to), "cc": [], "bcc": [],
            "date": dt.datetime(2001, 5, day, 9, i), "file_name": f"f{i}", **extra}


EMAILS = [
    mail(1, "Offsite", "The offsite moves to Friday in Houston.", day=3),
    mail(2, "Offsite logistics", "Buses leave at 8 for the offsite.", day=4, cc=["x@enron.com"]),
    mail(3, "Offsite", "Not your offsite: another inbox.", to=("other@enron.com",), day=3),
    mail(4, "Offsite", "The offsite moves to Friday in Houston.", day=3),  # a duplicate of 1 (subject, body, sender)
    mail(5, "Long", "x" * 5001),
    mail(6, "Crowd", "many", to=[f"p{k}@enron.com" for k in range(31)]),
    mail(7, "Offsite recap", "The offsite was great.", day=20),
]
ROW = {"id": 1, "question": "When is the offsite?", "answer": "Friday", "message_ids": ["<m1>"], "how_realistic": 0.9,
       "inbox_address": ME, "query_date": dt.datetime(2001, 5, 10)}


@pytest.fixture()
def db(tmp_path):
    path = str(tmp_path / "enron.db")
    assert build_mailbox(EMAILS, path) == {"kept": 4, "too_long_or_too_many_recipients": 2, "duplicates": 1}
    return path


def test_the_tools_search_the_inbox_by_keywords_and_date_and_read_whole_emails(db):
    box = Mailbox(db)
    found = box.search(ME, ["offsite"], "2001-05-11")
    assert [r["message_id"] for r in found] == ["<m2>", "<m1>"]  # newest first; m3 is another inbox's, m7 after the date
    assert "<b>offsite</b>" in found[1]["snippet"].lower()
    assert [r["message_id"] for r in box.search(ME, ["offsite", "Houston"])] == ["<m1>"]  # every keyword
    assert [r["message_id"] for r in box.search(BOSS, ["recap"])] == ["<m7>"]  # the sender's inbox, no date bound
    email = box.email("<m2>")
    assert email["to_addresses"] == [ME] and email["cc_addresses"] == ["x@enron.com"] and email["date"] == "2001-05-04 09:02:00"
    assert box.email("<nope>") is None
    with pytest.raises(ValueError, match="no keywords"):
        box.search(ME, [])


def judged(monkeypatch, verdict):
    seen = []

    def fake(model, messages, max_tokens):
        seen.append((model, messages, max_tokens))
        return verdict
    monkeypatch.setattr(email_search, "chat", fake)
    return seen


def test_an_episode_that_finds_reads_and_cites_the_email_scores_the_full_rubric(db, monkeypatch):
    seen = judged(monkeypatch, "true")
    texts = [call("search_emails", {"inbox_address": ME, "query_date": "2001-05-10", "keywords": ["offsite"]}),
             call("read_email", {"message_id": "<m1>"}),
             call("generate_response", {"answer": "Friday", "sources": ["<m1>"]}), "Done."]
    result, calls, policy = scripted_episode(email_agent, texts, ROW, db_path=db, max_turns=10)
    turns = result["actual_turns"]
    assert turns == len(calls) >= 3
    assert result["accuracy"] == 1.0 and result["format"] == pytest.approx(1 + 0.3 + 0.1 + 0.1 * (1 - turns / 10))
    assert result["reward"] == result["accuracy"] + result["format"]
    assert "kay@enron.com" in policy.prompts[0] and "2001-05-10" in policy.prompts[0] and "When is the offsite?" in policy.prompts[0]
    assert "&lt;m2&gt;" in policy.prompts[1] or "<m2>" in policy.prompts[1]  # the search's results reached the model
    assert "Buses" not in policy.prompts[1] and "Friday in Houston" in policy.prompts[2]  # the body only once read
    [(model, messages, max_tokens)] = seen
    assert model == "judge" and max_tokens == 128 and "Reference answer: Friday\nAI answer: Friday" in messages[-1]["content"]


def test_wrong_answers_unknown_answers_and_no_judge(db, monkeypatch):
    judged(monkeypatch, "false")
    wrong = [call("search_emails", {"inbox_address": ME, "query_date": "2001-05-10", "keywords": ["offsite"]}),
             call("generate_response", {"answer": "Monday", "sources": []}), "Done."]
    result, _, _ = scripted_episode(email_agent, wrong, ROW, db_path=db)
    assert (result["accuracy"], result["format"]) == (-1.0, pytest.approx(0.1))  # found the right email, nothing more
    idk = [call("generate_response", {"answer": "I don't know", "sources": []}), "Done."]
    result, _, _ = scripted_episode(email_agent, idk, ROW, db_path=db)
    assert (result["accuracy"], result["format"]) == (-1.0, 0.0)  # "I don't know" is an attempt the judge rejects
    seen = judged(monkeypatch, "should not be asked")
    result, _, _ = scripted_episode(email_agent, [call("generate_response", {"answer": "friday", "sources": []}), "Done."], ROW,
                                    db_path=db, llm_as_a_judge=False)
    assert (result["accuracy"], result["format"], seen) == (1.0, 0.0, [])  # the answer inside the reference, no judge


def test_rubric_branches():
    base = dict(truth="Friday", expected=["<m1>"], found=["<m1>"], read=["<m1>"], calls=2, max_turns=10)
    assert rubric_reward(None, [], **base, correct=True) == {"accuracy": 0.0, "format": -1.0}
    assert rubric_reward("I don't know", [], **base, correct=True) == {"accuracy": 0.0, "format": pytest.approx(0.2)}
    assert rubric_reward("", [], **base, correct=False) == {"accuracy": 0.0, "format": 0.0}
    assert rubric_reward("Fri", ["<m1>", "<m9>"], **base, correct=True) == {"accuracy": 1.0, "format": pytest.approx(1.3 + 0.05 + 0.08)}


def test_the_database_must_be_on_the_machine(tmp_path, monkeypatch, db):
    monkeypatch.delenv("DEFAULT_EMAIL_DB_PATH", raising=False)
    [problem] = check_kwargs({})
    assert "rollout.agent.kwargs.db_path: the mailbox database file not found: set" in problem
    assert "file /nope.db not found" in check_kwargs({"db_path": "/nope.db"})[0]
    monkeypatch.setenv("DEFAULT_EMAIL_DB_PATH", db)  # Trinity-RFT's variable
    assert check_kwargs({}) == []


def test_the_builder_command_reads_email_files(tmp_path, capsys):
    rows = [{**e, "date": e["date"].isoformat(sep=" ")} for e in EMAILS[:3]]
    (tmp_path / "emails.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert email_search.main([str(tmp_path / "emails.jsonl"), str(tmp_path / "box.db")]) == 0
    assert "3 emails" in capsys.readouterr().out
    assert Mailbox(str(tmp_path / "box.db")).email("<m3>")["to_addresses"] == ["other@enron.com"]
