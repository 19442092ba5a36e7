// session_lock.h — the session directory's lock (session_lock.c); session.c's, not the REPL's
// (session_in_use, in session.h, is the public question "does another dmsh hold DIR?").
#pragma once
#include "session.h"

// Take DIR/.lock (ours already: 0); held as the new lock until session_lock_commit. 1 with err
// naming the other dmsh's pid when it is held.
int session_lock(const char *dir, dm_err *err);
// ok: the new lock replaces the one held; not ok: it is dropped and the old one stays
void session_lock_commit(int ok);
// At a save: the lock file removed under the run is made again and taken, or the other dmsh
// that took the session meanwhile is named; appended to note ("; " separated).
void session_relock_if_lost(const char *dir, char *note, size_t nnote);
