# Quick start: `make demo` then `make test`. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test

SHELL := /bin/bash
# One target at a time, whatever -j says: the targets install into one venv and run apt-get (one at a time).
.NOTPARALLEL:
.PHONY: venv deps lock test-latest demo test lint typecheck bench bench-big bench-claude bench-many bench-ui screenshots soak clean agents bwrap chromium git-lfs

# The test environment comes from requirements.lock (every package pinned, with hashes), so the suite
# gives the same result on any day; the project itself goes in editable, built with the lock's setuptools.
# `make test-latest` runs the suite on the newest versions pyproject.toml's ranges allow instead.
$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "make: the test environment needs Python >= 3.11 (its lint tools do; the library runs on 3.10): set PYTHON=python3.11 or newer." >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps --no-compile -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
# Byte-compiled once here: with PYTHONDONTWRITEBYTECODE set (as on CI machines) or from inside a sandbox
# (the source tree is read-only there), every process would otherwise compile what it imports (~0.1 s CPU).
# The dependencies too, on every core at once (pip compiles them one file after another).
	$(BIN)/python -m compileall -q -j 0 sandbox hooks "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null
	$(BIN)/python -m pip check --disable-pip-version-check >/dev/null || { $(BIN)/python -m pip check; echo "make: requirements.lock does not satisfy pyproject.toml's dependencies; run 'make lock'." >&2; exit 1; }
	@touch $(STAMP)

venv: $(STAMP)

# requirements.lock anew from pyproject.toml (after a dependency changed): uv's resolver, run from a
# throwaway venv, for every platform (markers) and Python >= 3.11, with the hashes pip checks.
lock:
	@rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock && .venv-lock/bin/python -m pip install --quiet uv
	@printf 'setuptools>=68\nwheel\n' > .venv-lock/build.in
	@head -4 requirements.lock > .venv-lock/header
	.venv-lock/bin/uv pip compile pyproject.toml .venv-lock/build.in --extra test --universal --generate-hashes --python-version 3.11 --no-header --quiet -o .venv-lock/out
	@sed 's#.venv-lock/build.in#build requirements (setuptools>=68, wheel)#' .venv-lock/out | cat .venv-lock/header - > requirements.lock
	@rm -rf .venv-lock
	@echo "make: requirements.lock rewritten; run 'make test' on it before committing."

# The suite on the newest versions pyproject.toml's ranges allow (a venv of its own, .venv-latest):
# what a user who runs `pip install .` today gets. Run it before a release, and whenever `make lock`
# is due; CI runs `make test` on the lock.
VENV_LATEST := .venv-latest
# Which packages of the venv differ from requirements.lock (those both name): what test-latest tries beyond it.
define LOCK_DIFF
import re, importlib.metadata as md
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", open("requirements.lock").read(), re.M))
pins = {norm(k): v for k, v in pins.items()}
have = {norm(d.metadata["Name"]): d.version for d in md.distributions()}
newer = sorted(f"{n} {pins[n]} -> {v}" for n, v in have.items() if n in pins and v != pins[n] and n not in ("pip", "setuptools", "wheel"))
print("make: beyond the lock: " + ", ".join(newer) if newer else "make: the newest allowed versions are the lock's")
endef
export LOCK_DIFF
# The real agent binaries (pinned in tests/agents/package-lock.json) for the end-to-end tests.
# npm may skip Claude Code's postinstall (it copies the native binary in); install.cjs does it by hand.
# Codex's native binary is the platform's optional dependency (@openai/codex-linux-x64...): never omitted.
AGENTS := tests/agents
AGENTS_STAMP := $(AGENTS)/node_modules/.installed
$(AGENTS_STAMP): $(AGENTS)/package.json $(AGENTS)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing Node.js and npm (apt-get install -y nodejs npm)"; \
	    apt-get install -y -qq nodejs npm >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq nodejs npm >/dev/null; }; \
	  else \
	    echo "make agents: npm (Node.js >= 20) is needed for the real-agent tests; install it (Debian/Ubuntu: sudo apt-get install nodejs npm)." >&2; exit 1; \
	  fi; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' || { echo "make agents: the real agents need Node.js >= 20 (this is $$(node --version)); install a newer one (Debian: bookworm-backports or NodeSource's nodejs)." >&2; exit 1; }
	cd $(AGENTS) && npm ci --include=optional --no-audit --no-fund --loglevel=error
	@$(AGENTS)/node_modules/.bin/claude --version >/dev/null 2>&1 || node $(AGENTS)/node_modules/@anthropic-ai/claude-code/install.cjs >/dev/null
	@$(AGENTS)/node_modules/.bin/claude --version && $(AGENTS)/node_modules/.bin/gemini --version && $(AGENTS)/node_modules/.bin/codex --version
	@touch $@

agents: $(AGENTS_STAMP)

# After AGENTS_STAMP: make expands a rule's prerequisites when it reads the rule.
test-latest: $(AGENTS_STAMP) bwrap git-lfs chromium
	@test -x $(VENV_LATEST)/bin/python || $(PYTHON) -m venv $(VENV_LATEST)
	$(VENV_LATEST)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade --upgrade-strategy eager -e '.[test]' setuptools wheel
	@$(VENV_LATEST)/bin/python -c "$$LOCK_DIFF"
	$(PYTEST_ENV) $(VENV_LATEST)/bin/python -m pytest -q -rs -n $(TEST_WORKERS) --dist loadgroup --durations=15

# OS confinement (sandbox run / sandbox exec) uses bubblewrap: installed here when root on Debian,
# else a message says how (README: "Confinement").
bwrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing bubblewrap (apt-get install -y bubblewrap)"; \
	    apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null; }; \
	  else \
	    echo "make: bubblewrap (bwrap) is missing; install it (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap; Arch: sudo pacman -S bubblewrap), or the confinement tests cannot run." >&2; exit 1; \
	  fi; }
	@bwrap --ro-bind / / true || { echo "make: bubblewrap is installed but cannot create a sandbox here (user namespaces disabled?); see README, Confinement." >&2; exit 1; }

# sandbox ui's browser test drives Debian's chromium through Playwright (executable_path: Playwright's own
# browser download is never used). Installed here when root on Debian, else a message says how.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing chromium (apt-get install -y chromium)"; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; }; \
	  else \
	    echo "make: chromium is missing; install it (Debian/Ubuntu: sudo apt-get install chromium), or the browser test of 'sandbox ui' cannot run." >&2; exit 1; \
	  fi; }

# The tests of large files checked in through Git LFS need git-lfs: installed here like bubblewrap.
git-lfs:
	@command -v git-lfs >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing git-lfs (apt-get install -y git-lfs)"; \
	    apt-get install -y -qq git-lfs >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq git-lfs >/dev/null; }; \
	  else \
	    echo "make: git-lfs is missing; install it (Debian/Ubuntu: sudo apt-get install git-lfs; Fedora: sudo dnf install git-lfs; Arch: sudo pacman -S git-lfs), or the Git LFS tests cannot run." >&2; exit 1; \
	  fi; }

demo: $(STAMP)
	$(BIN)/sandbox demo

lint: $(STAMP)
	$(BIN)/ruff check sandbox tests bench hooks
	$(BIN)/ruff format --check sandbox tests bench hooks
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python .ci/budgets.py sandbox

# The suite on TEST_WORKERS processes (pytest-xdist; most tests wait on git and on real processes, so
# more workers than the 2 cores still pay). Modules whose tests need one another run on one worker,
# in file order (ONE_WORKER in tests/conftest.py, used with --dist loadgroup). The slowest tests are
# listed at the end, and every skip with its reason (-rs: the real-agent tests never skip): the run must
# stay under ~10 min (CI runs this target).
# Measured on 2 cores, the whole suite: 3 workers 574 s, 4 workers 547 s, 6 workers 549 s (the cores are
# the limit from 4 on).
TEST_WORKERS ?= 4
# Bytecode is cached for the suite even where PYTHONDONTWRITEBYTECODE is set (as on CI machines): each worker
# compiled and assertion-rewrote every test module (collection 7.3 s of CPU against 1.8 s cached), and every
# helper the tests start as a process (model servers, fake agents) compiled its modules anew. A fresh clone's
# suite: 563 s against 581-587 s. The caches go in __pycache__ (ignored by git).
PYTEST_ENV = env -u PYTHONDONTWRITEBYTECODE
# The venv and the agents' npm install are made side by side (a fresh clone: 20 s against 31 s one after
# the other); neither installs system packages, so no two apt runs meet. Two sub-makes in the shell, not
# `make -j`: this Makefile is .NOTPARALLEL (below), so a `make -j test` never runs two pip or two apt at once.
deps:
	@$(MAKE) --no-print-directory $(STAMP) & venv=$$!; \
	  $(MAKE) --no-print-directory $(AGENTS_STAMP); agents=$$?; \
	  wait $$venv && exit $$agents
test: deps lint bwrap git-lfs chromium
	$(PYTEST_ENV) $(BIN)/python -m pytest -q -rs -n $(TEST_WORKERS) --dist loadgroup --durations=15

# The long reliability runs, and the property tests at their full hypothesis counts (a third in `make test`:
# examples() in tests/conftest.py).
soak: $(STAMP)
	$(BIN)/python -m pytest -q --soak --timeout 7200 tests/reliability tests/fast tests/merge tests/store

bench: $(STAMP)
	$(BIN)/python -m bench.run --sizes 1000,10000,100000

bench-big: $(STAMP)
	$(BIN)/python -m bench.run --sizes 1000,10000,100000,300000

# Hook latency as the real Claude Code reports it in its debug log (issue #9 target: median <= 120 ms,
# p90 <= 200 ms with the run's service up).
bench-claude: $(STAMP) $(AGENTS_STAMP)
	$(BIN)/python -m bench.claude_latency --calls 40 --files 10000

# One host for a hundred runs (issue 13): memory <= 300 MiB, inotify instances <= 2, hook median <= 150 ms.
bench-many: $(STAMP)
	$(BIN)/python -m bench.many_runs --runs 100 --files 10000 --rounds 2 --parallel 2

# sandbox ui: a run of 500 calls in headless chromium (DOMContentLoaded; issue #23 target: within 1 s).
bench-ui: $(STAMP) chromium
	$(BIN)/python -m bench.ui_page --calls 500 --repeat 7

# The screenshots of sandbox ui in docs/ (the README shows them): its pages, and the review workflow.
screenshots: $(STAMP) chromium
	$(BIN)/python -m bench.ui_page --calls 40 --repeat 1 --screenshots docs
	$(BIN)/python -m bench.ui_review --screenshots docs

clean:
	rm -rf $(VENV) $(VENV_LATEST) build *.egg-info $(AGENTS)/node_modules
