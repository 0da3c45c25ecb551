"""Fixtures shared by every test package: a real PostgreSQL server (tests/support/postgres.py)."""

pytest_plugins = ("tests.support.postgres",)
