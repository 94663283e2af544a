"""``python -m emulinalg.backends.cuda > src_cuda/ozaki2_tables.h``: the kernels' constants,
written from the Python tables (:func:`emulinalg.backends.cuda.tables_header`)."""

import sys

from . import tables_header

sys.stdout.write(tables_header())
