"""The tools behind ``inert inspect``, ``inert verify`` and ``inert migrate``.

Each command lives in its own module with ``add_parser`` (its arguments and
``--help``) and ``run`` (returns the exit code); ``inert._cli`` only
dispatches.  Exit codes: 0 success; 1 the input is invalid (a file that does
not decode, a failed verification, a legacy checkpoint the allowlist refuses);
2 a usage or I/O error.  Errors are one line: ``inert: <command>: <reason>``.
"""
