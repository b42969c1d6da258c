"""The ``inert`` command line: ``main`` dispatches; each command lives in a module of its own.

``inspect``, ``verify`` and ``migrate`` (with ``convert``, the way in from ``torch.save`` files and
safetensors) each have ``add_parser`` and ``run``; ``support`` holds what they share (exit codes, the
one-line error, progress); ``urls`` reads checkpoints and dumps at fsspec URLs.
"""
