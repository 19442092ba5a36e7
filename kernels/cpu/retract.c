// retract.c — polar retraction of a TSCT factor onto the orthonormal manifold (retract.h).
//
// Newton–Schulz on the Gram matrix: with A = X^T X (r x r),
//   a X + b X A + c X A^2 = X (a I + b A + c A^2),
// so each iteration is two small r x r products and one [rows, r] x [r, r] product, never a
// rows x rows matrix. Each singular value maps sigma -> sigma (a + b sigma^2 + c sigma^4), whose
// fixed point at 1 is attractive (derivative 0 there: a + 3b + 5c = 0), so an orthonormal frame
// is left where it is and a nearby one converges fast. The map is monotone
// (p'(sigma) = 1.875 (sigma^2 - 1)^2 >= 0) and its other positive fixed point is sqrt(7/3), so
// every sigma in (0, 1.53) converges to 1. The pre-scaling to ||X||_F = sqrt(r) puts the
// singular values' RMS at 1, inside that basin for any near-orthonormal frame. A frame far from
// orthonormal (one large update) can still have sigma_max above 1.53 after it, and then the
// iteration diverges to inf / NaN in a few steps; so the first Gram matrix also bounds sigma_max^2
// by Gershgorin (max row sum of |A|, in double) and, when that bound exceeds NS_G2 = 1.5^2, X and A
// are scaled by it (sigma_max <= 1.5: inside the basin; small sigmas then take longer to reach 1,
// which orth_err shows). A near-orthonormal frame has a bound near 1 and is never rescaled.
#include <math.h>
#include <string.h>

#include "blas.h"
#include "retract.h"

static const real NS_A = (real)1.875, NS_B = (real)-1.25, NS_C = (real)0.375;
#define NS_G2 2.25  // the largest sigma^2 the iteration starts from (sigma 1.5 < 1.53)

double retract_gersh_scale(const real *A, int r) {
    double g = 0;
    for (int i = 0; i < r; i++) {
        double s = 0;
        for (int j = 0; j < r; j++) s += fabs((double)A[(size_t)i * r + j]);
        if (s > g) g = s;
    }
    return g > NS_G2 ? NS_G2 / g : 1.0;  // (a NaN frame: 1, nothing to rescue)
}

// Layout: A [r, r] Gram matrix, M [r, r] polynomial, Y [rows, r] the next iterate.
size_t retract_scratch_size(int rows, int r) {
    return 2 * (size_t)r * r + (size_t)rows * r;
}

void retract(real *X, int rows, int r, int iters, real *scratch) {
    const size_t n = (size_t)rows * r;
    real *A = scratch;                    // [r, r]
    real *M = A + (size_t)r * r;          // [r, r]
    real *Y = M + (size_t)r * r;          // [rows, r]

    // scale to ||X||_F = sqrt(r); the norm in double so a large X does not lose digits
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)X[i] * X[i];
    if (ss == 0) return;  // no direction to retract to; leave it (the caller's init is broken)
    real scale = (real)(sqrt((double)r / ss));
    for (size_t i = 0; i < n; i++) X[i] *= scale;

    for (int it = 0; it < iters; it++) {
        gemm_rm(1, 0, r, r, rows, 1, X, r, X, r, 0, A, r);    // A = X^T X
        if (it == 0) {  // sigma_max <= 1.5 (see the top)
            double sc = retract_gersh_scale(A, r);
            if (sc != 1.0) {
                real sa = (real)sc, sx = (real)sqrt(sc);
                for (size_t i = 0; i < (size_t)r * r; i++) A[i] *= sa;
                for (size_t i = 0; i < n; i++) X[i] *= sx;
            }
        }
        gemm_rm(0, 0, r, r, r, NS_C, A, r, A, r, 0, M, r);    // M = c A^2
        for (size_t i = 0; i < (size_t)r * r; i++) M[i] += NS_B * A[i];
        for (int i = 0; i < r; i++) M[(size_t)i * r + i] += NS_A;  // M = aI + bA + cA^2
        gemm_rm(0, 0, rows, r, r, 1, X, r, M, r, 0, Y, r);    // Y = X M
        memcpy(X, Y, sizeof(real) * n);
    }
}

double orth_error(const real *X, int rows, int r) {
    // ||X^T X - I||_F / r with every dot product in double: this is a monitor, and float
    // accumulation over `rows` terms would put a ~1e-6 floor under a number we compare to 1e-4.
    // The Gram matrix is built a band of OB columns at a time, walking X by rows (contiguous)
    // into a small double accumulator on the stack; only its upper triangle (j >= i).
    enum { OB = 8 };
    double acc[OB][256];  // [OB, <= 256] one band of X^T X; wider r is done in column chunks
    double err = 0;
    for (int i0 = 0; i0 < r; i0 += OB) {
        int ib = r - i0 < OB ? r - i0 : OB;
        for (int j0 = i0; j0 < r; j0 += 256) {
            int jb = r - j0 < 256 ? r - j0 : 256;
            for (int ii = 0; ii < ib; ii++)
                for (int jj = 0; jj < jb; jj++) acc[ii][jj] = 0;
            for (int q = 0; q < rows; q++) {
                const real *xq = X + (size_t)q * r;  // [r] one row
                for (int ii = 0; ii < ib; ii++) {
                    double xi = xq[i0 + ii];
                    double *ai = acc[ii];
                    for (int jj = 0; jj < jb; jj++) ai[jj] += xi * (double)xq[j0 + jj];
                }
            }
            for (int ii = 0; ii < ib; ii++)
                for (int jj = 0; jj < jb; jj++) {
                    int i = i0 + ii, j = j0 + jj;
                    if (j < i) continue;  // lower triangle: mirrored by the 2x below
                    double dev = acc[ii][jj] - (i == j ? 1.0 : 0.0);
                    err += (i == j ? 1.0 : 2.0) * dev * dev;  // off-diagonals appear twice
                }
        }
    }
    return sqrt(err) / r;
}
