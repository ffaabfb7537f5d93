"""Helpers the tests share: each module holds one thing, named by what it holds.

Tests import helpers from here, never from another test module
(``tests/unit/test_suite_layout.py`` checks it).
"""
