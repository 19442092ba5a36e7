#!/usr/bin/env bash
# tests/cuemu/dmsh_defer.sh DMSH — the host/device protocol of a dmsh session. cuemu runs the
# device behind the host as a GPU does (every enqueued op waits until the host synchronises with
# it); CUEMU_DEFER=0 runs each op when it is enqueued instead, where a host that rewrites the
# pinned staging of a step the device has not started, or reads a download before waiting for
# it, still gets the right numbers. Each session below runs both ways and must give the same
# digest (DMSH_DIGEST: losses, every tensor and moment) and the same printed numbers. The
# sessions: steps replayed from the step graph back to back with one report at the end (the host
# runs ahead of the device), an eval and the depth evals between them, :gen, moves to the CPU and
# back, :bench (which restores the state), a checkpoint saved and loaded; once with the Engram
# tables on the device and once in host memory (engram_ram=on: rows up and row gradients down
# around every step).
# Checked to fail (by hand, session 19): engine/step.c without its upload_wait before staging a
# step — the graph's upload of step k then reads step k+1's batch; found as a digest difference.
set -u
DMSH=$(readlink -f "$1")
W=$(mktemp -d /tmp/dmsh_cuemu_defer_XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 CUEMU_MEM_MB=64  # a small device: a quick peak measurement at each move
cat /usr/include/stdio.h /usr/include/stdlib.h /usr/include/string.h > corpus.txt  # real text, any machine
fail=0
check() {  # NAME CONDITION-STATUS
    if [ "$2" = 0 ]; then printf '  %-74s PASS\n' "$1"; else printf '  %-74s FAIL\n' "$1"; fail=1; fi
}
# the printed numbers of a run, without what is timed or measured (ms, tok/s, peaks, bench lines)
numbers() {
    grep -a -v -e '^  cuda:0: cuemu' -e '^bench ' "$1" | sed -e 's/ ms [0-9.]* tok\/s [0-9]*//' -e 's/ eta [0-9]*s//' \
        -e 's/ \[cuemu: ms and tok\/s emulated on the CPU, not a GPU.s\]//'
}
for ram in off on; do
    TINY=":set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4 eval_bytes=1024 engram_ram=$ram"
    for d in 0 1; do  # each run in its own folder (its checkpoint)
        mkdir r.$ram.$d && cd r.$ram.$d && ln -s ../corpus.txt corpus.txt || exit 1
        CUEMU_DEFER=$d DMSH_DIGEST=../dig.$ram.$d "$DMSH" --norc -e ':preset nano' -e "$TINY" -e ':data corpus.txt' \
            -e ':init seed=1' -e ':device cuda' -e ':gen "ab" n=6 seed=1' -e ':step 2' \
            -e ':train 8 log_every=8 eval_every=5' -e ':eval-depths' -e ':probe h@1' -e ':save s.ckpt' \
            -e ':device cpu' -e ':step 1' -e ':device cuda' -e ':bench steps=3' -e ':train 5 log_every=5' \
            -e ':load s.ckpt' -e ':train 3 log_every=3' -e ':gen "x" n=6 seed=2' < /dev/null > ../out.$ram.$d 2> ../err.$ram.$d
        echo $? > ../rc.$ram.$d
        cd ..
    done
    [ "$(cat rc.$ram.0)" = 0 ] && [ "$(cat rc.$ram.1)" = 0 ] && [ -s dig.$ram.0 ] && cmp -s dig.$ram.0 dig.$ram.1 && \
        cmp -s <(numbers out.$ram.0) <(numbers out.$ram.1) && [ "$(grep -c '^step ' out.$ram.1)" -ge 5 ]
    s=$?
    check "engram_ram=$ram: the device behind the host gives the same digest and numbers" $s
    if [ $s != 0 ]; then
        cat err.$ram.0 err.$ram.1
        cmp dig.$ram.0 dig.$ram.1
        diff <(numbers out.$ram.0) <(numbers out.$ram.1) | head -n 20
    fi
done
exit $fail
