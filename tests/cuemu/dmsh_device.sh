#!/usr/bin/env bash
# tests/cuemu/dmsh_device.sh DMSH — the device flows of dmsh on the emulated GPU (make cuemu-check),
# from a QA pass (session 17): a device short of memory is a one-line error that leaves the
# session and its model intact (it ended the process, and an unsaved model was lost); a failed
# move names its cause (it was formatted into itself); `:device cuda` on cuda:0 moves nothing;
# :probe after two moves still says why the activations are gone. And the step times of the
# emulated device are marked as such wherever they are shown or written. And a shape past what
# the CUDA kernels index is refused in one line before anything is allocated for it (check 7).
set -u
DMSH=$(readlink -f "$1")
W=$(mktemp -d /tmp/dmsh_cuemu_dev_XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
cat /usr/include/stdio.h /usr/include/stdlib.h /usr/include/string.h > corpus.txt  # real text, any machine
TINY=":set d=32 H=2 L=2 E=2 k=1 r=8 f=64 engram_rows=257 engram_dim=8 seq=32 batch=4"
fail=0
check() {  # NAME CONDITION-STATUS
    if [ "$2" = 0 ]; then printf '  %-74s PASS\n' "$1"; else printf '  %-74s FAIL\n' "$1"; fail=1; fi
}

# 1. a device whose memory is taken: one error line, the CPU model trained so far saved on the way out
CUEMU_MEM_MB=16 "$DMSH" --norc -e ':preset nano' -e "$TINY" -e ':data corpus.txt' -e ':session full' -e ':init seed=1' \
    -e ':step 2' -e ':device cuda' < /dev/null > out1.txt 2> err1.txt
rc=$?
grep -v '^dmsh: saved ' err1.txt > err1.only
[ "$rc" = 1 ] && [ "$(wc -l < err1.only)" = 1 ] && grep -q "cannot hold cuBLAS's 32 MiB workspace" err1.only && \
    ! grep -q 'CUDA error' err1.txt && [ -s runs/full/ckpt/step-2.ckpt ]
s=$?
check ":device cuda, device memory taken: one error line, the model saved" $s
[ $s = 0 ] || { cat out1.txt err1.txt; }

# 2. a move that does not fit: the cause named once, one line (no allocator chatter), still on the CPU
CUEMU_MEM_MB=40 "$DMSH" --norc -e ':preset nano' -e ':set d=256 batch=1 seq=32' -e ':init seed=1' -e ':device cuda' \
    < /dev/null > out2.txt 2> err2.txt
rc=$?
[ "$rc" = 1 ] && [ "$(wc -l < err2.txt)" = 1 ] && grep -q 'moving the model to cuda:0 failed (cannot allocate .*); it stays on cpu$' err2.txt && \
    [ "$(grep -o 'moving the model' err2.txt | wc -l)" = 1 ]
s=$?
check ":device cuda that does not fit: its cause, one line, the model stays" $s
[ $s = 0 ] || { cat out2.txt err2.txt; }
# 2b. ... and it stays as it was trained: after 2 steps the failed move leaves the state (losses,
# step, every tensor and moment: DMSH_DIGEST) the run without it has (a mutant that rebuilt a
# fresh model and said "it stays on cpu" passed every CPU test until session 40's
# test_device_move; here the real CUDA backend's failed allocation, at the device's size)
CUEMU_MEM_MB=40 DMSH_DIGEST=moved.dig "$DMSH" --norc -e ':preset nano' -e ':set d=256 batch=1 seq=32' -e ':data corpus.txt' \
    -e ':init seed=1' -e ':step 2' -e ':device cuda' < /dev/null > out2b.txt 2> err2b.txt
rc=$?
CUEMU_MEM_MB=40 DMSH_DIGEST=stayed.dig "$DMSH" --norc -e ':preset nano' -e ':set d=256 batch=1 seq=32' -e ':data corpus.txt' \
    -e ':init seed=1' -e ':step 2' < /dev/null > out2c.txt 2> err2c.txt
[ "$rc" = 1 ] && grep -q 'moving the model to cuda:0 failed' err2b.txt && [ -s moved.dig ] && cmp -s moved.dig stayed.dig
s=$?
check ":device cuda that does not fit, after steps: the trained state unchanged" $s
[ $s = 0 ] || { cat out2b.txt err2b.txt; diff moved.dig stayed.dig | head -n 5; }

# 3. cuda:0 again moves nothing; after two moves :probe still says the activations did not move
"$DMSH" --norc -e ':preset nano' -e "$TINY" -e ':data corpus.txt' -e ':init seed=1' -e ':device cuda' -e ':step 1' \
    -e ':device cuda:0' -e ':device cpu' -e ':device cuda' -e ':probe h@1' < /dev/null > out3.txt 2> err3.txt
grep -q '^device cuda:0 (already: nothing moved)' out3.txt && grep -q 'did not move with the model (:device)' err3.txt
s=$?
check ":device cuda:0 on cuda:0 moves nothing; :probe after two moves says why" $s
[ $s = 0 ] || { cat out3.txt err3.txt; }

# 4. step times on the emulated device say so (they read as GPU times: :bench and :show device
# said "cuemu", the step lines and metrics.tsv did not): every step line timed there ends with the
# mark, metrics.tsv marks the row in its column timing (every column before it in place; arms_off after it),
# the CPU's step after the move is unmarked, and -r brings the marks back from the checkpoint
"$DMSH" --norc -e ':preset nano' -e "$TINY" -e ':data corpus.txt' -e ':session emu' -e ':init seed=1' -e ':device cuda' \
    -e ':step 1' -e ':train 2 log_every=1 eval_every=3' -e ':device cpu' -e ':step 1' < /dev/null > out4.txt 2> err4.txt
rc=$?
"$DMSH" --norc -r runs/emu -e ':show metrics' < /dev/null > out4r.txt 2> err4r.txt
rc4r=$?
tag=' [cuemu: ms and tok/s emulated on the CPU, not a GPU'"'"'s]'
ends_tagged() {  # FILE PREFIX-REGEX: the lines that match it and end with the mark
    awk -v t="$tag" -v p="$2" '$0 ~ p && substr($0, length($0) - length(t) + 1) == t' "$1" | wc -l
}
[ "$rc" = 0 ] && [ "$rc4r" = 0 ] && [ "$(ends_tagged out4.txt '^step [0-2] loss .* ms [0-9.]+ tok/s [0-9]+ skipped 0')" = 3 ] && \
    grep -q '^step 3 loss .* skipped 0$' out4.txt && [ "$(grep -c 'cuemu: ms and tok/s' out4.txt)" = 3 ] && \
    head -n 1 runs/emu/metrics.tsv | grep -q $'\tms\ttok_s\tskipped\tbpb\twindow\tdepth\teval_set\ttiming\tarms_off$' && \
    [ "$(awk -F'\t' 'NF != 15' runs/emu/metrics.tsv | wc -l)" = 0 ] && \
    [ "$(awk -F'\t' '$1 == "train" && $2 <= 2 && $14 == "emulated"' runs/emu/metrics.tsv | wc -l)" = 3 ] && \
    [ "$(awk -F'\t' '($1 == "train" && $2 == 3 || $1 == "eval") && $14 == ""' runs/emu/metrics.tsv | wc -l)" = 2 ] && \
    [ "$(ends_tagged out4r.txt '^  step [0-2] loss ')" = 3 ] && grep -q '^  step 3 loss .* skipped 0$' out4r.txt
s=$?
check "step lines and metrics.tsv mark the emulated device's times; -r keeps it" $s
[ $s = 0 ] || { cat out4.txt err4.txt out4r.txt err4r.txt runs/emu/metrics.tsv; }
# 5. :bench on a device: model TFLOP/s and device memory (SPEC §8), the emulation said on the line;
# the memory's numbers too: 0 < now <= peak, and after a round trip to the CPU and back "now" is
# what it was (the buffers freed by the move are no longer counted)
"$DMSH" --norc -e ':preset nano' -e "$TINY" -e ':data corpus.txt' -e ':init seed=1' -e ':device cuda' \
    -e ':bench steps=3' -e ':device cpu' -e ':device cuda' -e ':bench steps=3' < /dev/null > out5.txt 2> err5.txt
grep '^bench cuda:0 \[cuemu: .*\] (float): [0-9.]* ms/step (median of steps .*), [0-9]* tok/s, [0-9.]* TFLOP/s model, MFU .*; device memory [0-9.]* MB now, [0-9.]* MB peak$' out5.txt |
    sed 's/.*device memory \([0-9.]*\) MB now, \([0-9.]*\) MB peak$/\1 \2/' > mem5.txt
[ "$(wc -l < mem5.txt)" = 2 ] && awk 'NR == 1 { n1 = $1 } { if (!($1 > 0 && $1 <= $2)) bad = 1 }
    END { d = $1 - n1; if (d < 0) d = -d; exit bad || d > 0.02 * n1 }' mem5.txt
s=$?
check ":bench on the device: TFLOP/s, memory now <= peak, freed not kept, emulated" $s
[ $s = 0 ] || { cat out5.txt err5.txt mem5.txt; }
# 6. KDA heads wider than a block (d=1056, H=1: head dim 1056 > 1 024 threads): :gen on the device
# ended the process (the decode kernel had one thread per column); it now runs, and at fp32 samples
# the CPU's bytes
"$DMSH" --norc -e ':set d=1056 H=1 L=1 E=1 k=1 r=8 f=64 engram_rows=64 engram_dim=8 seq=16 batch=1 precision=fp32' \
    -e ':init seed=2' -e ':gen "ab" n=12 seed=5' -e ':device cuda' -e ':gen "ab" n=12 seed=5' < /dev/null > out6.txt 2> err6.txt
rc=$?
grep -a '^ab' out6.txt > gen6.txt
[ "$rc" = 0 ] && [ "$(wc -l < gen6.txt)" = 2 ] && [ "$(sed -n 1p gen6.txt)" = "$(sed -n 2p gen6.txt)" ] && \
    [ "$(sed -n 1p gen6.txt | wc -c)" -ge 15 ]
s=$?
check ":gen on the device with 1056-wide KDA heads: the CPU's bytes (fp32)" $s
[ $s = 0 ] || { cat out6.txt err6.txt; }
# 7. shapes past what the CUDA kernels index (kernels/cuda/shape_limits.h: tokens x max(H, engram
# orders, k) <= 2^31 - 2^26, d/H <= 46340): one error line that names the limit and what to lower,
# given before anything is allocated for the shape (each run held to 1 GB of address space; the
# activations of 2^29 tokens would be terabytes), and the session is left as it was. Before the
# check a move or a :set batch= took such a shape onto the device (where a device that could hold
# its activations would have had the kernels' 32-bit row counts wrap), and :init on the device
# tried to allocate an 86 GB model.
limited() { ( ulimit -v 1000000; CUEMU_MEM_MB=64 "$DMSH" --norc "$@" < /dev/null ); }
lim="is more than the CUDA kernels index (at most 260046848 with H=8, 3 engram orders, k=1: tokens x max(H, orders, k) <= 2^31 - 2^26): lower batch or seq"
limited -e ':preset nano' -e "$TINY" -e ':set H=8 seq=8192 batch=65536' -e ':data corpus.txt' -e ':session lim' \
    -e ':init seed=1' -e ':device cuda' > out7.txt 2> err7.txt
rc=$?
grep -v '^dmsh: saved ' err7.txt > err7.only
[ "$rc" = 1 ] && [ "$(wc -l < err7.only)" = 1 ] && [ -s runs/lim/ckpt/step-0.ckpt ] && \
    grep -qF "moving the model to cuda:0 failed (batch x seq = 536870912 tokens $lim); it stays on cpu" err7.only
s=$?
check ":device cuda past the kernels' 32-bit row counts: the limit, one line" $s
[ $s = 0 ] || { cat out7.txt err7.txt; }
# the model left on the CPU trains there, moves at a batch within the limit, decodes on the device;
# a :set batch= past the limit on the device is refused and changes nothing (the resumed session
# still has batch=1)
limited -r runs/lim -e ':set batch=1' -e ':step 1' -e ':device cuda' -e ':gen "ab" n=8 seed=5' \
    -e ':set batch=65536' > out7b.txt 2> err7b.txt
rc=$?
limited -r runs/lim -e ':show config' > out7c.txt 2> err7c.txt
rc7c=$?
grep -v '^dmsh: saved ' err7b.txt > err7b.only
[ "$rc" = 1 ] && [ "$rc7c" = 0 ] && [ "$(wc -l < err7b.only)" = 1 ] && grep -q '^step 0 loss ' out7b.txt && \
    grep -q '^device cuda:0 (the live model moved here' out7b.txt && grep -qa '^ab' out7b.txt && \
    grep -qF -- "-e #5: error: batch x seq = 536870912 tokens $lim" err7b.only && \
    grep -q '^  batch  *1  ' out7c.txt
s=$?
check ":set batch= past the limit on the device: refused, the session unchanged" $s
[ $s = 0 ] || { cat out7b.txt err7b.txt out7c.txt err7c.txt; }
# a head dim past the chunked KDA's 32-bit state index: :init on the device refuses before it
# allocates the model (86 GB of parameters at d=46342, H=1)
limited -e ':device cuda' -e "$TINY" -e ':set d=46342 H=1' -e ':init seed=1' > out7d.txt 2> err7d.txt
rc=$?
[ "$rc" = 1 ] && [ "$(wc -l < err7d.txt)" = 1 ] && \
    grep -qF -- "-e #4: error: head dim d/H = 46342 is more than the CUDA KDA kernels index (at most 46340: a head's state is indexed in 32 bits): raise H or lower d" err7d.txt
s=$?
check ":init on the device with d/H past the KDA's 32-bit index: refused first" $s
[ $s = 0 ] || { cat out7d.txt err7d.txt; }
# 8. -r goes back to the device the session's transcript last chose (QA, session 40: it resumed on
# the CPU, said by a note, and a GPU run went on at the CPU's speed with fp32 products): the
# resumed step runs on the device (its line carries the emulation's mark) and is the uninterrupted
# device run's step, loss, gnorm and eval alike
"$DMSH" --norc -e ':preset nano' -e "$TINY" -e ':data corpus.txt' -e ':session back' -e ':init seed=1' -e ':device cuda' \
    -e ':step 2' < /dev/null > out8.txt 2> err8.txt
"$DMSH" --norc -r runs/back -e ':step 1' -e ':eval' -e ':show device' < /dev/null > out8r.txt 2> err8r.txt
rc=$?
"$DMSH" --norc -e ':preset nano' -e "$TINY" -e ':data corpus.txt' -e ':init seed=1' -e ':device cuda' -e ':step 3' -e ':eval' \
    < /dev/null > out8u.txt 2> err8u.txt
a=$(grep -E '^(step 2 |eval )' out8r.txt | sed 's/ ms .*//; s/ in [0-9.]* s.*//'); b=$(grep -E '^(step 2 |eval )' out8u.txt | sed 's/ ms .*//; s/ in [0-9.]* s.*//')
[ "$rc" = 0 ] && grep -q '^this session last ran on cuda (its transcript' out8r.txt && \
    grep -q '^device cuda:0 (the live model moved here' out8r.txt && grep -q '^device cuda:0 (float engine)' out8r.txt && \
    grep '^step 2 ' out8r.txt | grep -q 'cuemu:' && [ "$(grep -c '' <<< "$a")" = 2 ] && [ "$a" = "$b" ]
s=$?
check "-r goes back to the session's device: the uninterrupted device run's numbers" $s
[ $s = 0 ] || { cat out8r.txt err8r.txt; echo "uninterrupted:"; cat out8u.txt; }
exit $fail
