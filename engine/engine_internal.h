// engine_internal.h — what the engine's own files (engine.c, engine_ckpt.c) share; not for the
// REPL or the tests.
#pragma once
#include "engine.h"

// the live model and optimizer freed (steps still pending become metric rows first)
void engine_free_model(Engine *e);
// after a save or load: this state (step, rows, settings) is the one in PATH
void engine_mark_synced(Engine *e, const char *path);
// 1 with err set when there is no live model (or, with data, no corpus)
int engine_need(const Engine *e, int data, dm_err *err);
