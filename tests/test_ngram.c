// test_ngram.c — the anchors (SPEC §5): add-one unigram by hand, the KN 5-gram well below the
// unigram on structured text, KN distributions normalised, context restart per sequence,
// anchors_compute = anchors_from_bytes on the same bytes, determinism.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/ngram.h"

// Test hook defined in engine/ngram.c (not in ngram.h: it is not API): fit the KN 5-gram on
// train and return sum over w of P(w | last 4 bytes of ctx).
double kn5_prob_sum_for_test(const uint8_t *train, int64_t nt, const uint8_t *ctx, int ctxlen);

// Structured text for the KN test: tinyshakespeare when present, else the C headers in
// /usr/include, else generated English-like sentences. Returns a malloc'd buffer of n bytes.
static uint8_t *load_text(int64_t want, int64_t *n) {
    uint8_t *b = malloc((size_t)want);
    int64_t got = 0;
    FILE *f = fopen("/work/shared/data/tinyshakespeare.txt", "rb");
    if (f) {
        got = (int64_t)fread(b, 1, (size_t)want, f);
        fclose(f);
    }
    if (got < want) {
        const char *hdrs[] = {"/usr/include/stdio.h", "/usr/include/stdlib.h", "/usr/include/string.h",
                              "/usr/include/unistd.h", "/usr/include/math.h", "/usr/include/wchar.h",
                              "/usr/include/time.h", "/usr/include/signal.h", "/usr/include/fcntl.h"};
        got = 0;
        for (size_t i = 0; i < sizeof hdrs / sizeof *hdrs && got < want; i++) {
            FILE *h = fopen(hdrs[i], "rb");
            if (!h) continue;
            got += (int64_t)fread(b + got, 1, (size_t)(want - got), h);
            fclose(h);
        }
    }
    if (got < want) {  // generated: a small grammar over a small vocabulary
        const char *subj[] = {"the king", "a man", "my lord", "the queen", "our friend", "this lady"};
        const char *verb[] = {"speaks to", "loves", "remembers", "follows", "betrays", "honours"};
        const char *obj[] = {"the crown", "his brother", "the people", "her father", "the night", "all rome"};
        Rng r = {3};
        while (got < want) {
            char s[128];
            int len = snprintf(s, sizeof s, "%s %s %s.\n", subj[rng_next(&r) % 6], verb[rng_next(&r) % 6],
                               obj[rng_next(&r) % 6]);
            for (int i = 0; i < len && got < want; i++) b[got++] = (uint8_t)s[i];
        }
    }
    *n = got;
    return b;
}

static void test_unigram_by_hand(void **s) {
    (void)s;
    // train "abracadabra": a 5, b 2, r 2, c 1, d 1; n = 11 -> p(w) = (c + 1) / 267
    const uint8_t *train = (const uint8_t *)"abracadabra";
    // one sequence, T = 6: inputs "abcaxz", targets "bcaxz!" (x, z, ! never seen)
    const uint8_t *ev = (const uint8_t *)"abcaxz!";
    double uni, kn;
    anchors_from_bytes(train, 11, ev, 1, 6, &uni, &kn);
    double want = -(log2(3.0 / 267) + log2(2.0 / 267) + log2(6.0 / 267) + 3 * log2(1.0 / 267)) / 6;
    assert_true(fabs(uni - want) < 1e-12);
    assert_true(isfinite(kn) && kn > 0);  // unseen bytes still get mass from the 1/256 base
}

static void test_kn_beats_unigram(void **s) {
    (void)s;
    int64_t n;
    uint8_t *b = load_text(400000, &n);
    const int T = 128;
    int64_t nt = 360000, nseq = (n - nt - 1) / T;
    double uni, kn;
    anchors_from_bytes(b, nt, b + nt, nseq, T, &uni, &kn);
    print_message("unigram %.3f, KN5 %.3f bpb over %lld x %d\n", uni, kn, (long long)nseq, T);
    assert_true(uni > 3.0 && uni < 8.0);
    assert_true(kn < 0.75 * uni);
    // deterministic: the same bytes give the same numbers, to the bit
    double uni2, kn2;
    anchors_from_bytes(b, nt, b + nt, nseq, T, &uni2, &kn2);
    assert_true(uni == uni2 && kn == kn2);
    free(b);
}

static void test_kn_normalised(void **s) {
    (void)s;
    int64_t n;
    uint8_t *b = load_text(200000, &n);
    const char *ctxs[] = {"", "e", "th", "the", "the ", "and the ", "zqxj", "\xff\xfe\x01", "\n\n"};
    for (size_t i = 0; i < sizeof ctxs / sizeof *ctxs; i++) {
        double sum = kn5_prob_sum_for_test(b, n, (const uint8_t *)ctxs[i], (int)strlen(ctxs[i]));
        if (fabs(sum - 1) > 1e-9) print_error("context '%s': sum %.15f\n", ctxs[i], sum);
        assert_true(fabs(sum - 1) < 1e-9);
    }
    // degenerate training sets: one repeated byte, two bytes, shorter than a 5-gram
    const char *tiny[] = {"aaaaaaaaaaaaaaaa", "abababababab", "abc", "a"};
    for (size_t i = 0; i < sizeof tiny / sizeof *tiny; i++) {
        const uint8_t *t = (const uint8_t *)tiny[i];
        double s1 = kn5_prob_sum_for_test(t, (int64_t)strlen(tiny[i]), (const uint8_t *)"aaaa", 4);
        double s2 = kn5_prob_sum_for_test(t, (int64_t)strlen(tiny[i]), (const uint8_t *)"ab", 2);
        assert_true(fabs(s1 - 1) < 1e-9 && fabs(s2 - 1) < 1e-9);
    }
    free(b);
}

// The context restarts at each sequence: the BPB over two sequences is the mean of the BPB of
// each scored alone, whatever bytes precede the second one.
static void test_context_restart(void **s) {
    (void)s;
    int64_t n;
    uint8_t *b = load_text(100000, &n);
    const int T = 64;
    int64_t nt = 90000;
    const uint8_t *ev = b + nt;
    double u2, k2, ua, ka, ub, kb;
    anchors_from_bytes(b, nt, ev, 2, T, &u2, &k2);
    anchors_from_bytes(b, nt, ev, 1, T, &ua, &ka);
    anchors_from_bytes(b, nt, ev + T, 1, T, &ub, &kb);
    assert_true(fabs(k2 - (ka + kb) / 2) < 1e-12);
    assert_true(fabs(u2 - (ua + ub) / 2) < 1e-12);
    free(b);
}

// anchors_compute reads the training prefix and the eval window through Data and scores the
// same bytes as anchors_from_bytes; fit_bytes caps the fit set.
static void test_compute_matches_bytes(void **s) {
    (void)s;
    int64_t n;
    uint8_t *b = load_text(120000, &n);
    char dir[] = "/tmp/dm_test_ngram_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p[256];
    snprintf(p, sizeof p, "%s/corpus.txt", dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    const int T = 32;
    Data d;
    dm_err e = {0};
    assert_int_equal(data_open(&d, p, NULL, 0.1, T, &e), 0);
    Anchors a;
    const int64_t fit = 50000, eval_bytes = 4000;
    assert_int_equal(anchors_compute(&d, fit, eval_bytes, T, &a, &e), 0);
    int64_t nseq = data_eval_nseq(&d, eval_bytes, T);
    assert_int_equal(a.nseq, nseq);
    assert_int_equal(a.T, T);
    assert_int_equal(a.window_bytes, nseq * T);
    assert_int_equal(a.fit_bytes, fit);
    double uni, kn;
    anchors_from_bytes(b, fit, b + d.n_train, nseq, T, &uni, &kn);
    assert_true(a.unigram_bpb == uni && a.kn5_bpb == kn);
    // a fit budget larger than the training split uses all of it
    assert_int_equal(anchors_compute(&d, (int64_t)1 << 40, eval_bytes, T, &a, &e), 0);
    assert_int_equal(a.fit_bytes, d.n_train);
    // an eval window too small for one sequence is an error, in one line
    assert_int_not_equal(anchors_compute(&d, fit, T - 1, T, &a, &e), 0);
    assert_null(strchr(e.msg, '\n'));
    data_close(&d);
    unlink(p);
    rmdir(dir);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unigram_by_hand),
        cmocka_unit_test(test_kn_beats_unigram),
        cmocka_unit_test(test_kn_normalised),
        cmocka_unit_test(test_context_restart),
        cmocka_unit_test(test_compute_matches_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
