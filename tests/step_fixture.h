// step_fixture.h — what test_step.c and test_run_files.c share: a small word corpus in a temp
// file (the group's setup and teardown), a tiny config that exercises every arm, and an engine
// built on a backend with that corpus open.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "testutil.h"
#include "../engine/engine.h"
#include "../engine/rng.h"

static char corpus[64] = "";

// a small text corpus: enough bytes for the train and eval splits of a tiny model
static int setup(void **s) {
    (void)s;
    snprintf(corpus, sizeof corpus, "/tmp/dm_step_corpus_XXXXXX");
    int fd = mkstemp(corpus);
    if (fd < 0) return 1;
    FILE *f = fdopen(fd, "w");
    Rng r = {99};
    const char *words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat, ", "and ", "dog ", "ran.\n", "so "};
    for (int i = 0; i < 12000; i++) fputs(words[rng_next(&r) % 10], f);
    fclose(f);
    return 0;
}
static int teardown(void **s) {
    (void)s;
    unlink(corpus);
    return 0;
}

static Config tiny_config(void) {
    Config c;
    config_defaults(&c);
    c.d = 8; c.H = 2; c.L = 3; c.E = 3; c.k = 2; c.r = 2; c.f = 6;
    c.engram_rows = 13; c.engram_dim = 3; c.n_orders = 2; c.engram_orders[0] = 1; c.engram_orders[1] = 3;
    c.seq = 9; c.batch = 2; c.kda_chunk = 4;
    c.moe_aux = 0.3;
    c.clip = 0.05; c.retract_every = 2; c.warmup = 3; c.steps = 40; c.nan_limit = 5;
    c.eval_bytes = 64;
    return c;
}

static void make_engine(Engine *e, const Backend *be, Config c) {
    dm_err err = {0};
    engine_init(e);
    e->cfg = c;
    e->be = be;
    if (engine_build(e, 17, &err)) fail_msg("engine_build: %s", err.msg);
    if (engine_open_data(e, corpus, NULL, &err)) fail_msg("engine_open_data: %s", err.msg);
}
