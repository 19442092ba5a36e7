// lost_settings.h — what -r says of the settings a killed process made after its last checkpoint
// (sessions/session.c's resume feeds it the session's transcript, line by line).
#pragma once
#include "../engine/engine.h"

// Settings a killed process had made after its last checkpoint are in its transcript, not in the
// state -r resumes (a clean exit saves them; SIGKILL, the OOM killer or a power cut do not). The
// transcript's :set, :preset and :arm lines since its last reset (a resume, a :load, an :init) are
// applied to a copy of the resumed config; what then differs is said at the resume, not dropped
// without a word (QA, session 23: `:arm kda off; :set lr=0.001` were gone after a SIGKILL while the
// transcript still showed them). A command typed as a unique prefix or shortcut reads as the REPL
// ran it.
typedef struct {
    // the last value each key was given since the reset, in the order they were last given (a
    // :preset adds its file's keys; a :set of a key given before moves it to the end), so any
    // number of lines holds at most one pair per config key
    struct { char key[32], val[224]; } kv[96];
    int n;
    int arm[ARM_COUNT];   // -1: not switched since the reset; else the last :arm's on/off
} LostSettings;

void lost_settings_reset(LostSettings *l);
// the REPL's command names (NULL-terminated), and the one a typed word of len bytes names (exact,
// a unique prefix, or :s :t :e :p :h :q), else NULL
extern const char *const lost_settings_commands[];
const char *lost_settings_resolve(const char *word, size_t len);
// one transcript line (leading blanks skipped)
void lost_settings_line(LostSettings *l, const char *q);
// the note (engine_note) naming every live key and arm the transcript left different from the
// resumed state; nothing when they agree
void lost_settings_note(Engine *e, const LostSettings *l);
