// step.h — one training step as ENQUEUE + REPORT (SPEC §8, issue 5). The engine's view of the
// step that lets a device run ahead of the host:
//
//   enqueue  build the batch on the host (while the device may still run the previous step),
//            stage it and the step's scalars (StepHyper) in host staging memory, then enqueue:
//            the uploads from staging, forward, loss/objective, backward, the whole optimizer
//            update, and the step's record into a ring in backend memory. No host round trip.
//            After warm-up, on a backend with graphs (CUDA), all of that is ONE graph replay.
//   report   download the records of every step enqueued since the last report in one copy and
//            turn them into metric rows (exactly the numbers an eager step would have printed),
//            the optimizer's host mirrors, and the nan_limit error.
//
// engine_step() is enqueue + report. The REPL's :train reports on log steps (or when the ring
// is full, or at the end); every engine function that reads the training state reports first.
#pragma once
#include <stdint.h>
#include "model.h"

#define STEP_RING 256     // steps that may be pending before a report is forced
#define STEP_GRAPH_WARM 2 // eager steps with an unchanged graph key before the step is captured

// Everything a captured step baked in: when any of it changes, the graph is re-captured.
typedef struct {
    Config cfg;                 // the model's config: shapes and the by-value op arguments
    int arms_on[ARM_COUNT];     // which arms' ops were enqueued
    int B, T;
    const void *bufs[16];       // the buffers the ops name (a rebuilt model or a grown workspace moves them)
    long allocs;                // the backend's allocation count (an internal scratch that grew moved too)
} StepGraphKey;

typedef struct {
    const Backend *be;          // the backend the buffers below belong to; NULL: not set up
    // host staging (be->host_alloc: pinned on CUDA), rewritten before each step: the step's
    // uploads (graph memcpy nodes when captured) read it when they RUN, so the host waits
    // (upload_wait) for the previous step's uploads before writing it again
    StepHyper *stage_hp;
    int *stage_tok;             // [2 N] the batch's ids, then its targets
    int *tok;                   // [2 N] plain host memory the batch is built in
    int ntok;                   // N the token buffers hold
    // backend memory
    double *loss;               // [2] the step's mean CE and its objective (step_loss)
    StepRecord *ring;           // [STEP_RING] one record per pending step
    // host
    StepRecord *ring_host;      // [STEP_RING] the downloaded records
    int64_t (*arms_after)[2][ARM_COUNT];  // [STEP_RING] arm counters after each pending step's enqueue
    uint16_t off_mask[STEP_RING];  // the arms off (arms_off_mask) at each pending step's enqueue
    int pending;                // steps enqueued and not yet reported
    // the captured step
    void *graph;                // be's executable graph; NULL: none
    StepGraphKey key;           // what the graph (or the warm-up count) belongs to
    int warm;                   // eager steps run with `key`
    int failed;                 // capture failed for `key`: eager until the key changes
    int64_t delta[2][ARM_COUNT];  // arm counters one replay adds (the host side of the captured step)
    int fwd_depth;              // ... and the forward's host bookkeeping a replay restores (probes,
    double fwd_marks[64];       // model_read_moe read it): last_depth, depth_loss markers
    long captures, replays, eager;  // counts, for :bench and the tests
    char notice[640];           // a message for the user (capture failed, ...)
    int notice_new;             // notice not yet handed out by engine_notice
    int ram_noted;              // the engram_ram "no graph" notice was given
} StepRunner;

// The functions are engine_step_enqueue / engine_report / engine_notice (engine.h, step.c).
// Drop the graph and the buffers (before the model they point into goes); pending records are lost.
void step_free(StepRunner *r);
