#!/usr/bin/env bash
# tests/gpu/run.sh [all|check|bench|build] — on a machine with an NVIDIA GPU: build the float engine
# library and dmsh (headless) with the CUDA backend, then
#   check: tests/gpu/parity.cu + parity_optim.cu + parity_fused.cu (every op CPU vs CUDA, pass/fail table),
#          tests/gpu/parity_model.c (:check parity per preset x arms x precision) and
#          dmsh itself (headless) loading libdmcuda.so for two nano steps, and
#          tests/gpu/graph_step.c (the step graph's replay = the eager step, two processes)
#   bench: tests/gpu/bench_gpu.c (the issue-5 benchmark table)
#   build: only build and link everything (make test runs this on machines without a GPU)
# Exits non-zero on any build error or failed row. Put the corpus in shared-data/ (ignored by
# git) to bench on real text. Aimed at < 5 minutes on an H200; each program has a time cap
# (90/150/30/90/150 s; a hang cannot eat a whole device lease). All caps together (510 s) and
# the build do not fit one 10-minute device command: run `check` and `bench` as two commands
# when a program might hang, the second sent as soon as the first returns (a lent machine stays
# warm 30 s after a call; a later call starts a bare one, minutes of the lease, and builds again);
# a passing `all` takes a fraction of its caps.
# Env: CUDA_HOME (default /usr/local/cuda), CUDA_ARCH (default: this machine's GPU, else sm_90), JOBS (default nproc),
# DM_GPU_LOGS (a folder to copy the programs' full logs into; default the device tool's $OUT when
# that is set, so `check; bench` as two commands keeps both logs, else build/gpu/logs).
set -euo pipefail
# (the device tool's folder of files that come back, which is empty when the command starts: an
# OUT of a user's own, a file or a folder with things in it, is not taken; OUT is this script's below)
DEVICE_OUT=""
if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ -z "$(ls -A "$OUT" 2>/dev/null)" ]; then DEVICE_OUT=$OUT; fi
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
MODE=${1:-all}
case "$MODE" in all|check|bench|build) ;; *) echo "run.sh: unknown mode '$MODE' (all, check, bench or build)" >&2; exit 2;; esac
# the GPU of this machine (compute capability 9.0 -> sm_90), unless CUDA_ARCH says otherwise
# (|| true: under pipefail a missing or failing nvidia-smi would end the script here, silently)
ARCH=${CUDA_ARCH:-$( { nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' | sed -n 's/^\([0-9][0-9]*\)$/sm_\1/p'; } || true)}
ARCH=${ARCH:-sm_90}
JOBS=${JOBS:-$(nproc)}
OUT=build/gpu
if ! command -v "$NVCC" >/dev/null; then  # not where CUDA_HOME says: the one on PATH
    NVCC=$(command -v nvcc || true)
    [ -n "$NVCC" ] || { echo "run.sh: nvcc not found (CUDA_HOME=$CUDA_HOME, nor on PATH)" >&2; exit 2; }
    CUDA_HOME=$(dirname "$(dirname "$NVCC")")
fi
# What the build needs from the machine, all said at once in seconds (no lent machine has been
# seen with make, or with cuBLAS's unversioned link: a missing one must not cost the first call
# a minute of building): exit 2 with the list (QA, session 35)
# make: the carried package's (shared-data/debs/make_*.deb, unpacked under /tmp) when the machine has none
if ! command -v make >/dev/null && ls shared-data/debs/make_*.deb >/dev/null 2>&1 && command -v dpkg >/dev/null; then
    mk=/tmp/dm-make
    rm -rf "$mk" && mkdir -p "$mk" && dpkg -x "$(ls shared-data/debs/make_*.deb | head -n1)" "$mk"
    export PATH="$mk/usr/bin:$PATH"
    echo "run.sh: make from the carried package ($mk/usr/bin/make)"
fi
miss=""
for t in make gcc ar timeout; do command -v "$t" >/dev/null || miss="$miss $t"; done
[ -e "$CUDA_HOME/lib64/libcudart_static.a" ] || miss="$miss $CUDA_HOME/lib64/libcudart_static.a"
# cuBLAS: the unversioned link, else the versioned library by its name (as OpenBLAS is linked)
CUBLAS=-lcublas
if [ ! -e "$CUDA_HOME/lib64/libcublas.so" ]; then
    v=$(cd "$CUDA_HOME/lib64" 2>/dev/null && ls libcublas.so.[0-9]* 2>/dev/null | sort -V | tail -n1 || true)
    if [ -n "$v" ]; then CUBLAS="-l:$v"; echo "run.sh: no libcublas.so link: linking $v by name"; else miss="$miss $CUDA_HOME/lib64/libcublas.so*"; fi
fi
if [ -n "$miss" ]; then echo "run.sh: missing on this machine:$miss (nothing built)" >&2; exit 2; fi
# cuBLAS has no static archive in every toolkit (this one ships only libcublas.so): link it
# dynamically with an rpath; cudart stays static as the Makefile has it.
CULIBS="-L$CUDA_HOME/lib64 $CUBLAS -lcudart_static -ldl -lrt -lpthread -lstdc++ -Wl,-rpath,$CUDA_HOME/lib64"

# the card, its memory and the driver: benchmark numbers are this card's own (docs/testing.md)
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null \
    || echo "run.sh: nvidia-smi not available (continuing)"
"$NVCC" --version 2>/dev/null | tail -n 1 || true
# the one library the build needs from the machine that no lent device has been seen to lack or
# have: said at once (seconds), not after the build fails at its link. The fallback: the Debian
# packages carried in shared-data/debs (docs/testing.md), unpacked under /tmp, never into /
# (DM_BLAS_FROM_DEBS=1 takes them even where the machine has its own: how the fallback is tried)
# (grep without -q: under pipefail a grep that stops reading early fails ldconfig with SIGPIPE)
# (a library on LIBRARY_PATH counts too: ldconfig's cache does not list it)
blas_on_path() { local d; IFS=: read -ra ds <<< "${LIBRARY_PATH:-}"; for d in "${ds[@]}"; do ls "$d"/libopenblas.so* >/dev/null 2>&1 && return 0; done; return 1; }
if { command -v ldconfig >/dev/null && ! ldconfig -p 2>/dev/null | grep 'libopenblas\.so' >/dev/null && ! blas_on_path; } || [ "${DM_BLAS_FROM_DEBS:-0}" = 1 ]; then
    if ls shared-data/debs/libopenblas0*.deb >/dev/null 2>&1 && command -v dpkg >/dev/null; then
        ob=/tmp/dm-openblas
        rm -rf "$ob" && mkdir -p "$ob"
        for f in shared-data/debs/*.deb; do dpkg -x "$f" "$ob"; done
        obl="$ob/usr/lib/x86_64-linux-gnu"
        export LIBRARY_PATH="$obl/openblas-pthread:$obl${LIBRARY_PATH:+:$LIBRARY_PATH}"
        export LD_LIBRARY_PATH="$obl/openblas-pthread:$obl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "run.sh: OpenBLAS from the carried packages ($(ls shared-data/debs | tr '\n' ' '))-> $obl"
    else
        echo "run.sh: no libopenblas.so* on this machine and no shared-data/debs/libopenblas0*.deb carried: the engine links"
        echo "  OpenBLAS (the CPU reference side); docs/testing.md says how to carry it (nothing built)" >&2
        exit 2
    fi
else
    echo "run.sh: OpenBLAS: this machine's ($( { ldconfig -p 2>/dev/null | grep 'libopenblas\.so' | head -n1 | sed 's/.*=> //'; } || true)${LIBRARY_PATH:+; LIBRARY_PATH=$LIBRARY_PATH})"
fi
[ -f shared-data/tinyshakespeare.txt ] && echo "run.sh: corpus shared-data/tinyshakespeare.txt" \
    || echo "run.sh: no shared-data/tinyshakespeare.txt carried: the bench runs on generated text (its data: line says so), dmsh on docs/decisions.md"
mkdir -p "$OUT"

# Full logs: build/gpu/logs, or straight into $DM_GPU_LOGS when set (the device tool's $OUT: the
# files come back even if the command is killed at its time limit)
LOGS=${DM_GPU_LOGS:-${DEVICE_OUT:-build/gpu/logs}}
mkdir -p "$LOGS"
BLAS=$(make -s --no-print-directory print-blaslib)   # -lopenblas, or -l:libopenblas.so.0 without the dev symlink
echo "== make headless: the float engine library and dmsh with the CUDA backend (build/float-headless; log $LOGS/build.log)"
make -j"$JOBS" --no-print-directory headless DM_REAL=float CUDA_ARCH="$ARCH" NVCC="$NVCC" CUDA_HOME="$CUDA_HOME" \
    CUDALIBS="$CULIBS" > "$LOGS/build.log" 2>&1 || { tail -n 40 "$LOGS/build.log"; exit 1; }
LIB=build/float-headless/libdm.a

objs=(build/float-headless/cuda/*.o)
if [ "$MODE" != bench ]; then  # (bench runs none of them: device seconds)
echo "== nvcc tests/gpu/parity*.cu ($ARCH); the backend objects are make's (same flags)"
pobjs=(); pids=()
for f in tests/gpu/parity*.cu; do
    o="$OUT/$(basename "$f" .cu).o"
    "$NVCC" -arch="$ARCH" -O2 -c "$f" -o "$o" &
    pids+=($!); pobjs+=("$o")
done
for p in "${pids[@]}"; do wait "$p"; done   # each one's status (set -e stops on a failed compile)
"$NVCC" -arch="$ARCH" -o "$OUT/parity" "${pobjs[@]}" "${objs[@]}" $LIB \
    $CUBLAS $BLAS -lgomp -lm -Xlinker -rpath -Xlinker "$CUDA_HOME/lib64"
fi

# the engine-level programs: plain C against libdm.a and the CUDA objects
HOSTLIBS="$LIB $BLAS -lm -fopenmp -L$CUDA_HOME/lib64 $CUBLAS -lcudart_static -ldl -lrt -lpthread -lstdc++ -Wl,-rpath,$CUDA_HOME/lib64"
# CUPTI (the benchmark's busy fraction) when the toolkit has it; without it that column says n/a
CUPTI=""
for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/extras/CUPTI/lib64"; do
    for inc in "$CUDA_HOME/include" "$CUDA_HOME/extras/CUPTI/include"; do
        if [ -z "$CUPTI" ] && [ -f "$inc/cupti.h" ] && [ -e "$d/libcupti.so" ]; then
            CUPTI="-DDM_HAVE_CUPTI -I$inc -L$d -lcupti -Wl,-rpath,$d"
        fi
    done
done
progs="parity_model bench_gpu graph_step"
[ "$MODE" = bench ] && progs=bench_gpu
names=${progs// /,}; [ "$MODE" = bench ] || names="{$names}"
echo "== gcc tests/gpu/$names.c (CUPTI: ${CUPTI:-not found})"
for prog in $progs; do
    extra=""
    [ "$prog" = bench_gpu ] && extra=$CUPTI
    gcc -std=c11 -D_GNU_SOURCE -O2 -I"$CUDA_HOME/include" "tests/gpu/$prog.c" "${objs[@]}" $HOSTLIBS $extra -o "$OUT/$prog"
done

if [ "$MODE" = build ]; then  # make test (cuda-check) on machines without a GPU: the script builds and links
    echo "== run.sh build: every GPU program built and linked ($OUT/parity, parity_model, bench_gpu, graph_step)"
    exit 0
fi
status=0
# Each program's whole output goes to $LOGS/NAME.log; the console gets the FAIL rows, the short
# programs in full, and one summary table at the end — a long parity listing cannot push the
# results out of a truncated console tail.
summary=()
run_prog() {  # NAME CAP_SECONDS FULL(0|1) COMMAND...
    local name=$1 cap=$2 full=$3 rc=0 t0=$SECONDS
    shift 3
    timeout -k 10 "$cap" "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
    if [ "$full" = 1 ]; then cat "$LOGS/$name.log"
    else grep -w FAIL "$LOGS/$name.log" | head -n 40 || true; tail -n 3 "$LOGS/$name.log"; fi
    local pass fail
    pass=$(grep -c -w PASS "$LOGS/$name.log" || true)
    # (an "error:" line is a failed row too: parity_model's, a bench case's, dmsh's)
    fail=$(grep -c -w -e FAIL -e 'error:' "$LOGS/$name.log" || true)
    local what="rc=$rc"
    { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && what="TIMEOUT (${cap}s)"
    summary+=("$(printf '%-13s %-16s %5s PASS %4s FAIL %5ss' "$name" "$what" "$pass" "$fail" $((SECONDS - t0)))")
    # a FAIL or error: row fails the run even if its program exited 0 (not trusted to: QA, session 36)
    { [ "$rc" = 0 ] && [ "$fail" = 0 ]; } || status=1
}
if [ "$MODE" = all ] || [ "$MODE" = check ]; then
    echo "== parity: every op, CPU vs CUDA (tests/gpu/parity*.cu)"
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 run_prog parity 90 0 "./$OUT/parity"
    echo "== parity: one training step per preset x arms x precision (:check parity, tests/gpu/parity_model.c)"
    run_prog parity_model 150 1 "./$OUT/parity_model"
    echo "== dmsh itself on the GPU: libdmcuda.so loaded by :device cuda, four nano steps (two eager, a capture, a replay)"
    corpus=shared-data/tinyshakespeare.txt
    [ -f "$corpus" ] || corpus=docs/decisions.md   # (any text: a few steps of nano)
    run_prog dmsh_cuda 30 1 ./build/float-headless/dmsh --norc -e ":device cuda; :show device; :preset nano; :data $corpus; :init; :step 4; :show arms"
    echo "== the whole-step CUDA graph: replay = un-captured step bit for bit, two processes (tests/gpu/graph_step.c)"
    run_prog graph_step 90 1 "./$OUT/graph_step"
fi
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
    echo "== bench (tests/gpu/bench_gpu.c)"
    run_prog bench_gpu 150 1 "./$OUT/bench_gpu" 20
fi
echo "== summary (full logs: $LOGS/)"
for line in "${summary[@]}"; do echo "$line"; done
exit $status
