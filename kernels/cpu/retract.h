// retract.h — polar retraction of TSCT factors onto the orthonormal manifold (SPEC §1).
// X [rows, r] (rows >= r): X <- X * sqrt(r)/||X||_F, then `iters` Newton–Schulz iterations
//   X <- a X + b X (X^T X) + c X (X^T X)^2,  (a, b, c) = (1.875, -1.25, 0.375).
// `scratch` holds retract_scratch_size(rows, r) reals.
#pragma once
#include "../real.h"

size_t retract_scratch_size(int rows, int r);
void retract(real *X, int rows, int r, int iters, real *scratch);
// Largest per-entry orthogonality error: ||X^T X - I||_F / r.
double orth_error(const real *X, int rows, int r);
