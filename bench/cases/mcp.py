"""``sandbox mcp``: a tool call through the Model Context Protocol, inside a running server.

One run of the generated repository, its ``sandbox serve`` up (as the first ``sandbox exec`` or
hook leaves it), and one ``sandbox mcp --run RUN`` server driven by the MCP SDK's own client over
stdio, alive for the whole case (as a client keeps it). Measured from the client, request to answer:

- ``write_file`` of one small file (one recorded call: ``started`` durable, the write, the finish),
  and as its floors the same workspace method, and the library's ``tool_call`` + ``call.write``,
  called in the benchmark's own process (what the protocol adds, what the workspace adds);
- ``run_command`` of a command that changes one file, against ``sandbox exec RUN -- sh -c ...``
  (a whole process, the run's service up: its fast path) of the same command, alternating;
- ``search`` of a pattern found nowhere (git walks the whole tree), its git in the run's sandbox,
  against the same ``git grep`` run plainly in the worktree (what a model's own unconfined grep costs).

Targets (issue 15): the write, median <= 30 ms at the largest size; ``run_command`` within 1.5x
of ``sandbox exec`` (ratio of the medians).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from bench.cases import Context, rotate, settle
from bench.genrepo import Repo
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "mcp"
G_WRITE = "write_file through MCP (one recorded call)"
G_CMD = "a command changing one file"
V_MCP = "run_command through MCP"
V_EXEC = "sandbox exec, the run's service up"
V_FLOOR = "floor: the same Workspace.write_file in-process (no protocol)"
V_LIB = "floor: run.tool_call + call.write in-process (the library alone)"
G_SEARCH = "a search found nowhere (the whole tree read)"
V_SEARCH = "search through MCP (its git in the run's sandbox)"
V_GREP = "git grep -l --untracked in the worktree, unconfined"
#: Found in no file of the generated repository.
NOWHERE = "sandbox-bench-nowhere-[0-9]{7}"


def run(ctx: Context, repo: Repo) -> None:
    """Start a run, its service and an MCP server; time the tool calls from the client."""
    try:
        import anyio  # noqa: F401
        from mcp import ClientSession  # noqa: F401
    except ImportError:
        ctx.results.skip(CASE, repo.size, "the mcp package is not installed")
        return
    from sandbox.agent import host
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, workdir, _ = Project.discover(repo.path)
    assert workdir is not None
    run_ = Run.start(project, workdir)
    try:
        if not _serve(repo.path, run_.run_id, project.common_dir):
            ctx.results.skip(CASE, repo.size, "`sandbox serve` did not answer")
            return
        import anyio

        anyio.run(_measure, ctx, repo, run_.run_id)
    finally:
        host.stop_host(project.common_dir)
        run_.drop(force=True)


async def _measure(ctx: Context, repo: Repo, run_id: str) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    res: Results = ctx.results
    env = dict(os.environ)
    params = StdioServerParameters(command=SANDBOX, args=["-C", repo.path, "mcp", "--run", run_id], env=env)
    res.row(CASE, repo.size, G_WRITE, V_LIB, ref=True)
    res.row(CASE, repo.size, G_CMD, V_EXEC, ref=True)
    res.row(CASE, repo.size, G_SEARCH, V_GREP, ref=True)
    async with stdio_client(params, errlog=sys.stderr) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        await s.call_tool("write_file", {"path": "bench/warm.txt", "content": "warm\n"})  # first call: imports

        async def call(name: str, args: dict[str, Any]) -> float:
            t0 = time.perf_counter()
            result = await s.call_tool(name, args)
            elapsed = time.perf_counter() - t0
            assert not result.is_error, result.content
            return elapsed

        floor = _in_process(repo, run_id)
        n = 31 if repo.size < 100_000 else 21
        for i in ctx.rounds(n, budget=40):
            for variant in rotate(["write_file", V_FLOOR, V_LIB], i):
                settle()
                args = _write_args(i)
                if variant == V_FLOOR:
                    t0 = time.perf_counter()
                    floor.write_file(**args)
                    res.add(CASE, repo.size, G_WRITE, V_FLOOR, time.perf_counter() - t0)
                elif variant == V_LIB:
                    t0 = time.perf_counter()
                    with floor.run.tool_call("write_file", {"path": args["path"]}, idempotency="idempotent") as c:
                        c.write(args["path"], args["content"])
                    res.add(CASE, repo.size, G_WRITE, V_LIB, time.perf_counter() - t0)
                else:
                    res.add(CASE, repo.size, G_WRITE, "write_file", await call("write_file", _write_args(i)))
        for i in ctx.rounds(11 if repo.size < 100_000 else 9, budget=60):
            for variant in rotate([V_MCP, V_EXEC], i):
                settle()
                command = f"echo {variant[:4]}{i} > bench/cmd.txt"
                if variant == V_MCP:
                    value = await call("run_command", {"command": command})
                else:
                    argv = [SANDBOX, "-C", repo.path, "exec", run_id, "--", "sh", "-c", command]
                    value = run_proc(argv, env={"SANDBOX_HOOK_AUTOSTART": "0"}).seconds
                res.add(CASE, repo.size, G_CMD, str(variant), value)
        grep = ["git", "-C", floor.run.worktree, "grep", "-l", "-z", "-I", "--untracked", "-P", "-e", NOWHERE]
        for i in ctx.rounds(9, budget=60):
            for variant in rotate([V_SEARCH, V_GREP], i):
                settle()
                if variant == V_SEARCH:
                    value = await call("search", {"pattern": NOWHERE})
                else:
                    value = run_proc(grep, check=False).seconds
                res.add(CASE, repo.size, G_SEARCH, str(variant), value)


def _in_process(repo: Repo, run_id: str) -> Any:
    """A :class:`~sandbox.mcp.workspace.Workspace` on the same run in this process: what the protocol adds."""
    from sandbox.mcp.state import Settings
    from sandbox.mcp.workspace import Workspace
    from sandbox.store.project import Project

    project, workdir, _ = Project.discover(repo.path)
    ws = Workspace(project, workdir, Settings(data_root=project.data_root or ""))
    ws.open_run(run_id)
    return ws


def _write_args(i: int) -> dict[str, Any]:
    return {"path": f"bench/mcp/file{i % 7}.txt", "content": f"sample {i}\n" * 20}


def _serve(path: str, run_id: str, common_dir: str) -> bool:
    from sandbox.agent import wire

    run_proc([SANDBOX, "-C", path, "serve", run_id])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if wire.host_alive(common_dir):
            return True
        time.sleep(0.05)
    return False


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """write_file median <= 30 ms; run_command <= 1.5x sandbox exec (largest size)."""
    size = max(sizes)
    out = []
    write = results.find(CASE, size, G_WRITE, "write_file")
    name = f"MCP write_file call in a running server, at {size // 1000}k"
    if write is None or not write.stats.samples:
        out.append(Target(name, "<= 30 ms median", "-", None))
    else:
        out.append(Target(name, "<= 30 ms median", f"{write.stats.median * 1e3:.1f} ms", write.stats.median <= 0.030))
    mcp_row = results.find(CASE, size, G_CMD, V_MCP)
    exec_row = results.find(CASE, size, G_CMD, V_EXEC)
    name = f"MCP run_command vs sandbox exec (service up), at {size // 1000}k"
    if mcp_row is None or exec_row is None or not mcp_row.stats.samples or not exec_row.stats.samples:
        out.append(Target(name, "<= 1.5x", "-", None))
    else:
        ratio = mcp_row.stats.median / exec_row.stats.median
        out.append(Target(name, "<= 1.5x", f"{ratio:.2f}x", ratio <= 1.5))
    return out
