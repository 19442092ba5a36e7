// test_engine_note.c — engine_note: the pending message for the user (engine_notice). A second
// note before the first is read joins it ("; also: "), cut at the buffer's end and terminated;
// once read, the next note starts afresh.
#include <string.h>
#include "testutil.h"
#include "../engine/engine.h"

// n random lowercase letters and spaces (never a NUL), terminated
static void random_text(char *out, size_t n, Rng *r) {
    for (size_t i = 0; i < n; i++) out[i] = "abcdefghijklmnopqrstuvwxyz "[rng_next(r) % 27];
    out[n] = 0;
}

// QA mutation, session 40: a second note before the first was read was dropped (`if (0)` for the
// append branch) and no test noticed: no test had two notes in one command (the case the comment
// names: a :load whose checkpoint names another corpus that also changed on disk says only the
// first). Both must be said, in order, with the formatted arguments.
static void test_second_note_joins_the_first(void **s) {
    (void)s;
    static Engine e;
    engine_init(&e);
    assert_null(engine_notice(&e));
    engine_note(&e, "first %d", 17);
    engine_note(&e, "second %s", "xq");
    const char *m = engine_notice(&e);
    assert_non_null(m);
    assert_string_equal(m, "first 17; also: second xq");
    assert_null(engine_notice(&e));  // read: nothing pending
    // a note after the read starts afresh; a third before its read joins again
    engine_note(&e, "third");
    engine_note(&e, "fourth");
    engine_note(&e, "fifth");
    assert_string_equal(engine_notice(&e), "third; also: fourth; also: fifth");
    engine_free(&e);
}

// Near the buffer's end the joined note is cut there and stays terminated; a first note that
// leaves no room for "; also: " keeps itself alone.
static void test_joined_note_cut_at_the_end(void **s) {
    (void)s;
    static Engine e;
    const size_t cap = sizeof e.note;  // 800
    static char first[1000], second[1000], want[1000];
    Rng r = {40};
    engine_init(&e);
    // 780 + 8 + 11 = 799 bytes: fits exactly
    random_text(first, cap - 20, &r);
    random_text(second, 11, &r);
    engine_note(&e, "%s", first);
    engine_note(&e, "%s", second);
    snprintf(want, sizeof want, "%s; also: %s", first, second);
    assert_int_equal(strlen(want), cap - 1);
    assert_string_equal(engine_notice(&e), want);
    // 780 + 8 + 40: cut to 799
    random_text(second, 40, &r);
    engine_note(&e, "%s", first);
    engine_note(&e, "%s", second);
    snprintf(want, sizeof want, "%s; also: %s", first, second);
    want[cap - 1] = 0;
    const char *m = engine_notice(&e);
    assert_int_equal(strlen(m), cap - 1);
    assert_string_equal(m, want);
    // 795 bytes first: "; also: " does not fit, the first stands alone
    random_text(first, cap - 5, &r);
    engine_note(&e, "%s", first);
    engine_note(&e, "%s", second);
    assert_string_equal(engine_notice(&e), first);
    // a first note longer than the buffer: cut to 799, and a second is not joined
    random_text(first, cap + 100, &r);
    engine_note(&e, "%s", first);
    engine_note(&e, "%s", second);
    first[cap - 1] = 0;
    assert_string_equal(engine_notice(&e), first);
    engine_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_note_joins_the_first),
        cmocka_unit_test(test_joined_note_cut_at_the_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
