// ngram.c — the anchors (SPEC §5): two byte models fit on the training split and scored on the
// eval window, the lines a trained model has to beat.
//
// * Unigram with add-one (Laplace) smoothing over the 256 byte values:
//   p(w) = (c(w) + 1) / (n + 256), so a byte never seen in training still costs a finite amount.
// * Interpolated Kneser–Ney 5-gram, standard KN (Chen & Goodman 1998, §2.7/§3): one discount
//   per order, estimated from that order's count-of-counts, D = n1 / (n1 + 2 n2) (0.75 if
//   n1 = 0). The 5-gram level uses raw counts; orders 1..4 use continuation counts
//   N1+(. ctx w), the number of distinct bytes seen before `ctx w`. Each level interpolates
//   with the one below:
//     P_k(w|h) = max(c(h w) - D, 0) / c(h) + D N1+(h .) / c(h) * P_{k-1}(w|h'),
//   down to a uniform 1/256 base; a context never seen in training passes the lower level
//   through unchanged. Every level sums to 1 over the 256 bytes (tested).
//   Why standard and not modified KN (three discounts D1, D2, D3+): the project's reference
//   anchor (tinyshakespeare, T=128, 871 x 128 window: unigram 4.83, KN5 2.31) is reproduced by
//   standard KN (4.829 / 2.309); modified KN gives 2.286 there. An anchor is only useful if it
//   is the same line everywhere.
//   Build with -DKN_MODIFIED for the modified variant; the tables already hold N1, N2, N3+.
//   Start of an eval sequence: with h shorter than 4 bytes the top level is order |h|+1, which
//   is the (continuation-count) lower-order distribution, exactly as the recursion defines it.
// Storage: one open-addressing hash table per order for the n-grams (key = the bytes packed
// into a uint64) and one per order for the contexts (total, N1, N2, N3+). Memory is
// proportional to the distinct n-grams; hashing is splitmix64 of the key, so tables (and
// therefore every floating-point sum) are the same on every run and machine.
#include "ngram.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "rng.h"

#define KN_ORDER 5
#define KEY_MARK (1ULL << 63)  // keys are never 0, so 0 marks an empty slot

typedef struct {
    uint64_t *keys;
    uint32_t *vals;  // nv per slot
    int nv;
    size_t cap, n;   // cap is a power of two
} HT;

static void ht_init(HT *h, int nv, size_t cap) {
    h->nv = nv;
    h->cap = cap;
    h->n = 0;
    h->keys = callocCheck(cap * sizeof *h->keys);
    h->vals = callocCheck(cap * (size_t)nv * sizeof *h->vals);
}

static void ht_free(HT *h) {
    free(h->keys);
    free(h->vals);
    memset(h, 0, sizeof *h);
}

static inline size_t ht_hash(const HT *h, uint64_t key) { return (size_t)(splitmix64(key) & (h->cap - 1)); }

// slot of key, or (size_t)-1
static inline size_t ht_find(const HT *h, uint64_t key) {
    size_t i = ht_hash(h, key);
    for (;;) {
        uint64_t k = h->keys[i];
        if (k == key) return i;
        if (k == 0) return (size_t)-1;
        i = (i + 1) & (h->cap - 1);
    }
}

static void ht_grow(HT *h) {
    HT g;
    ht_init(&g, h->nv, h->cap * 2);
    for (size_t i = 0; i < h->cap; i++) {
        uint64_t k = h->keys[i];
        if (!k) continue;
        size_t j = ht_hash(&g, k);
        while (g.keys[j]) j = (j + 1) & (g.cap - 1);
        g.keys[j] = k;
        memcpy(g.vals + j * (size_t)g.nv, h->vals + i * (size_t)h->nv, (size_t)h->nv * sizeof *h->vals);
    }
    g.n = h->n;
    ht_free(h);
    *h = g;
}

// slot of key, inserted (values zero) if absent; load factor kept <= 1/2 so probes stay short
static inline size_t ht_upsert(HT *h, uint64_t key) {
    if (2 * (h->n + 1) > h->cap) ht_grow(h);
    size_t i = ht_hash(h, key);
    for (;;) {
        uint64_t k = h->keys[i];
        if (k == key) return i;
        if (k == 0) {
            h->keys[i] = key;
            h->n++;
            return i;
        }
        i = (i + 1) & (h->cap - 1);
    }
}

// ----------------------------------------------------------------------------------------------
// the model

enum { CX_TOTAL, CX_N1, CX_N2, CX_N3 };

typedef struct {
    HT ng[KN_ORDER + 1];  // ng[k]: k-grams -> count (raw for k = 5, continuation below)
    HT cx[KN_ORDER + 1];  // cx[k]: (k-1)-byte contexts -> total, N1, N2, N3+ of ng[k]
    double D[KN_ORDER + 1][4];  // D[k][1..3]: discounts of counts 1, 2, 3+
} KN;

static inline uint64_t mask_bytes(int m) { return m >= 8 ? ~0ULL : ((1ULL << (8 * m)) - 1); }

// Discounts from the count-of-counts n[1..4] of one order (D[r] applies to counts r, 3 = 3+).
static void kn_discounts(const uint64_t n[5], double D[4]) {
    D[0] = 0;
    // Ney / Chen–Goodman estimate for standard KN. n1 = 0 (tiny or degenerate data) would give
    // D = 0: no mass for unseen bytes, an infinite loss. Fall back to the classic 0.75 there.
    double Y = n[1] > 0 ? (double)n[1] / ((double)n[1] + 2.0 * (double)n[2]) : 0.75;
    D[1] = D[2] = D[3] = Y;
#ifdef KN_MODIFIED
    if (n[1] > 0 && n[2] > 0 && n[3] > 0 && n[4] > 0) {
        D[1] = 1 - 2 * Y * (double)n[2] / (double)n[1];
        D[2] = 2 - 3 * Y * (double)n[3] / (double)n[2];
        D[3] = 3 - 4 * Y * (double)n[4] / (double)n[3];
    }
#endif
    // a discount outside (0, r] would give a negative probability, break normalisation, or
    // leave nothing for the lower orders
    for (int r = 1; r <= 3; r++) D[r] = fmin(fmax(D[r], 1e-3), (double)r);
}

static void kn_fit(KN *m, const uint8_t *x, int64_t n) {
    memset(m, 0, sizeof *m);
    // Tables start small and double at load 1/2: memory follows the distinct n-grams (a
    // fraction of the positions on text), not the size of the fit set.
    for (int k = 1; k <= KN_ORDER; k++) {
        ht_init(&m->ng[k], 1, 1024);
        ht_init(&m->cx[k], 4, 1024);
    }
    // raw 5-gram counts, keyed by a rolling 40-bit window
    uint64_t key = 0, m5 = mask_bytes(KN_ORDER);
    for (int64_t i = 0; i < n; i++) {
        key = ((key << 8) | x[i]) & m5;
        if (i < KN_ORDER - 1) continue;
        size_t s = ht_upsert(&m->ng[KN_ORDER], key | KEY_MARK);
        m->ng[KN_ORDER].vals[s]++;
    }
    // continuation counts: each distinct (k+1)-gram "v g" adds one to the k-gram g (its suffix).
    // The distinct (k+1)-grams are the keys of ng[k+1] (every (k+1)-gram a byte precedes: the
    // suffixes of the (k+2)-grams) and the one at the very start of the text, which no byte
    // precedes: counted when it occurs nowhere else (it was missed, so a context found only in
    // the first bytes of the fit set had no continuation: QA, session 24).
    for (int k = KN_ORDER - 1; k >= 1; k--) {
        HT *up = &m->ng[k + 1], *lo = &m->ng[k];
        uint64_t mk = mask_bytes(k);
        for (size_t i = 0; i < up->cap; i++) {
            if (!up->keys[i]) continue;
            size_t s = ht_upsert(lo, (up->keys[i] & mk) | KEY_MARK);
            lo->vals[s]++;
        }
        if (k + 1 < KN_ORDER && n >= k + 1) {  // (ng[5] holds every 5-gram, the first too)
            uint64_t first = 0;
            for (int j = 0; j <= k; j++) first = (first << 8) | x[j];
            if (ht_find(up, first | KEY_MARK) == (size_t)-1) {
                size_t s = ht_upsert(lo, (first & mk) | KEY_MARK);
                lo->vals[s]++;
            }
        }
    }
    // contexts and count-of-counts per order
    for (int k = 1; k <= KN_ORDER; k++) {
        HT *g = &m->ng[k], *c = &m->cx[k];
        uint64_t nr[5] = {0};
        for (size_t i = 0; i < g->cap; i++) {
            if (!g->keys[i]) continue;
            uint32_t cnt = g->vals[i];
            uint64_t ctx = ((g->keys[i] & ~KEY_MARK) >> 8) | KEY_MARK;
            size_t cs = ht_upsert(c, ctx);  // may regrow: take vals only afterwards
            uint32_t *v = c->vals + cs * 4;
            v[CX_TOTAL] += cnt;
            v[cnt == 1 ? CX_N1 : cnt == 2 ? CX_N2 : CX_N3]++;
            if (cnt <= 4) nr[cnt]++;
        }
        kn_discounts(nr, m->D[k]);
    }
}

static void kn_free(KN *m) {
    for (int k = 1; k <= KN_ORDER; k++) {
        ht_free(&m->ng[k]);
        ht_free(&m->cx[k]);
    }
}

// P(w | h), h = the last hl (<= 4) bytes before w, packed big-endian into `hist` (oldest byte
// highest). With a shorter history (the start of an eval sequence) the top level is order hl+1.
static double kn_prob(const KN *m, uint64_t hist, int hl, int w) {
    double p = 1.0 / 256.0;
    for (int j = 0; j <= hl; j++) {
        int k = j + 1;
        uint64_t ctx = hist & mask_bytes(j);
        size_t cs = ht_find(&m->cx[k], ctx | KEY_MARK);
        if (cs == (size_t)-1) continue;  // unseen context: this level is the one below
        const uint32_t *v = m->cx[k].vals + cs * 4;
        const double *D = m->D[k];
        double total = (double)v[CX_TOTAL];
        size_t gs = ht_find(&m->ng[k], ((ctx << 8) | (uint64_t)w) | KEY_MARK);
        uint32_t c = gs == (size_t)-1 ? 0 : m->ng[k].vals[gs];
        double disc = c == 0 ? 0 : c == 1 ? D[1] : c == 2 ? D[2] : D[3];  // D[r] <= r <= c
        double gamma = (D[1] * v[CX_N1] + D[2] * v[CX_N2] + D[3] * v[CX_N3]) / total;
        p = ((double)c - disc) / total + gamma * p;
    }
    return p;
}

// Test hook (declared in tests/test_ngram.c only): fit on train and return the sum of
// P(w | ctx) over all 256 bytes w, ctx = its last min(ctxlen, 4) bytes. Must be 1.
double kn5_prob_sum_for_test(const uint8_t *train, int64_t nt, const uint8_t *ctx, int ctxlen) {
    KN m;
    kn_fit(&m, train, nt);
    int hl = ctxlen < KN_ORDER - 1 ? ctxlen : KN_ORDER - 1;
    uint64_t hist = 0;
    for (int i = ctxlen - hl; i < ctxlen; i++) hist = (hist << 8) | ctx[i];
    double s = 0;
    for (int w = 0; w < 256; w++) s += kn_prob(&m, hist, hl, w);
    kn_free(&m);
    return s;
}

void anchors_from_bytes(const uint8_t *train, int64_t nt, const uint8_t *ev, int64_t nseq, int T,
                        double *unigram_bpb, double *kn5_bpb) {
    // unigram, add-one over 256 symbols
    double lp1[256];
    {
        int64_t cnt[256] = {0};
        for (int64_t i = 0; i < nt; i++) cnt[train[i]]++;
        for (int w = 0; w < 256; w++) lp1[w] = -log2(((double)cnt[w] + 1.0) / ((double)nt + 256.0));
    }
    KN m;
    kn_fit(&m, train, nt);
    double s1 = 0, s5 = 0;
    uint64_t hmask = mask_bytes(KN_ORDER - 1);
    for (int64_t i = 0; i < nseq; i++) {
        const uint8_t *s = ev + i * (int64_t)T;
        // the context restarts with each sequence: the model sees each from an empty state
        uint64_t hist = 0;
        for (int j = 0; j < T; j++) {
            hist = ((hist << 8) | s[j]) & hmask;
            int hl = j + 1 < KN_ORDER - 1 ? j + 1 : KN_ORDER - 1;
            int w = s[j + 1];
            s1 += lp1[w];
            s5 -= log2(kn_prob(&m, hist, hl, w));
        }
    }
    kn_free(&m);
    double den = (double)nseq * (double)T;
    if (unigram_bpb) *unigram_bpb = den > 0 ? s1 / den : 0;
    if (kn5_bpb) *kn5_bpb = den > 0 ? s5 / den : 0;
}

int64_t anchors_fit_size(int64_t fit_bytes, int64_t n_train) {
    int64_t nf = n_train >= 0 && n_train < fit_bytes ? n_train : fit_bytes;
    // counts are uint32: the fit set stays well below 2^32 bytes (the default is 8 MB anyway)
    return nf > ANCHOR_FIT_MAX ? ANCHOR_FIT_MAX : nf;
}

int anchors_compute(const Data *d, int64_t fit_bytes, int64_t eval_bytes, int T, Anchors *a, dm_err *err) {
    if (!d || d->n_train <= 0) return dm_fail(err, "anchors: no corpus loaded (load one with :data PATH)");
    if (T < 1) return dm_fail(err, "anchors: sequence length %d must be at least 1 (set seq)", T);
    int64_t nseq = data_eval_nseq(d, eval_bytes, T);
    if (nseq < 1)
        return dm_fail(err, "anchors: the eval window (eval_bytes %lld, held-out %lld B) holds no sequence of %d bytes (raise eval_bytes or lower seq)",
                       (long long)eval_bytes, (long long)d->n_eval, T);
    int64_t nf = anchors_fit_size(fit_bytes, d->n_train);
    if (nf < 1) return dm_fail(err, "anchors: anchor_fit_bytes %lld must be at least 1 (set anchor_fit_bytes)", (long long)fit_bytes);
    // The fit set is a copy of at most anchor_fit_bytes (8 MB by default): small next to the
    // tables, and the hash pass wants it contiguous. Read in blocks through the int reader.
    int64_t ne = nseq * (int64_t)T + 1;
    uint8_t *tr = mallocCheck((size_t)nf);
    uint8_t *ev = mallocCheck((size_t)ne);
    enum { BLK = 1 << 16 };
    int *buf = mallocCheck(BLK * sizeof *buf);
    // guarded reads: a mapped corpus that shrank on disk is a one-line error, not SIGBUS
    int bad = 0;
    for (int64_t o = 0; o < nf && !bad; o += BLK) {
        int len = nf - o < BLK ? (int)(nf - o) : BLK;
        bad = data_read_checked(d, 0, o, len, buf, err);
        for (int j = 0; j < len && !bad; j++) tr[o + j] = (uint8_t)buf[j];
    }
    for (int64_t o = 0; o < ne && !bad; o += BLK) {
        int len = ne - o < BLK ? (int)(ne - o) : BLK;
        bad = data_read_checked(d, 1, o, len, buf, err);
        for (int j = 0; j < len && !bad; j++) ev[o + j] = (uint8_t)buf[j];
    }
    free(buf);
    if (bad) {
        free(tr);
        free(ev);
        return 1;
    }
    memset(a, 0, sizeof *a);
    anchors_from_bytes(tr, nf, ev, nseq, T, &a->unigram_bpb, &a->kn5_bpb);
    a->fit_bytes = nf;
    a->window_bytes = nseq * (int64_t)T;
    uint32_t hs = eval_set_begin();
    for (int64_t o = 0; o < ne; o++) {
        int b = ev[o];
        hs = eval_set_add(hs, &b, 1);
    }
    a->eval_set = eval_set_end(hs);
    a->nseq = nseq;
    a->T = T;
    free(tr);
    free(ev);
    return 0;
}
