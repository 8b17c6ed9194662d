"""``sandbox ui``: a local page for reviewing runs, calls, diffs, best-of-N and approvals.

:mod:`sandbox.ui.server` is the web application (starlette, served by uvicorn on 127.0.0.1 by the
CLI), :mod:`sandbox.ui.pages` renders its pages on the server, :mod:`sandbox.ui.timeline` a run's
calls with what the confinement refused, :mod:`sandbox.ui.diffs` its diffs and selections, and
``static/`` holds its own small stylesheet and script and, in ``static/vendor/``, highlight.js with
its licence (no build step, nothing from a CDN: it works offline). Every action calls the
same library function the CLI calls, so a refusal reads as the CLI's and the ledger records it the
same way.
"""
