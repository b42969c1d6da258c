"""The generator: reads the grammar and declared rules in ``inert.spec`` and writes every target from them.

One emitter per target: ``python`` (the codecs in ``inert.codecs``, with ``runs``, the fast path for
uniform arrays of records), ``c`` (the C99 readers under ``c/``) and ``docs`` (the specification pages
under ``docs/spec/``).  ``inert gen`` runs them all; ``inert gen --check`` fails when a committed file
differs from what they write.
"""
