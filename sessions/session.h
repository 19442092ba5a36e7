// session.h — a session is a directory runs/NAME (SPEC §6 "Sessions"): config.dm (the resolved
// config as commands that rebuild it), metrics.tsv (one row per logged step and eval),
// transcript.dm (every command typed, replayable), ckpt/ (checkpoints), plots/.
#pragma once
#include "../engine/engine.h"

// Create or reuse DIR; from now on metrics rows append to DIR/metrics.tsv. Writes config.dm
// and, when the engine already holds metric rows, rewrites metrics.tsv from them.
int session_open(Engine *e, const char *dir, dm_err *err);
// Append one typed line to transcript.dm (without a session: kept for the head of the next
// one's). 0, or 1 when the file did not take it (a full disk: nothing of it is left in the file,
// a note on stderr says so, and the next line that goes in is preceded by a comment that says
// how many did not).
int session_transcript(Engine *e, const char *line);
// session_transcript, but a line the file does not take is not said nor counted (a command's
// mark: its own line, written when it returns, is)
int session_transcript_quiet(Engine *e, const char *line);
// A line (what) the transcript at path could not take (er: the errno): said on stderr, and counted
// into the comment session_transcript puts before the next line the file takes.
void session_transcript_lost(const char *path, const char *what, int er);
// LINES (n bytes, whole lines) appended to the transcript at path by name, with the header a new
// file takes and the note of a file that is not the one this run wrote (deleted, replaced): a
// running command's lines when its mark's file is gone (transcript_marks.c). 0, or 1 not written.
int session_transcript_write_raw(const char *path, const char *lines, size_t n);
// dmsh itself put a new transcript.dm in place (-r's rewrite): not "another file" to the next append
void session_transcript_rewritten(void);
// A write to the transcript through a held descriptor (a command's mark taking its lines): the
// size this run left it at, so a later append does not take it for another file
void session_transcript_remember_fd(const char *path, int fd);
// Before a checkpoint line is composed: a transcript deleted since the last append makes it an
// unplaced one (the lines before it are gone)
void session_transcript_precheck(const char *path);
// A command's mark while it runs (sessions/transcript_marks.c): session_transcript_begin appends
// LINE (a comment that says the command started and never finished) and remembers where;
// session_transcript_end takes it out again once the command has returned, before its own line is
// written. A process killed during the command (SIGKILL, the OOM killer, a power cut) leaves the
// mark: the transcript then says which command it was, and a -b replay names it instead of
// silently missing what it did. name, step0, text: the command (resolved name, the step it
// started at, its transcript text), for the checkpoints it writes (session_transcript_ckpt).
typedef struct TranscriptMark {
    char path[1200];
    long off, len;
    int fd, pushed;
    const char *name, *text;
    long long step0;
    struct TranscriptMark *outer;  // the command running this one (a :run's line inside another's)
    int wrote;                     // checkpoints of the session written (or found) during it
} TranscriptMark;
void session_transcript_begin(Engine *e, const char *line, const char *name, long long step0, const char *text,
                              TranscriptMark *m);
// Once the command has returned: the lines written from now on to its transcript are held, and
// session_transcript_end puts them in the mark's place in one write (the file holds the mark or
// the command's lines at every moment: a process killed between taking the mark out and writing
// the line lost the command without a word). Without it, end only takes the mark out.
void session_transcript_finishing(TranscriptMark *m);
void session_transcript_end(TranscriptMark *m);
// (session.c) hold the lines appended to PATH; unhold: them (len bytes, with one byte spare after
// them), and appends go to the file again
void session_transcript_hold(const char *path);
char *session_transcript_unhold(size_t *len);
// 1 when LINE, to be appended to PATH, went into the held lines instead (PATH is the held one)
int session_transcript_held(const char *path, const char *line);
// 1 when the transcript's last line (the held lines' last, while they are held) is LINE
int session_transcript_last_is(const Engine *e, const char *line);
// Where the transcript is when a checkpoint of the session is written (or the state proves to be
// one already there): each holds the state the transcript's lines rebuild at one line of it, and
// -r, resuming that file, turns the command lines after that line into comments (they ran, but
// their effect is not in the state). Written by session_save and session_autosave (path: the
// file), at once, naming the command running (`..., written by the :NAME running here (from step
// S): CMD`): a :train's checkpoint is K steps into its run (-r takes them with a stop_after line),
// another command's holds the state before its line; a :save's, and the state a command ends in
// when it is a file's, get a line after the command's (session_transcript_ckpt_after). Nothing
// without a session.
// written: 1 a file written, 0 one the state is in already (no line), 2 a save that found its
// state in the file already (a line only for a :train's, whose steps -r may take to it).
void session_transcript_ckpt(Engine *e, const char *path, int written);
// After the command's line is written: the line for the file the state is still in, if the
// command wrote or found one (this also ends the command for session_transcript_ckpt).
void session_transcript_ckpt_after(Engine *e, TranscriptMark *m);
// -r resumed a state the transcript's lines do not rebuild: the checkpoint lines written from
// now on say so and place nothing (`# unplaced checkpoint ...`), until a :load or a session switch.
void session_transcript_unplaced(int on);
int session_transcript_is_unplaced(void);
// Rewrite config.dm from the engine's config.
int session_write_config(const Engine *e, dm_err *err);
// (session_config.c, for session.c) one word of the command language, quoted when it must be;
// the :set of every key and the :data line that rebuild the config and corpus
void session_put_word(FILE *f, const char *s);
void session_put_config_lines(FILE *f, const Engine *e);
// Rewrite metrics.tsv from the engine's rows (after a resume: no duplicated or lost rows).
int session_rewrite_metrics(Engine *e, dm_err *err);
// The latest checkpoint under DIR/ckpt: the one ckpt/LATEST names (the file the session wrote
// last), else the checkpoint file written most recently (its time; ties: the larger step, then
// the later branch step-N-bK); 0 when found. *step: N of a step-N name, -1 for a name a
// :save PATH gave (mine.ckpt).
int session_latest_ckpt(const char *dir, char *path, size_t n, long long *step);
// :train ckpt_keep=N (ckpt_keep.c): of the checkpoints one :train writes, the N newest stay.
typedef struct CkptKeep {
    int keep;       // N (0: every one stays)
    int n;          // this run's checkpoints still on disk, oldest first
    char **paths;
} CkptKeep;
// After a checkpoint of the run at path; fresh: a file this save wrote (not an earlier file that
// already held the state). Removes the run's oldest beyond keep; said: what went (or could
// not), "" when nothing. Returns how many were removed.
int ckpt_keep_after(CkptKeep *k, const char *path, int fresh, char *said, size_t n);
void ckpt_keep_free(CkptKeep *k);
// 1 when DIR/ckpt/LATEST exists but cannot be followed (it names a file that is gone, or holds
// no checkpoint name), with why saying so in one phrase; session_latest_ckpt then falls back.
int session_latest_broken(const char *dir, char *why, size_t n);
// dmsh -r DIR: load the latest checkpoint (model, optimizer, step, metrics), reopen its corpus,
// adopt DIR as the session. A LATEST that cannot be followed, and a checkpoint that does not
// load, are passed for the checkpoint written most recently that loads (one rule for both: the
// state the run was in when it last saved), each with a message on stderr naming the file.
// session_open and session_resume lock DIR (DIR/.lock, flock): a second dmsh on the same
// session is refused.
int session_resume(Engine *e, const char *dir, dm_err *err);
// Save the current state in the session: DIR/ckpt/step-N.ckpt, or step-N-bK.ckpt when that file
// holds another state of step N (note then says so); ckpt/LATEST names it afterwards.
int session_save(Engine *e, char *path, size_t n, char *note, size_t nnote, dm_err *err);
// Without a session: DIR/dmsh-step-N.ckpt in session_default_dir (the working directory), or
// dmsh-step-N-bK.ckpt when that file holds another state of step N (note then says so): a
// checkpoint already there is never replaced.
int session_save_default(Engine *e, char *path, size_t n, char *note, size_t nnote, dm_err *err);
// 1 when path would go into the ckpt/ of a session directory other than ours (owner: its
// directory): another run's checkpoints, which its resume reads.
int session_foreign_ckpt_dir(const Engine *e, const char *path, char *owner, size_t n);
// 1 when path (a file, written or to be) is in our own session's ckpt/
int session_own_ckpt(const Engine *e, const char *path);
// At -r, with the lock held: each ckpt/NAME.ckpt.<pid>.tmp a crash left is put in place as
// NAME.ckpt when it is whole (every CRC: the kill came in its fsync or before its rename), or
// removed (a write cut short); either said on stderr (sessions/ckpt_dirs.c). placed: the name
// (NAME.ckpt) of the one put in place that was written last, "" when none.
void session_stale_tmps(const char *dir, char *placed, size_t nplaced);
// When leaving a session with a state (or metric rows) in no file yet: session_save. path is
// empty when nothing needed saving, or when the state proved to be an earlier file's (no new file;
// the note on stderr names it).
int session_autosave(Engine *e, char *path, size_t n, dm_err *err);
// 1 (and err naming the holder's pid) when another running dmsh has DIR open as its session
int session_in_use(const char *dir, dm_err *err);
// Where files a command writes by default go: the session directory, else (in a `dmsh --replay`
// process, DMSH_REPLAY_DIR: a temp directory the parent removes) that, else "" (the working
// directory). With a trailing '/' when not empty, so "%sNAME" is the path.
const char *session_default_dir(const Engine *e, char *buf, size_t n);
// 1 when a and b name the same directory (equal strings, or the same file: runs/X/, ./runs/X)
int session_same_dir(const char *a, const char *b);

// A :step, :train or :stress cut short (name resolved; its words after the name, or the line as
// typed): the command that takes the k steps (k >= 1) it took from the step it started at:
// `:step k`, the :train with stop_after=k (the same N: its horizon, evals and checkpoints), the
// :stress with steps=k (its lr is constant), `:step k` for :check determinism (cut in its second
// pass, it keeps those steps). NULL for any other command, k < 1, or a word that is not plain
// (letters, digits, '_', '=', '.', '+', '-'); malloc'd.
// sessions/transcript_cut.c.
char *session_steps_line(const char *name, int nw, const char *const *words, long long k);
char *transcript_cut_line(const char *name, const char *typed, long long k);
// At -r, after the checkpoint loaded (fell_back: another than LATEST's): read the transcript and
// say what it holds that the state does not (the command the process ended in, with the line that
// takes its steps when it wrote that checkpoint; settings made after it; another device).
// unlined: 1 when the session's ckpt/ holds one checkpoint, 2 when -r resumes a save it finished
// (no line for the file is then a kill between the save and its line, not an older dmsh's
// transcript that never placed its files)
void session_resume_transcript(Engine *e, const char *dir, int fell_back, int unlined);
// fopen for a session's own files: NULL unless a regular file (a fifo would block the open).
FILE *session_fopen_regular(const char *path, const char *mode);
