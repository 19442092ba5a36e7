// replay.h — `dmsh --replay FILE.dm`: the script in two processes, compared bit for bit.
#pragma once
struct Engine;
// The parent: runs the script twice (each child: this binary -b FILE.dm with DMSH_DIGEST set),
// compares the digests, prints one result line. 0 bit-identical, 1 not (or a run failed), 2 usage.
int replay_main(const char *script);
// A child: the digest of the engine's state (rows, step, every tensor and moment) to PATH.
int replay_write_digest(const struct Engine *e, const char *path);
