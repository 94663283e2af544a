"""The project's tooling around the library: the command line and what it runs.

Nothing in the library imports this package; it imports the library like any user would.

- :mod:`.cli`: ``python -m emulinalg {bench,demo,grade,info}``, options and dispatch.
- :mod:`.machine`: the CPU, numpy's BLAS and the backend numpy arrays take (``info``).
- :mod:`.demo`: ``demo``, emulated against native products on built-in inputs.
- ``bench``: :mod:`.bench_cli` (options, the command), :mod:`.bench` (the measuring loop),
  :mod:`.devices` (the array families), :mod:`.records` (reading records, tables),
  :mod:`.plots` (figures).
- ``grade``: :mod:`.catalogue` (the graded suite's cases), :mod:`.suite` (grading them).
"""
