"""Helpers that test modules in several folders of test/unit share (no tests here).

pytest puts test/unit on sys.path (`pythonpath` in pyproject.toml), so a test imports them as
`from helpers.tile_programs import run_both`: one unambiguous module per helper, never a
test module imported by another or a `from conftest import` (test/unit has no __init__.py, so
pytest imports test files and conftests by basename and such imports can pick the wrong one).
"""
