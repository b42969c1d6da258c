"""The conformance suite of Inert's formats (installed as ``inert.conformance``).

``corpus/`` holds the vectors as data, ``_runner`` judges a testee's answers,
``_protocol`` is how they talk (described for implementers in ``PROTOCOL.md``),
``testees/`` holds Inert's own testees.  Run it as ``inert conformance run
--testee CMD``.
"""
