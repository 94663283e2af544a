"""``python -m emulinalg {bench,demo,grade,info}``: the command line lives in
:mod:`emulinalg.harness.cli` (also the ``emulinalg`` script)."""

import sys

from emulinalg.harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
