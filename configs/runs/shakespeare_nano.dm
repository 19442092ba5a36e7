# The quality run of docs/perf.md (issue 3): nano on tinyshakespeare, 3 000 steps on the CPU,
# seed 1337, the last floor(0.1 n) bytes held out (nanoGPT's split: one more), an eval every 500 steps from step 0,
# then the depth sweep and the n-gram anchors on the same window. Run from the repository root
# with the corpus at ../shared/data/ (edit the :data line for yours):
#   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ./dmsh -b configs/runs/shakespeare_nano.dm
# The session's files land in runs/shakespeare_nano/ (a second run needs that directory gone).
:session shakespeare_nano
:preset nano
:data ../shared/data/tinyshakespeare.txt
:init seed=1337
:eval
:train 3000 log_every=500 eval_every=500 ckpt_every=1000
:eval-depths
:anchors
