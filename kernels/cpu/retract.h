// retract.h — polar retraction of TSCT factors onto the orthonormal manifold (SPEC §1).
// X [rows, r] (rows >= r): X <- X * sqrt(r)/||X||_F, then `iters` Newton–Schulz iterations
//   X <- a X + b X (X^T X) + c X (X^T X)^2,  (a, b, c) = (1.875, -1.25, 0.375),
// where before the first iteration X (and its Gram matrix A) are scaled by
// sqrt(retract_gersh_scale(A)) (and by it): sigma_max <= 1.5, inside the iteration's basin.
// `scratch` holds retract_scratch_size(rows, r) reals.
#pragma once
#include "../real.h"

size_t retract_scratch_size(int rows, int r);
void retract(real *X, int rows, int r, int iters, real *scratch);
// min(1, 2.25 / g), g = max_i sum_j |A_ij| (in double, j in order) >= the largest eigenvalue of
// the Gram matrix A [r, r]: the factor that puts sigma_max^2 at or below 2.25. Every backend's
// retraction uses this value.
double retract_gersh_scale(const real *A, int r);
// Largest per-entry orthogonality error: ||X^T X - I||_F / r.
double orth_error(const real *X, int rows, int r);
