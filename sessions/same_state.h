// same_state.h — whether two checkpoints hold the same state (session.c's save_step keeps no
// branch file step-N-bK that is an earlier file of step N again).
#pragma once

// 1 when every section of the two files is the same bytes, the metric rows too but for their
// step times (ms, tok/s: steps redone after a :load or a resume reach the same weights, moments
// and losses in other wall-clock times). Files over 512 MiB are compared in blocks (reading both
// whole would double a save's memory): session_same_state_blocks. 0 when either cannot be read.
int session_same_state(const char *a, const char *b);
// The block-wise comparison (called directly by tests): the same answer without reading a file whole.
int session_same_state_blocks(const char *a, const char *b);
