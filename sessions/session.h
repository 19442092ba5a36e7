// session.h — a session is a directory runs/NAME (SPEC §6 "Sessions"): config.dm (the resolved
// config as commands that rebuild it), metrics.tsv (one row per logged step and eval),
// transcript.dm (every command typed, replayable), ckpt/ (checkpoints), plots/.
#pragma once
#include "../engine/engine.h"

// Create or reuse DIR; from now on metrics rows append to DIR/metrics.tsv. Writes config.dm
// and, when the engine already holds metric rows, rewrites metrics.tsv from them.
int session_open(Engine *e, const char *dir, dm_err *err);
// Append one typed line to transcript.dm (no-op without a session).
void session_transcript(const Engine *e, const char *line);
// Rewrite config.dm from the engine's config.
int session_write_config(const Engine *e, dm_err *err);
// Rewrite metrics.tsv from the engine's rows (after a resume: no duplicated or lost rows).
int session_rewrite_metrics(const Engine *e, dm_err *err);
// The latest checkpoint under DIR/ckpt (step-N.ckpt with the largest N); 0 when found.
int session_latest_ckpt(const char *dir, char *path, size_t n, long long *step);
// dmsh -r DIR: load the latest checkpoint (model, optimizer, step, metrics), reopen its corpus,
// adopt DIR as the session.
int session_resume(Engine *e, const char *dir, dm_err *err);
// Save DIR/ckpt/step-N.ckpt when leaving a session; when it exists and holds another state
// (not the one last saved or loaded), as step-N-exitK.ckpt instead, with a note on stderr.
int session_autosave(Engine *e, char *path, size_t n, dm_err *err);
