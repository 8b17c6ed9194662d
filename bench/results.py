"""Collected measurements, the targets they are judged against, and the Markdown report."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.timing import Stats


@dataclass
class Row:
    """One measured variant of one case at one repository size."""

    case: str
    size: int | None
    group: str
    variant: str
    stats: Stats = field(default_factory=Stats)
    unit: str = "s"
    ref: bool = False
    rss_kb: list[int] = field(default_factory=list)
    note: str = ""


@dataclass
class Target:
    """A goal from the issues, judged on the measured rows."""

    name: str
    goal: str
    measured: str
    met: bool | None  # None: not measured (a case was skipped or not run)


class Results:
    """All rows of one benchmark run, in the order they were first measured."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.skipped: list[tuple[str, int | None, str]] = []
        self.notes: list[str] = []

    def row(self, case: str, size: int | None, group: str, variant: str, *, unit: str = "s", ref: bool = False) -> Row:
        """The row for this (case, size, group, variant), created on first use."""
        for r in self.rows:
            if (r.case, r.size, r.group, r.variant) == (case, size, group, variant):
                return r
        r = Row(case, size, group, variant, unit=unit, ref=ref)
        self.rows.append(r)
        return r

    def add(self, case: str, size: int | None, group: str, variant: str, value: float, **kw: object) -> Row:
        """Add one sample (and optionally ``rss_kb=``) to a row."""
        rss = kw.pop("rss_kb", None)
        r = self.row(case, size, group, variant, **kw)  # type: ignore[arg-type]
        r.stats.samples.append(value)
        if isinstance(rss, int):
            r.rss_kb.append(rss)
        return r

    def skip(self, case: str, size: int | None, why: str) -> None:
        """Record that a case could not run, and why."""
        self.skipped.append((case, size, why))

    def find(self, case: str, size: int | None, group: str, variant_prefix: str) -> Row | None:
        """The first row whose variant starts with ``variant_prefix`` (None when not measured)."""
        for r in self.rows:
            key = (r.case, r.size, r.group)
            if key == (case, size, group) and r.variant.startswith(variant_prefix) and r.stats.samples:
                return r
        return None

    def ref_of(self, row: Row) -> Row | None:
        """The reference row a row is compared with (same case, size and group)."""
        for r in self.rows:
            if r.ref and (r.case, r.size, r.group) == (row.case, row.size, row.group) and r.stats.samples:
                return r
        return None


# -- formatting -------------------------------------------------------------------------------------


def fmt_value(value: float, unit: str) -> str:
    """A value in a readable unit."""
    if unit == "s":
        if value < 0:  # a paired difference
            return "-" + fmt_value(-value, unit)
        if value < 1e-3:
            return f"{value * 1e6:.0f} µs"
        if value < 1:
            return f"{value * 1e3:.1f} ms"
        return f"{value:.2f} s"
    if unit == "MB":
        return f"{value:.0f} MB"
    return f"{value:.0f} {unit}"


def fmt_size(size: int | None) -> str:
    """1000 -> 1k."""
    if size is None:
        return "-"
    if size % 1000 == 0:
        return f"{size // 1000}k"
    return str(size)


def _ratio(row: Row, ref: Row | None) -> str:
    if ref is None or ref is row or not ref.stats.samples or ref.stats.median == 0:
        return "ref" if row.ref else ""
    return f"{row.stats.median / ref.stats.median:.2f}x"


def table(results: Results) -> str:
    """The table of every row: median, min/max, n, ratio to the group's reference row."""
    lines = [
        "| case | files | group | variant | median | min | max | n | ratio vs ref | max RSS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.rows:
        if not r.stats.samples:
            continue
        s = r.stats
        rss = f"{max(r.rss_kb) / 1024:.0f} MB" if r.rss_kb else ""
        lines.append(
            f"| {r.case} | {fmt_size(r.size)} | {r.group} | {r.variant}{' (ref)' if r.ref else ''} | "
            f"{fmt_value(s.median, r.unit)} | {fmt_value(s.min, r.unit)} | {fmt_value(s.max, r.unit)} | "
            f"{s.n} | {_ratio(r, results.ref_of(r))} | {rss} |"
        )
    return "\n".join(lines)


def targets_table(targets: list[Target]) -> str:
    """The targets, each with what was measured and whether it was met."""
    lines = ["| target | goal | measured | met |", "|---|---|---|---|"]
    for t in targets:
        verdict = "not measured" if t.met is None else ("**met**" if t.met else "**MISSED**")
        lines.append(f"| {t.name} | {t.goal} | {t.measured} | {verdict} |")
    return "\n".join(lines)


def _cmd(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "?"


def machine(fs: str, load_note: str) -> list[str]:
    """Lines describing where and when the run happened."""
    import pygit2
    import watchdog.version

    mem_kb = 0
    with open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            model = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    return [
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {os.cpu_count()} CPUs ({model or platform.processor() or '?'}), "
        f"{mem_kb / 1024 / 1024:.1f} GiB RAM, kernel {platform.release()}",
        f"- software: {_cmd(['git', '--version'])}, pygit2 {getattr(pygit2, '__version__', '?')} "
        f"(libgit2 {pygit2.LIBGIT2_VERSION}), watchdog {watchdog.version.VERSION_STRING}, "
        f"Python {sys.version.split()[0]}",
        f"- file system of the repositories: {fs}",
        f"- load: {load_note}",
    ]


def report(
    results: Results, targets: list[Target], header: list[str], argv: list[str], extra: list[str] | None = None
) -> str:
    """The whole Markdown report."""
    parts = [
        "# Benchmark results",
        "",
        "Produced by `" + " ".join(["python -m bench.run", *argv]) + "` (see bench/README.md for what each case does).",
        "",
        *header,
        "",
        "## Targets",
        "",
        targets_table(targets),
        "",
        "## All measurements",
        "",
        "Medians of n samples; ratio = median / median of the group's reference row (marked ref). "
        "Max RSS is the largest resident set of the process or any child it waited for (whole-process "
        "rows only).",
        "",
        table(results),
    ]
    if results.skipped:
        parts += ["", "## Not measured", ""]
        parts += [f"- {case} ({fmt_size(size)}): {why}" for case, size, why in results.skipped]
    if results.notes or extra:
        parts += ["", "## Notes", ""]
        parts += [f"- {n}" for n in results.notes + (extra or [])]
    return "\n".join(parts) + "\n"


TargetFn = Callable[[Results, list[int]], list[Target]]
