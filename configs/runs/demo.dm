# make demo: nano trained on the C headers under /usr/include, on one CPU thread (about 1.5
# minutes on a Zen 5 core, 3 on a Zen 3 one), then the depth sweep, the n-gram anchors, a BPB
# plot and a text sample. The session's files (transcript, metrics.tsv, checkpoints, plots)
# land in runs/demo/.
:session demo
:preset nano
:data /usr/include
:init seed=1
:train 3000 log_every=250 eval_every=1000 ckpt_every=1000
:eval-depths
:anchors
:plot bpb
:gen "#include <" n=300 temp=0.7
