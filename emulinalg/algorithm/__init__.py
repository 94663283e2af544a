"""The algorithm: Ozaki Schemes I and II in Array API code, one module per step.

Every function takes the array namespace ``xp`` first; these modules are the reference that
every backend's kernels reproduce bit for bit. The steps of a product, in order:

- ``operands``: the float64 real and imaginary parts the schemes take, and the non-finite entries.
- ``scaling``: power-of-two shifts of rows of A and columns of B, Scheme II's prescale (line
  bounds, the accurate mode's bound GEMM), the scaled integers.
- ``certificate``: the number of slices or moduli a precision level needs, per entry: the
  error forms (strict l1, native l2) and their constants, the lower bounds of |A||B|, the
  count per entry by bisection and the exact step; Scheme I's slice count.
- ``refinement``: the suspect refinement and the patch, which take further counts off.
- ``certificate_plan``: the certificate's terms, limits and steps as a backend's certificate
  kernels take them (from ``certificate`` and ``refinement``).
- ``slices``: Scheme I: INT8 slices, the products of equal significance, the shift-reduce.
- ``moduli``: Scheme II's moduli and exact CRT constants (the one source of the kernels'
  generated header ``src_cuda/ozaki2_tables.h``).
- ``residues``: the scaled integers modulo each modulus, in the symmetric range.
- ``products``: the modular products (one INT8 GEMM per modulus, 3M for complex) and the
  Scheme II product that chains scaling, residues, products and the CRT.
- ``crt``: the exact CRT accumulation and the reconstruction of the integer product.
- ``rounding``: exact integers in limbs and their one correctly rounded conversion to float.
- ``refit``: the most cancelled entries recomputed with the most moduli.
- ``bf16``: the BF16 slice schedules (BF16x3, BF16xN).
- ``xputil``: the few operations beyond the Array API standard.
"""
