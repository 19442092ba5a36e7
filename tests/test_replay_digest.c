// test_replay_digest.c — the digest `dmsh --replay` compares (repl/replay.c replay_write_digest),
// in process: one value of a trained engine changed at a time must change the digest, on the line
// that names it and nowhere else. test_cli_verify's hooks (DMSH_REPLAY_PERTURB) prove only that an
// extra line, the first train row's gnorm and byte 0 of the first tensor's m are compared; a
// digest that hashed one element per tensor, left out the losses or the eval BPBs, or hashed the
// v column from m passed every test and would certify two different models "bit-identical" (QA
// mutation, session 39: F1-F4).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/engine.h"
#include "../repl/replay.h"

static Engine eng;
static char dir[32], corpus[64], digest[64];
static char *ref;        // the digest of the untouched engine (each test's own: a failed one leaves its change)
static Rng pick = {39};  // which bit of a value to flip

static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/dm_rdig_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(digest, sizeof digest, "%s/digest", dir);
    FILE *f = fopen(corpus, "w");
    if (!f) return 1;
    Rng r = {11};
    const char *words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat, ", "and ", "dog ", "ran.\n", "so "};
    for (int i = 0; i < 12000; i++) fputs(words[rng_next(&r) % 10], f);
    fclose(f);
    // a tiny model trained 4 steps, then one eval: train rows, an eval row, Adam's moments that
    // are not zero
    engine_init(&eng);
    config_defaults(&eng.cfg);
    Config *c = &eng.cfg;
    c->d = 8; c->H = 2; c->L = 2; c->E = 2; c->k = 1; c->r = 2; c->f = 6;
    c->engram_rows = 13; c->engram_dim = 3; c->n_orders = 2; c->engram_orders[0] = 2; c->engram_orders[1] = 3;
    c->seq = 9; c->batch = 2; c->warmup = 2; c->eval_bytes = 64;
    eng.be = backend_cpu();
    dm_err err = {0};
    if (engine_build(&eng, 5, &err) || engine_open_data(&eng, corpus, NULL, &err)) return 1;
    MetricRow row;
    for (int i = 0; i < 4; i++)
        if (engine_step(&eng, &row, &err)) return 1;
    EvalResult ev;
    if (engine_eval(&eng, c->L, &ev, &err)) return 1;
    return 0;
}

static int teardown(void **s) {
    (void)s;
    engine_free(&eng);
    free(ref);
    unlink(digest);
    unlink(corpus);
    rmdir(dir);
    return 0;
}

static void reference(void) {
    free(ref);
    assert_int_equal(replay_write_digest(&eng, digest), 0);
    ref = read_whole_file(digest, NULL);
}

// The digest now, against the reference: exactly one line differs, and it begins with PREFIX;
// COL (for a tensor line: "tensor" "m" "v" "mom", the word before the hash) is the one hash on it
// that differs. NULL col: the whole line is compared.
static void expect_one_line_changed(const char *what, const char *prefix, const char *col) {
    assert_int_equal(replay_write_digest(&eng, digest), 0);
    char *now = read_whole_file(digest, NULL);
    if (!strcmp(now, ref)) fail_msg("%s: the digest did not change (it does not compare it)", what);
    const char *a = ref, *b = now;
    int differ = 0;
    while (*a && *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || memcmp(a, b, la)) {
            differ++;
            if (strncmp(a, prefix, strlen(prefix))) fail_msg("%s: line '%.*s' changed, not the '%s' line", what, (int)la, a, prefix);
            if (col) {  // the four hashes: tensor NAME P m M v V mom MOM
                char na[64], nb[64], h[4][2][17];
                assert_int_equal(sscanf(a, "tensor %63s %16s m %16s v %16s mom %16s", na, h[0][0], h[1][0], h[2][0], h[3][0]), 5);
                assert_int_equal(sscanf(b, "tensor %63s %16s m %16s v %16s mom %16s", nb, h[0][1], h[1][1], h[2][1], h[3][1]), 5);
                static const char *cols[4] = {"tensor", "m", "v", "mom"};
                for (int k = 0; k < 4; k++)
                    if ((strcmp(h[k][0], h[k][1]) != 0) != !strcmp(cols[k], col))
                        fail_msg("%s: the %s hash %s (only the %s hash should change)", what, cols[k],
                                 strcmp(h[k][0], h[k][1]) ? "changed" : "did not change", col);
            }
        }
        a += la + (a[la] == '\n');
        b += lb + (b[lb] == '\n');
    }
    assert_true(!*a && !*b);  // (as many lines)
    assert_int_equal(differ, 1);
    free(now);
}

// after a value is put back: the digest is the reference again (the change was the value's)
static void expect_reference(void) {
    assert_int_equal(replay_write_digest(&eng, digest), 0);
    char *now = read_whole_file(digest, NULL);
    assert_string_equal(now, ref);
    free(now);
}

// x with one bit of its mantissa flipped (a random one below the top few: a nondeterminism is
// most often a last-bits difference)
static real flip(real x) {
    int bits = sizeof(real) == 4 ? 20 : 48;
    if (sizeof(real) == 4) {
        uint32_t u;
        memcpy(&u, &x, 4);
        u ^= 1u << (rng_next(&pick) % bits);
        memcpy(&x, &u, 4);
    } else {
        uint64_t u;
        memcpy(&u, &x, 8);
        u ^= 1ull << (rng_next(&pick) % bits);
        memcpy(&x, &u, 8);
    }
    return x;
}

// the last tensor with more than one element, and its last element's index in the logical buffer
static int last_tensor(size_t *at) {
    const Model *m = &eng.model;
    for (int i = P_COUNT - 1; i >= 0; i--)
        if (m->t[i].numel > 1) {
            *at = m->t[i].offset + m->t[i].numel - 1;
            return i;
        }
    fail_msg("no tensor with more than one element");
    return -1;
}

// the last element of the last tensor's parameters: the hash covers the whole tensor, not its
// first element (F1: sizeof(real) alone hashed)
static void test_last_param_element(void **s) {
    (void)s;
    reference();
    Model *m = &eng.model;
    size_t at = 0;
    int ti = last_tensor(&at);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "tensor %s ", m->t[ti].name);
    real *p = malloc(sizeof(real) * m->n_params);
    model_params_get(m, p);
    real keep = p[at];
    p[at] = flip(keep);
    model_params_put(m, p);
    expect_one_line_changed("the last parameter of the last tensor", prefix, "tensor");
    p[at] = keep;
    model_params_put(m, p);
    expect_reference();
    free(p);
}

// the optimizer's moments: the last element of m, v and mom of the last tensor, each in its own
// column (F2: the v column hashed from m; F1 again for each of them)
static void test_last_moment_elements(void **s) {
    (void)s;
    reference();
    Model *m = &eng.model;
    size_t at = 0, n = m->n_params;
    int ti = last_tensor(&at);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "tensor %s ", m->t[ti].name);
    real *st[3];
    for (int k = 0; k < 3; k++) st[k] = malloc(sizeof(real) * n);
    int64_t *rs = calloc((size_t)m->cfg.n_orders * m->cfg.engram_rows + 1, sizeof(int64_t));
    optim_state_get(&eng.opt, m, st[0], st[1], st[2], rs);
    static const char *col[3] = {"m", "v", "mom"};
    for (int k = 0; k < 3; k++) {
        real keep = st[k][at];
        st[k][at] = flip(keep);
        optim_state_put(&eng.opt, m, st[0], st[1], st[2], rs);
        char what[80];
        snprintf(what, sizeof what, "the last element of %s's %s", m->t[ti].name, col[k]);
        expect_one_line_changed(what, prefix, col[k]);
        st[k][at] = keep;
        optim_state_put(&eng.opt, m, st[0], st[1], st[2], rs);
        expect_reference();
    }
    for (int k = 0; k < 3; k++) free(st[k]);
    free(rs);
}

// a train row's loss (F4: the losses "--replay" names were not compared) and an eval row's BPB
// (F3: "every eval"), each one ulp away, in the last row of its kind
static void test_row_values(void **s) {
    (void)s;
    reference();
    int tr = -1, ev = -1;
    for (int i = 0; i < eng.nrows; i++) {
        if (eng.rows[i].kind == 0) tr = i;
        if (eng.rows[i].kind == 1) ev = i;
    }
    assert_true(tr > 0 && ev > tr);  // (4 train rows, then the eval)
    char prefix[64];
    double keep = eng.rows[tr].loss;
    eng.rows[tr].loss = nextafter(keep, INFINITY);
    snprintf(prefix, sizeof prefix, "train %lld loss ", (long long)eng.rows[tr].step);
    expect_one_line_changed("a train row's loss", prefix, NULL);
    eng.rows[tr].loss = keep;
    expect_reference();
    keep = eng.rows[ev].bpb;
    eng.rows[ev].bpb = nextafter(keep, -INFINITY);
    snprintf(prefix, sizeof prefix, "eval %lld depth ", (long long)eng.rows[ev].step);
    expect_one_line_changed("an eval row's bpb", prefix, NULL);
    eng.rows[ev].bpb = keep;
    expect_reference();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_last_param_element),
        cmocka_unit_test(test_last_moment_elements),
        cmocka_unit_test(test_row_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
