"""``python -m sandbox`` runs the CLI."""

from sandbox.cli import main

main()
