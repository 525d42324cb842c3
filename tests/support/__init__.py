"""The tests' helpers: throwaway servers, per-kind harnesses, checks, and the fixtures (``tests.support.fixtures``,
a plugin that tests/conftest.py registers)."""
