"""``sandbox ui`` after a rewind, a relaunch or an interruption (issue #22): the page says what happened.

The page is read from the real ``sandbox ui`` process over HTTP on 127.0.0.1 (its HTML and its
actions' JSON), and what it shows is held to what the CLI says and does: ``log``'s marks, ``diff``
and ``apply --dry-run``'s paths, ``undo``'s taking back of a rewind, and the commands it names,
which are run here as shown.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from sandbox.recovery import continue_
from sandbox.recovery.resume import resume
from sandbox.recovery.rewind import rewind
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.agent.test_transcripts import SESSION, claude_lines
from tests.conftest import sandbox_cmd, tree_digest
from tests.ui.test_ui import _served


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


class _Rows(HTMLParser):
    """Each table row of a page: its classes, id, data-call and text; and each copyable command."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.commands: list[str] = []
        self.buttons: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "tr":
            self.rows.append({"class": found.get("class", ""), "id": found.get("id", ""), "text": ""})
        elif tag == "pre" and "command" in found.get("class", "").split():
            self.commands.append("")
            self._in = "command"
        elif tag == "button":
            self.buttons.append("")
            self._in = "button"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("pre", "button"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self.rows:
            self.rows[-1]["text"] += data
        if self._in == "command":
            self.commands[-1] += data
        elif self._in == "button":
            self.buttons[-1] += data


def _parse(html: str) -> _Rows:
    parser = _Rows()
    parser.feed(html)
    return parser


class Page:
    """The served page, read with the token as the page's script sends it."""

    def __init__(self, url: str) -> None:
        self.base = url.split("/#", 1)[0]
        self.token = url.split("token=", 1)[1]

    def get(self, path: str) -> str:
        request = urllib.request.Request(self.base + path, headers={"X-Sandbox-Token": self.token})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return str(answer.read().decode())

    def post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        request = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"X-Sandbox-Token": self.token, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                data = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            data = json.loads(exc.read())
        assert isinstance(data, dict)
        return data


def _call_rows(rows: _Rows) -> dict[str, dict[str, str]]:
    return {r["id"].removeprefix("call-"): r for r in rows.rows if "call" in r["class"].split()}


def _log_marks(repo: Path, run: Run) -> dict[str, bool]:
    """Which calls 'sandbox log' marks [rolled back]."""
    shown = sandbox_cmd("log", run.run_id, "--no-pager", "--no-color", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    out = {}
    for line in shown.stdout.decode().splitlines():
        words = line.split()
        if len(words) > 1 and words[0].isdigit():
            out[words[1]] = "[rolled back]" in line
    return out


def _three_calls(run: Run, session: str | None = None) -> list[str]:
    ids = []
    for n, (tool, path, text) in enumerate(
        (("Write", "a.txt", "one\n"), ("Bash", "b.txt", "two\n"), ("Edit", "a.txt", "three\n"))
    ):
        call_id = f"toolu_{n:06d}"
        with run.tool_call(tool, {"command": f"write {path}"}, call_id=call_id, agent_session=session) as c:
            c.write(path, text)
        ids.append(call_id)
    return ids


def test_a_rewind_is_a_row_of_its_own_its_calls_are_marked_as_log_marks_them_until_an_undo(repo: Path) -> None:
    run = start(repo)
    ids = _three_calls(run)
    done = sandbox_cmd("rewind", run.run_id, "--to", ids[1], cwd=repo)
    assert done.returncode == 0, done.stderr
    cli_would = json.loads(sandbox_cmd("apply", run.run_id, "--dry-run", "--json", cwd=repo).stdout)["would_apply"]
    user_tree = tree_digest(repo)
    for _proc, url in _served(repo):
        page = Page(url)
        rows = _parse(page.get(f"/run/{run.run_id}/timeline"))
        calls = _call_rows(rows)
        rewinds = [r for r in rows.rows if "rewind" in r["class"].split()]
        assert len(rewinds) == 1
        said = " ".join(rewinds[0]["text"].split())
        assert f"went back to just before call #2 {ids[1]}" in said and "sandbox rewind" in said
        assert f"no longer held the changes of 2 call(s): #2 {ids[1]}, #3 {ids[2]}" in said
        assert "no conversation was forked" in said and f"#2 {ids[1]}" in said.split("outside the files")[1]
        assert f"sandbox undo {run.run_id} takes it back" in said
        # Where it happened: after the calls it took back (they ran before it).
        kinds = [r["id"] or r["class"] for r in rows.rows]
        assert kinds.index("detail event rewind") > kinds.index(f"call-{ids[2]}")
        # The calls it took out are marked as 'sandbox log' marks them, and only those.
        assert {c: "rolled back" in r["text"] for c, r in calls.items()} == _log_marks(repo, run)
        assert "rolled back by the rewind to before #2" in calls[ids[2]]["text"]
        assert "out" in calls[ids[1]]["class"].split() and "out" not in calls[ids[0]]["class"].split()
        # What the page offers for apply is what apply would write now: a.txt as call 1 left it.
        diff = page.get(f"/run/{run.run_id}/diff")
        assert "data-path='a.txt'" in diff and "data-path='b.txt'" not in diff and cli_would == ["a.txt"]
        preview = page.post(f"/api/run/{run.run_id}/preview", {})
        assert preview["ok"] and preview["report"]["would_apply"] == cli_would  # type: ignore[index]
        cli_refusal = sandbox_cmd("diff", run.run_id, "--call", ids[2], cwd=repo).stderr.decode()
        assert "rolled back" in cli_refusal and "rolled back" in page.get(f"/run/{run.run_id}/call/{ids[2]}/diff")
        # The page's Undo is the CLI's: right after a rewind it takes the rewind back.
        undone = page.post(f"/api/run/{run.run_id}/undo", {})
        assert undone["ok"] and "Took back the rewind" in str(undone["message"]), undone
        rows = _parse(page.get(f"/run/{run.run_id}/timeline"))
        assert not any("rolled back" in r["text"] for r in _call_rows(rows).values())
        assert _log_marks(repo, run) == dict.fromkeys(ids, False)
        said = " ".join(next(r for r in rows.rows if "rewind" in r["class"].split())["text"].split())
        assert "Taken back by an undo at" in said and f"sandbox redo {run.run_id} rewinds again" in said
        diff = page.get(f"/run/{run.run_id}/diff")
        assert "data-path='a.txt'" in diff and "data-path='b.txt'" in diff
        assert (Path(run.worktree) / "a.txt").read_text() == "three\n"
        # And Redo rewinds again, as 'sandbox redo' does: the calls are out again, marked so.
        redone = page.post(f"/api/run/{run.run_id}/redo", {})
        assert redone["ok"] and "Rewound again" in str(redone["message"]), redone
        calls = _call_rows(_parse(page.get(f"/run/{run.run_id}/timeline")))
        assert {c: "rolled back" in r["text"] for c, r in calls.items()} == _log_marks(repo, run)
        assert "rolled back by the rewind to before #2" in calls[ids[1]]["text"]
    assert (Path(run.worktree) / "a.txt").read_text() == "one\n"
    assert tree_digest(repo) == user_tree  # the rewind and its undo are the run's: the user's tree untouched


def test_each_call_names_its_agent_session_once_the_agent_went_on_in_a_fork(repo: Path, tmp_path: Path) -> None:
    run = start(repo)
    ids = _three_calls(run, SESSION)
    home = tmp_path / "claude-home"
    own = home / "projects" / "anywhere" / f"{SESSION}.jsonl"
    own.parent.mkdir(parents=True)
    own.write_bytes(claude_lines(3))
    for _proc, url in _served(repo):
        one = _parse(Page(url).get(f"/run/{run.run_id}/timeline"))
        assert not any("session" in r["text"] for r in one.rows)  # one session: nothing to tell apart
    report = rewind(run, ids[1], {"claude-code": [str(home)]})
    fork = report.session
    assert fork is not None and fork[:8] != SESSION[:8]
    with run.tool_call("Bash", {"command": "write c.txt"}, call_id="toolu_000009", agent_session=fork) as c:
        c.write("c.txt", "after the rewind\n")  # the agent relaunched on the fork ('rewind --continue')
    for _proc, url in _served(repo):
        rows = _parse(Page(url).get(f"/run/{run.run_id}/timeline"))
        calls = _call_rows(rows)
        for call_id in ids:
            assert f"session {SESSION[:8]}" in calls[call_id]["text"]
        assert f"session {fork[:8]}" in calls["toolu_000009"]["text"]
        texts = [" ".join(r["text"].split()) for r in rows.rows]
        at = next(i for i, t in enumerate(texts) if t.startswith("session the agent's calls from here"))
        assert f"ran in session {fork[:8]} (before: {SESSION[:8]})" in texts[at]
        assert f"the conversation the rewind to before call #2 {ids[1]} forked" in texts[at]
        assert "toolu_000009" in texts[at + 1] and texts[at - 1].startswith("rewind")  # where it was relaunched
        assert f"forked just before that call as agent session {fork[:8]}" in texts[at - 1]


def _run_shown(command: str, repo: Path) -> subprocess.CompletedProcess[bytes]:
    """A command the page shows, run as the user would paste it (the installed 'sandbox')."""
    argv = shlex.split(command)
    assert argv[0] == "sandbox"
    return sandbox_cmd(*argv[1:], cwd=repo)


def _shown(url: str, run: Run) -> _Rows:
    rows = _parse(Page(url).get(f"/run/{run.run_id}"))
    assert not any("resume" in b or "approve" in b.lower() for b in rows.buttons)  # text to copy, never a button
    return rows


def test_the_next_command_after_a_crash_and_for_each_blocked_call_is_text_to_copy_and_runs(repo: Path) -> None:
    run = start(repo)
    run.note({"agent_command": ["claude", "-p", "Do it."], "subdir": ""})
    with run.tool_call("Write", {"file_path": "a.txt"}, call_id="toolu_a", agent_session=SESSION) as c:
        c.write("a.txt", "one\n")
    cut = run.start_call("Bash", {"command": "make deploy"}, call_id="toolu_b", agent_session=SESSION)
    for _proc, url in _served(repo):
        assert _shown(url, run).commands == [f"sandbox resume {run.run_id} --continue"]  # the agent died during it
    report = resume(run)  # as 'resume --continue' does before it relaunches: the call is uncertain...
    resolve = [f"sandbox call resolve {run.run_id} {cut} --status {s}" for s in ("succeeded", "failed")]
    for _proc, url in _served(repo):
        assert _shown(url, run).commands == [f"sandbox resume {run.run_id} --continue", *resolve]
    assert continue_.block_uncertain(run, report) == [cut]  # ...and blocked until approved,
    run.note({"agent_command": ["claude", "-p", "Go on."], "subdir": ""})  # as the relaunched session records it
    for _proc, url in _served(repo):
        rows = _shown(url, run)
        approve = f"sandbox approve {run.run_id} {cut}"
        assert rows.commands == [*resolve, approve]
        # Where the agent was started again: after the call it was interrupted in.
        texts = [" ".join(r["text"].split()) for r in rows.rows]
        at = next(i for i, t in enumerate(texts) if t.startswith("relaunched sandbox run started the agent again"))
        assert at > next(i for i, r in enumerate(rows.rows) if r["id"] == f"call-{cut}")
    approved = _run_shown(approve, repo)
    assert approved.returncode == 0, approved.stderr
    for _proc, url in _served(repo):
        page = Page(url).get(f"/run/{run.run_id}")
        assert "You approved it" in page and _parse(page).commands == resolve
    assert _run_shown(resolve[0], repo).returncode == 0
    for _proc, url in _served(repo):
        assert _shown(url, run).commands == []
        assert "a resume has nothing to decide" in Page(url).get(f"/run/{run.run_id}")


def test_an_interrupted_session_names_the_resume_the_cli_accepts(repo: Path) -> None:
    """A real 'sandbox run' whose agent exits as Ctrl-C leaves it (130): the page names the next command."""
    run = start(repo)
    ran = sandbox_cmd("run", run.run_id, "--isolate", "off", "--", "sh", "-c", "exit 130", cwd=repo)
    assert ran.returncode == 130, ran.stderr
    for _proc, url in _served(repo):
        page = Page(url).get(f"/run/{run.run_id}")
        rows = _parse(page)
        assert rows.commands == [f"sandbox resume {run.run_id}"]  # sh is no agent the sandbox can relaunch
        assert "last session was interrupted (the agent exited 130" in " ".join(page.split())
        assert "the sandbox cannot relaunch this agent" in page
    shown = _run_shown(rows.commands[0], repo)
    assert shown.returncode == 0, shown.stderr


def test_a_call_id_that_reads_as_an_option_is_still_one_argument_in_the_commands_to_copy(repo: Path) -> None:
    """A call id is the agent's word (a hook's, an MCP client's): '-C..' pasted after the run read as
    an option of the command (another directory), and resolved or approved nothing of this run."""
    from sandbox.ui.recovery import next_steps

    run = start(repo)
    odd = f"-C{repo.parent}"
    run.start_call("Bash", {"command": "make deploy"}, call_id=odd)
    assert continue_.block_uncertain(run, resume(run)) == [odd]
    steps = next_steps(run, run.state())
    commands = [c for s in steps if s.call_id == odd for c in s.commands]
    assert len(commands) == 3  # resolve (either outcome), approve
    approved = _run_shown(commands[2], repo)
    assert approved.returncode == 0, approved.stderr
    done = _run_shown(commands[0], repo)
    assert done.returncode == 0, done.stderr
    assert Run.open(run.project, run.run_id).state().calls[odd].status.value == "succeeded"
