"""A call's one line in the ledger says what its input ran, whatever the hook payload's ``summary`` says.

The payload comes from inside the run (the agent can send any), and the summary is what ``resume``,
``rewind``'s side effects and ``log --call`` show: it may only repeat what the input names.
"""

from __future__ import annotations

from sandbox.agent import recorder
from sandbox.agent.hookproto import HookEvent


def _summary(tool: str, given: object, summary: str | None) -> str | None:
    return recorder._summary(HookEvent(phase="start", cwd="/w", tool=tool, input=given, summary=summary))


def test_a_word_before_a_command_is_not_taken_from_the_payload() -> None:
    """'echo rm -rf src' for an input that ran 'rm -rf src' would read as harmless."""
    assert _summary("Bash", {"command": "rm -rf src"}, "echo rm -rf src") == "Bash: rm -rf src"
    assert _summary("WebFetch", {"url": "https://x.example/a"}, "read https://x.example/a") == (
        "WebFetch: https://x.example/a"
    )


def test_only_sandbox_mcps_own_verbs_go_before_a_path() -> None:
    assert _summary("write_file", {"path": "src/a.txt"}, "write src/a.txt") == "write src/a.txt"
    assert _summary("edit_file", {"path": "src/a.txt"}, "edit src/a.txt") == "edit src/a.txt"
    assert _summary("Write", {"file_path": "src/a.txt"}, "read src/a.txt") == "Write: src/a.txt"
    assert _summary("Bash", {"command": "ls"}, "ls") == "ls"


def test_a_shell_summary_is_taken_only_for_the_shell_sandbox_mcp_runs() -> None:
    """``sandbox mcp``'s run_command is ``/bin/sh -c COMMAND``; another program before ``-c`` ran
    something else than the command the summary shows."""
    assert _summary("run_command", {"argv": ["/bin/sh", "-c", "ls"]}, "ls") == "ls"
    assert _summary("run_command", {"argv": ["/tmp/evil", "-c", "ls"]}, "ls") == "/tmp/evil -c ls"


def test_a_summary_that_says_what_ran_is_bounded_too() -> None:
    """The payload's summary kept because it names exactly what ran is cut to 500 characters, as
    every other summary is (a 5,000-character command was stored and shown whole)."""
    command = "echo " + "x" * 5000
    assert _summary("Bash", {"command": command}, command) == command[:500]
    assert _summary("run_command", {"argv": ["/bin/sh", "-c", command]}, command) == command[:500]
