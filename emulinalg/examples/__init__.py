"""Real workloads written the way library code uses emulinalg: ``xp = emulinalg.namespace(x)``.

- :mod:`emulinalg.examples.scf`: density-fitted restricted Hartree–Fock; every Coulomb,
  exchange, Fock and density product goes through ``xp.tensordot`` / ``xp.matmul`` /
  ``xp.vecdot``, so it runs on numpy or cupy arrays alike.
- :mod:`emulinalg.examples.molecules`: built-in molecules and their integrals from PySCF
  (``pip install ".[scf]"``).
- :mod:`emulinalg.examples.scf_demo`: ``python -m emulinalg demo scf``, energies per precision.

Importing this package imports neither PySCF nor an array library.
"""
