"""End-to-end tests with the real agent binaries (a package, so its conftest does not shadow tests/conftest.py)."""
