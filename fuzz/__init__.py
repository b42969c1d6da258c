"""Inert's fuzzers: the formats they cover (``fuzz.registry``), the harness, the targets and ``fuzz/run``.

Importable as ``fuzz`` when the repository root is on ``sys.path`` (the
property tests and the targets put it at the end, so the standard library wins).
"""
