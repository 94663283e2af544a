"""The project's tooling around the library: the command line and what it runs.

Nothing in the library imports this package; it imports the library like any user would.

- :mod:`.cli`: ``python -m emulinalg {bench,demo,grade,info}``, options and dispatch.
- :mod:`.machine`: the CPU, numpy's BLAS and the backend numpy arrays take (``info``).
- :mod:`.demo`: ``demo``, emulated against native products on built-in inputs.
- :mod:`.bench`: ``bench``, the measuring loop; :mod:`.plots`, its figures.
- :mod:`.suite`: ``grade``, the graded accuracy suite.
"""
