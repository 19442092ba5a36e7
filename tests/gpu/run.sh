#!/usr/bin/env bash
# tests/gpu/run.sh [all|check|bench] — on a machine with an NVIDIA GPU: build the float engine
# library and dmsh (headless) with the CUDA backend, then
#   check: tests/gpu/parity.cu + parity_optim.cu + parity_fused.cu (every op CPU vs CUDA, pass/fail table),
#          tests/gpu/parity_model.c (:check parity per preset x arms x precision) and
#          tests/gpu/graph_step.c (the step graph's replay = the eager step, two processes)
#   bench: tests/gpu/bench_gpu.c (the issue-5 benchmark table)
# Exits non-zero on any build error or failed row. Put the corpus in shared-data/ (ignored by
# git) to bench on real text. Aimed at < 5 minutes on an H200; each program has a time cap (worst
# case ~10 minutes in all) so a hang cannot eat a whole device lease.
# Env: CUDA_HOME (default /usr/local/cuda), CUDA_ARCH (default sm_90), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
ARCH=${CUDA_ARCH:-sm_90}
JOBS=${JOBS:-$(nproc)}
OUT=build/gpu
# cuBLAS has no static archive in every toolkit (this one ships only libcublas.so): link it
# dynamically with an rpath; cudart stays static as the Makefile has it.
CULIBS="-L$CUDA_HOME/lib64 -lcublas -lcudart_static -ldl -lrt -lpthread -lstdc++ -Wl,-rpath,$CUDA_HOME/lib64"

command -v "$NVCC" >/dev/null || { echo "run.sh: nvcc not found at $NVCC" >&2; exit 2; }
nvidia-smi -L 2>/dev/null || echo "run.sh: nvidia-smi not available (continuing)"
mkdir -p "$OUT"

echo "== make headless: the float engine library and dmsh with the CUDA backend (build/float-headless)"
make -j"$JOBS" --no-print-directory headless DM_REAL=float CUDA_ARCH="$ARCH" CUDALIBS="$CULIBS"
LIB=build/float-headless/libdm.a

echo "== nvcc tests/gpu/parity*.cu ($ARCH); the backend objects are make's (same flags)"
objs=(build/float-headless/cuda/*.o)
pobjs=(); pids=()
for f in tests/gpu/parity*.cu; do
    o="$OUT/$(basename "$f" .cu).o"
    "$NVCC" -arch="$ARCH" -O2 -c "$f" -o "$o" &
    pids+=($!); pobjs+=("$o")
done
for p in "${pids[@]}"; do wait "$p"; done   # each one's status (set -e stops on a failed compile)
"$NVCC" -arch="$ARCH" -o "$OUT/parity" "${pobjs[@]}" "${objs[@]}" $LIB \
    -lcublas -lopenblas -lgomp -lm -Xlinker -rpath -Xlinker "$CUDA_HOME/lib64"

# the engine-level programs: plain C against libdm.a and the CUDA objects
HOSTLIBS="$LIB -lopenblas -lm -fopenmp -L$CUDA_HOME/lib64 -lcublas -lcudart_static -ldl -lrt -lpthread -lstdc++ -Wl,-rpath,$CUDA_HOME/lib64"
for prog in parity_model bench_gpu graph_step; do
    gcc -std=c11 -D_GNU_SOURCE -O2 -I"$CUDA_HOME/include" "tests/gpu/$prog.c" "${objs[@]}" $HOSTLIBS -o "$OUT/$prog"
done

MODE=${1:-all}
status=0
if [ "$MODE" = all ] || [ "$MODE" = check ]; then
    echo "== parity: every op, CPU vs CUDA (tests/gpu/parity.cu)"
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 timeout 120 "./$OUT/parity" || status=1
    echo "== parity: one training step per preset x arms x precision (:check parity, tests/gpu/parity_model.c)"
    timeout 180 "./$OUT/parity_model" || status=1
    echo "== the whole-step CUDA graph: replay = un-captured step bit for bit, two processes (tests/gpu/graph_step.c)"
    timeout 120 "./$OUT/graph_step" || status=1
fi
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
    echo "== bench (tests/gpu/bench_gpu.c)"
    timeout 180 "./$OUT/bench_gpu" 20 || status=1
fi
exit $status
