"""What the tests share: builders, servers and the `frt` runner (tests/README.md lists them).

Tests import them as ``helpers.<module>``: ``tests/conftest.py`` puts ``tests/`` on ``sys.path``.
"""
