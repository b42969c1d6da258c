"""Thin adapters that let an implementation answer the conformance runner.

Each speaks the protocol of :mod:`inert.conformance._protocol` on its standard
input and output and holds no vector or expectation of its own.  Run one as
``python -m inert.conformance.testees.<name>``; ``c/shm_reader.c`` is the
independent reader in C.
"""
