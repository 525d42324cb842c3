"""Soaks: long runs that are no part of `make test` (tests/conftest.py collects this folder only when it is named,
as `make soak` names it)."""
