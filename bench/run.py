"""Run the benchmarks: ``python -m bench.run --sizes 1000,10000,100000 [--repeat N] [--only CASES]``.

Generates (or reuses) one repository per size, runs each case on it, prints the table and writes
bench/RESULTS.md (or ``--out``). See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import traceback

from bench import genrepo
from bench.cases import CASES, Context, drop_runs, load
from bench.results import Results, Target, machine, report

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def _isolate_git() -> None:
    # Neither the developer's git config nor their identity may change what is measured.
    home = tempfile.mkdtemp(prefix="bench-home-")
    with open(os.path.join(home, ".gitconfig"), "w", encoding="utf-8") as fh:
        fh.write("[init]\n\tdefaultBranch = main\n[safe]\n\tdirectory = *\n")
    os.environ.update(
        {
            "HOME": home,
            "XDG_CONFIG_HOME": os.path.join(home, ".config"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "Bench",
            "GIT_AUTHOR_EMAIL": "bench@example.com",
            "GIT_COMMITTER_NAME": "Bench",
            "GIT_COMMITTER_EMAIL": "bench@example.com",
            # The cases host the session service themselves where they measure it; a `sandbox exec`
            # or hook must not start one on its own and change what the next sample measures.
            "SANDBOX_HOOK_AUTOSTART": "0",
        }
    )
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "SANDBOX_FAULT"):
        os.environ.pop(key, None)


def _loadavg() -> str:
    with open("/proc/loadavg", encoding="utf-8") as fh:
        return " ".join(fh.read().split()[:3])


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    ap.add_argument("--sizes", default="1000,10000,100000", help="comma-separated repository sizes in files")
    ap.add_argument("--repeat", type=int, default=None, help="samples per variant (default: per case, by size)")
    ap.add_argument("--only", default=None, help=f"comma-separated cases to run (default all: {','.join(CASES)})")
    ap.add_argument("--fs", choices=("auto", "loop", "plain"), default="auto", help="where repositories live")
    ap.add_argument("--out", default=DEFAULT_OUT, help="where to write the Markdown report")
    ap.add_argument("--note", default="", help="a note on the load conditions, copied into the report")
    return ap.parse_args(argv)


def _byte_compile() -> None:
    """Byte-compile the package first, as ``pip install`` does for a user: with
    ``PYTHONDONTWRITEBYTECODE`` set (some shells and CI images do), every ``sandbox`` process would
    otherwise compile the modules changed since the last ``.pyc`` on each start, and the start-up
    figures would measure the compiler."""
    import compileall

    import sandbox

    compileall.compile_dir(os.path.dirname(sandbox.__file__), quiet=1)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    only = [c.strip() for c in args.only.split(",")] if args.only else list(CASES)
    unknown = [c for c in only if c not in CASES]
    if unknown:
        print(f"bench: unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}", file=sys.stderr)
        return 2
    _isolate_git()
    _byte_compile()

    def _terminate(signum: int, frame: object) -> None:
        # Unwind, so that services are stopped, runs dropped and the loop mount released.
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    results = Results()
    ctx = Context(results=results, sizes=sizes, repeat=args.repeat)
    modules = {name: load(name) for name in only}
    load_before = _loadavg()
    t_start = time.perf_counter()
    with genrepo.work_root(args.fs) as root:
        fs = genrepo.fs_type(root)
        print(f"bench: repositories under {root} ({fs}); sizes {sizes}; cases {only}", flush=True)
        for size in sizes:
            print(f"bench: {size} files", flush=True)
            repo = genrepo.ensure(root, size, log=print)
            for name, module in modules.items():
                t0 = time.perf_counter()
                try:
                    module.run(ctx, repo)  # type: ignore[attr-defined]
                except Exception as exc:  # noqa: BLE001 - one broken case must not lose the others
                    traceback.print_exc()
                    results.skip(name, size, f"failed: {type(exc).__name__}: {exc}")
                finally:
                    drop_runs(repo)
                print(f"  {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    elapsed = time.perf_counter() - t_start
    targets: list[Target] = []
    for module in modules.values():
        targets += module.targets(results, sizes)  # type: ignore[attr-defined]
    load_note = f"load average {load_before} before, {_loadavg()} after; whole run {elapsed / 60:.1f} min"
    if args.note:
        load_note += f"; {args.note}"
    text = report(results, targets, machine(fs, load_note), sys.argv[1:] if argv is None else argv)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    print(f"bench: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
