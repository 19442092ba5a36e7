// complete.h — tab completion as a pure function of the text before the cursor, so the rules
// are tested without a terminal; interactive_readline.c only adapts it to GNU readline.
#pragma once
#include "shell.h"

// Candidates for `word` (the word under the cursor: the text after the last blank or ';' of
// `line`, which is the whole line up to the cursor). `table` is the command table (dm_commands;
// a parameter because the library that holds this file does not hold the table). Returns a
// malloc'd NULL-terminated array of malloc'd strings, sorted and without duplicates, each a
// full replacement for `word` ("lr=", "/usr/", ":preset"); NULL when there is none.
//   command word      -> command names (":e" -> :eval :eval-depths)
//   :set              -> "key=" for every config key; after '=' the choices of an enum key
//   :preset / :arm    -> preset names / arm names, then on|off
//   :plot             -> metric names (comma lists too), out= x=
//   :probe            -> activation names (dm_probe_provider when the engine set it, else a fixed list)
//   :show / :check    -> their targets
//   :data :load :run :save, eval= out= -> file paths (directories end in '/')
//   other commands    -> their key= options (:train eval_every= ckpt_every= log_every=)
char **dm_complete(const Command *table, const char *line, const char *word);
void dm_complete_free(char **v);

// A completed path as the command language reads it back (repl/parse.c), opened with the quote
// q ('"' or '\''): inside double quotes '"' and '\' are escaped; inside single quotes a '\''
// closes the quote, is written "'" and reopens it. The closing quote is not added (readline
// appends it after a single match that is not a directory). malloc'd.
char *dm_quote_path(const char *name, char q);
// The inverse for the word readline hands over after an opening quote q: inside double quotes
// \" and \\ are a '"' and a '\' (parse.c's rule); nothing changes after a single quote. malloc'd.
char *dm_unquote_word(const char *word, char q);

// The provider of :probe names from the live engine: a malloc'd NULL-terminated array of
// malloc'd names (freed here). The prompt sets it (a plain pointer: a weak symbol in a static
// library was never linked in, and completion offered names :probe refused); NULL in tests,
// which then get the per-iteration names of a 2-iteration model.
extern char **(*dm_probe_provider)(void *eng);
// The live engine handed to the provider.
extern void *dm_complete_eng;
