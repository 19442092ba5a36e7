# dmsh — build, test, bench. `make test` and `make demo` install missing Debian packages first.
#   make                 dmsh + the engine library (float)
#   make DM_REAL=double  the double-precision engine (used by the gradient tests)
#   make test            every test, float and double builds (cmocka)
#   make bench           CPU benchmark (not a test)
#   make headless        dmsh without readline/ncurses/PNG (machines without those headers)
#   make demo            the README's main job on the embedded default (nano on the C headers in /usr/include)
#   make cuemu           the CUDA backend's own sources built for the CPU (tests/cuemu; no GPU)
#   make cuemu-check     the GPU test programs on that emulated device (make test runs it too)
#   make cuda-check      compile every .cu and link the device script's programs (needs nvcc)
#   make gpu-check       on a GPU machine: tests/gpu/run.sh check (parity, KDA, graph replay)
#   make gpu-bench       on a GPU machine: tests/gpu/run.sh bench (the issue-5 table)
#   make spec-forward    the independent SPEC forward check (tests/spec_forward)
#   make spec-optim      the independent SPEC optimizer-step check (tests/spec_optim)
#   make deps            install the missing Debian packages;  make clean  remove build/
#   CUDA_ARCH=sm_90      choose the GPU architecture (default: the build machine's, else sm_90)

# (make's own default CC is cc: `CC ?= gcc` would never apply)
ifeq ($(origin CC),default)
  CC := gcc
endif
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
DM_REAL ?= float
# OPT: -march=native builds for this machine's CPU (here AVX-512): such a dmsh copied to a CPU
# without those instructions refuses to start (repl/cpu_check.c); OPT="-O3 -march=x86-64-v3"
# builds one that runs on any x86-64 with AVX2 and FMA (README)
OPT     ?= -O3 -march=native
# -ffp-contract=fast: ISO C mode (-std=c11) would otherwise forbid fusing a*b + c into one FMA in
# the element-wise loops (measured: -3..4 % of a nano step); results stay a pure function of
# the binary (and the GEMM kernel's FMAs are explicit intrinsics either way)
# -fno-math-errno -fno-trapping-math: no value changes (nothing reads errno or the FP flags);
# they let sqrt vectorise inline in AdamW / Adam (measured: optimizer 6.7 -> 6.25 ms at nano)
CFLAGS  := -std=c11 -D_GNU_SOURCE $(OPT) -ffp-contract=fast -fno-math-errno -fno-trapping-math -g -Wall -Wextra -Wno-unused-parameter -fopenmp
# OpenBLAS: -lopenblas needs the development symlink (libopenblas-dev); a machine with only the
# runtime library (libopenblas.so.0, e.g. the lent GPU machine) links it by its file name.
BLASLIB := $(shell for l in -lopenblas -l:libopenblas.so.0; do echo 'int main(void){return 0;}' | \
             $(CC) -x c - $$l -o /dev/null 2>/dev/null && { echo $$l; exit 0; }; done; echo -lopenblas)
LDLIBS  := $(BLASLIB) -lm -fopenmp
ifeq ($(DM_REAL),double)
  CFLAGS += -DDM_DOUBLE
else ifneq ($(DM_REAL),float)
  $(error DM_REAL must be float or double, not '$(DM_REAL)')
endif

ifeq ($(HEADLESS),0)
  override HEADLESS :=
endif
B        := build/$(DM_REAL)$(if $(HEADLESS),-headless)
ENGINE   := $(wildcard engine/*.c)
KERNELS  := $(wildcard kernels/*.c) $(wildcard kernels/cpu/*.c) $(wildcard sessions/*.c)
LIBOBJ   := $(ENGINE:%.c=$(B)/%.o) $(KERNELS:%.c=$(B)/%.o) $(B)/presets_gen.o $(B)/repl/complete.o
HEADERS  := $(wildcard engine/*.h kernels/*.h kernels/cpu/*.h repl/*.h sessions/*.h)
TESTS    := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))
# PNG charts (viz/, :plot): the stb headers of libstb-dev; without them (or HEADLESS=1) dmsh
# still builds and :plot says why.
VIZ      := $(wildcard viz/*.c)
LIBOBJ   += $(VIZ:%.c=$(B)/%.o)
HEADERS  += $(wildcard viz/*.h)
ifeq ($(HEADLESS)$(wildcard /usr/include/stb/stb_image_write.h),/usr/include/stb/stb_image_write.h)
  CFLAGS += -DDM_HAVE_PNG=1 -I/usr/include/stb
endif
ifneq ($(HEADLESS),)
  CFLAGS += -DDM_HEADLESS   # (the reason :plot gives: viz/png.h)
endif

.PHONY: all lib test headless-check test-float test-double bench deps cuda-check clean demo dmsh headless print-blaslib spec-forward spec-optim test-sgemm-avx2
all: lib dmsh
print-blaslib:  # the OpenBLAS link flag this machine takes (tests/gpu/run.sh links with it)
	@echo $(BLASLIB)

# The prompt: readline when its headers exist, else the plain line reader (the GPU machine has
# neither readline nor ncurses headers); the :train panel likewise (panel.c is a stub without).
# HEADLESS=1 forces the plain build.
REPL    := repl/cpu_check.c repl/parse.c repl/commands.c repl/cmd_inspect.c repl/cmd_state.c repl/main.c repl/panel.c repl/replay.c repl/cmd_verify.c repl/cmd_config.c
REPLLIBS :=
ifeq ($(HEADLESS)$(wildcard /usr/include/readline/readline.h),/usr/include/readline/readline.h)
  REPL     += repl/interactive_readline.c
  REPLLIBS += -lreadline
  CFLAGS   += -DDM_HAVE_READLINE
else
  REPL     += repl/interactive_plain.c
endif
ifeq ($(HEADLESS),)
  ifneq ($(wildcard /usr/include/ncursesw/curses.h),)
    REPLLIBS += -lncursesw
    CFLAGS   += -DDM_HAVE_NCURSES -DDM_NCURSESW
  else ifneq ($(wildcard /usr/include/ncurses.h),)
    REPLLIBS += -lncurses
    CFLAGS   += -DDM_HAVE_NCURSES
  endif
endif
REPL    += repl/cmd_plot.c
REPLOBJ := $(REPL:%.c=$(B)/%.o)

# ./dmsh is the interactive float build; a headless or double build links it only when there is
# none yet (make test builds both, and left ./dmsh the headless one: no PNG, readline or panel)
dmsh: $(B)/dmsh
ifeq ($(HEADLESS)$(DM_REAL),float)
	@ln -sf $(B)/dmsh dmsh
else
	@[ -e dmsh ] || ln -sf $(B)/dmsh dmsh
endif

# The CUDA backend: when nvcc exists, built as $(B)/libdmcuda.so beside dmsh (cudart static inside
# it, cuBLAS by rpath) and loaded by the first :device cuda (kernels/cuda/backend_dl.c): linked
# in, cuBLAS loaded at every start-up (0.13 s and 221 MB RSS for `dmsh -e :quit`, 0.00 s and
# 3 MB without). -rdynamic: the library's calls into the engine's guard bind to dmsh's own.
# Without nvcc a stub answers ":device cuda" with the reason.
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
ifneq ($(NVCC),)
  CUDAOBJ  := $(patsubst kernels/cuda/%.cu,$(B)/cuda/%.o,$(wildcard kernels/cuda/*.cu))
  CUDALIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart_static -ldl -lrt -lpthread -lstdc++
  CUDASO   := $(B)/libdmcuda.so
  DMSHCUDA := $(B)/kernels/cuda/backend_dl.o
  DMSHLINK := -rdynamic -ldl
else
  CUDASO   :=
  DMSHCUDA := $(B)/kernels/cuda/backend_none.o
  DMSHLINK :=
endif

# -fPIC: the objects go into libdmcuda.so (and link as they are into the GPU test programs).
# $(B)/cuda/flags holds the nvcc command line: a change of it (CUDA_ARCH, a flag) rebuilds the
# objects, an edit elsewhere in this Makefile does not (every .cu is minutes on 2 cores)
NVCCFLAGS = -arch=$(CUDA_ARCH) -O2 -Xcompiler -fPIC $(if $(filter double,$(DM_REAL)),-DDM_DOUBLE)
# (written with the other stamps, below)
$(B)/cuda/%.o: kernels/cuda/%.cu $(B)/cuda/flags $(wildcard kernels/*.h) $(wildcard kernels/cuda/*.cuh) $(wildcard kernels/cuda/*.h) $(wildcard kernels/cpu/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# -Bsymbolic: the library's own symbols bind inside it (backend_cuda is also dmsh's loader's name)
$(B)/libdmcuda.so: $(CUDAOBJ)
	$(CC) -shared -Wl,-Bsymbolic -o $@ $(CUDAOBJ) $(CUDALIBS) -lm

# (the library is order-only: a rebuilt library needs no relink of dmsh)
$(B)/dmsh: $(REPLOBJ) $(B)/libdm.a $(DMSHCUDA) $(B)/cflags $(B)/objs | $(CUDASO)
	$(CC) $(CFLAGS) $(REPLOBJ) $(DMSHCUDA) -o $@ $(B)/libdm.a $(LDLIBS) $(REPLLIBS) $(DMSHLINK)

lib: $(B)/libdm.a

$(B)/%.o: %.c $(HEADERS) Makefile $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/presets_gen.c: $(wildcard configs/*.dm) $(B)/presets.list tools/embed_presets.sh
	@mkdir -p $(B)
	sh tools/embed_presets.sh $(sort $(wildcard configs/*.dm)) > $@

$(B)/presets_gen.o: $(B)/presets_gen.c $(B)/cflags
	$(CC) $(CFLAGS) -c $< -o $@

# (made anew: an object whose source is gone leaves the archive)
$(B)/libdm.a: $(LIBOBJ) $(B)/objs
	@rm -f $@
	ar rcs $@ $(LIBOBJ)

$(B)/tests/%: tests/%.c $(wildcard tests/*.h) $(wildcard kernels/cuda/*.h) $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS)

# test_plot drives :plot through a Shell, so it links the handler too; --wrap lets it see the
# charts :plot hands to viz (subtitles, legend entries) on their way to the PNG
$(B)/tests/test_plot: tests/test_plot.c tests/testutil.h $(B)/repl/cmd_plot.o $(B)/libdm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(B)/repl/cmd_plot.o -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=viz_charts_png

# test_plot_series records the series :plot hands viz (--wrap; nothing drawn): the numbers, not the pixels
$(B)/tests/test_plot_series: tests/test_plot_series.c tests/testutil.h $(B)/repl/cmd_plot.o $(B)/libdm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(B)/repl/cmd_plot.o -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=viz_charts_png

# test_probe_cmd drives :probe through a Shell (cmd_inspect.o linked in); --wrap lets it see what a
# histogram is drawn with (bins, log counts, the values), and nothing is drawn
$(B)/tests/test_probe_cmd: tests/test_probe_cmd.c tests/testutil.h $(B)/repl/cmd_inspect.o $(B)/libdm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(B)/repl/cmd_inspect.o -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=viz_hist_png

# test_data (and test_data_edges) list a directory they may not search: --wrap makes lstat fail as it does for a
# non-root user under a directory of mode r-- (root searches any directory)
$(B)/tests/test_data: tests/test_data.c $(wildcard tests/*.h) $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=lstat
$(B)/tests/test_data_edges: tests/test_data_edges.c $(wildcard tests/*.h) $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=lstat

# test_run_files renames a session's directory between a checkpoint and its LATEST: --wrap puts
# the rename inside session_transcript_ckpt, which session_save calls between the two, and
# flock fails as on a file system without it; fsync and rename are recorded (LATEST synced before its rename)
$(B)/tests/test_run_files: tests/test_run_files.c $(wildcard tests/*.h) $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=session_transcript_ckpt -Wl,--wrap=flock \
	  -Wl,--wrap=fsync -Wl,--wrap=rename

# test_session_gone deletes a session's directory in the middle of a save (--wrap: before the
# checkpoint's rename (after its fsync), and inside session_transcript_ckpt, between the checkpoint and its LATEST)
$(B)/tests/test_session_gone: tests/test_session_gone.c $(wildcard tests/*.h) $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=session_transcript_ckpt -Wl,--wrap=fsync

# test_save_nomem fails the allocations of a checkpoint's and a snapshot's host copy (--wrap=malloc)
$(B)/tests/test_save_nomem: tests/test_save_nomem.c $(wildcard tests/*.h) $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=malloc

# test_ckpt records fsync and rename (--wrap): a checkpoint's data is synced before its rename,
# its directory after
$(B)/tests/test_ckpt: tests/test_ckpt.c $(wildcard tests/*.h) $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -Wl,--wrap=fsync -Wl,--wrap=rename

# test_cli_backend_dl compiles the CUDA backend's loader in (kernels/cuda/backend_dl.c: dlopen, no
# CUDA), so its refusals are tested on a machine without nvcc too
$(B)/tests/test_cli_backend_dl: tests/test_cli_backend_dl.c kernels/cuda/backend_dl.c $(wildcard tests/*.h) $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS) -ldl

# test_complete reads completed paths back with the command language's own parser
$(B)/tests/test_complete: tests/test_complete.c tests/testutil.h $(B)/repl/parse.o $(B)/libdm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(B)/repl/parse.o -o $@ $(B)/libdm.a -lcmocka $(LDLIBS)

# test_replay_digest writes --replay's digest in process (repl/replay.o, outside libdm.a)
$(B)/tests/test_replay_digest: tests/test_replay_digest.c $(wildcard tests/*.h) $(B)/repl/replay.o $(B)/libdm.a $(B)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(B)/repl/replay.o -o $@ $(B)/libdm.a -lcmocka $(LDLIBS)

$(B)/bench_cpu: tests/bench_cpu.c $(B)/libdm.a
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a $(LDLIBS)

# --- tests -------------------------------------------------------------------------------
# Tests run with one BLAS thread so results and timings do not depend on the machine's cores,
# and passive OpenMP waits: with actively spinning waits, two test runs sharing a small machine
# each stall at every barrier on a descheduled thread (seen here: a 1-minute test took 26).
# DMSH_NVIDIA_GPUS_DIR: no GPU listed, so :init's "a GPU is visible" note (repl/cmd_state.c) is
# not in the output the tests compare on a machine that has one (test_cli_device sets its own).
TESTENV := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive DMSH_NVIDIA_GPUS_DIR=/nonexistent
test: deps
	$(MAKE) --no-print-directory test-float DM_REAL=float
	$(MAKE) --no-print-directory test-double DM_REAL=double
	$(MAKE) --no-print-directory cuda-check
	$(MAKE) --no-print-directory headless-check
	$(MAKE) --no-print-directory cuemu-check
	@echo "make test: all test programs passed$(if $(NVCC),, (no nvcc on this machine: the .cu files were not compiled))"

# The headless dmsh (the plain prompt the GPU machine builds; cuda-check's run.sh build made it
# when nvcc exists): its start-up files, errors, Ctrl-C and Ctrl-D at its prompt, through a pty
headless-check:
	@$(MAKE) --no-print-directory headless DM_REAL=float
	@echo "== the headless prompt: ~/.dmshrc and ./.dmshrc, errors, Ctrl-C, Ctrl-D (test_repl_pty against build/float-headless/dmsh)"
	@$(MAKE) --no-print-directory build/float/tests/test_repl_pty build/float/tests/test_repl_pty_run DM_REAL=float
	@DMSH_PTY_BIN=build/float-headless/dmsh $(TESTENV) ./build/float/tests/test_repl_pty
	@DMSH_PTY_BIN=build/float-headless/dmsh $(TESTENV) ./build/float/tests/test_repl_pty_run

test-float test-double: $(addprefix $(B)/tests/,$(TESTS)) $(B)/dmsh
	@# (the float run's :check grad hands off to the double dmsh beside it: built first, so
	@# test_cli_check runs the real one too: a float-to-double hand-off that failed every check
	@# passed a test run where only the stand-in saw it, session 41)
	@if [ "$(DM_REAL)" = float ]; then $(MAKE) --no-print-directory build/double/dmsh DM_REAL=double; fi
	@set -e; for t in $(TESTS); do echo "== $(DM_REAL) $$t"; s=$$(date +%s); $(TESTENV) ./$(B)/tests/$$t; \
	  echo "== $(DM_REAL) $$t: passed in $$(( $$(date +%s) - s )) s"; done
	@if [ "$(DM_REAL)" = double ]; then $(MAKE) --no-print-directory spec-forward DM_REAL=double; fi
	@if [ "$(DM_REAL)" = double ]; then $(MAKE) --no-print-directory spec-optim DM_REAL=double; fi
	@if [ "$(DM_REAL)" = float ]; then $(MAKE) --no-print-directory test-sgemm-avx2 DM_REAL=float; fi

# Where the compiler targets AVX-512, sgemm.c runs its 6x32 tiles; machines without AVX-512 run
# the 6x16 AVX2 tiles. Both must stay tested wherever the tests run: test_sgemm again, against
# sgemm.c built with AVX-512 off (a plain program, nothing else of the library in it), and the
# two builds against each other bit for bit (tests/sgemm_isa_same.c).
HAVE_AVX512 := $(shell $(CC) $(CFLAGS) -dM -E -x c /dev/null 2>/dev/null | grep -c __AVX512F__)
test-sgemm-avx2: $(B)/libdm.a
ifneq ($(HAVE_AVX512),0)
	@mkdir -p $(B)/tests
	$(CC) $(CFLAGS) -mno-avx512f tests/test_sgemm.c kernels/cpu/sgemm.c -o $(B)/tests/test_sgemm_avx2 -lcmocka $(LDLIBS)
	@echo "== $(DM_REAL) test_sgemm (AVX2 tiles)"; $(TESTENV) ./$(B)/tests/test_sgemm_avx2
	$(CC) $(CFLAGS) -mno-avx512f -Ddm_sgemm=dm_sgemm_avx2 -Ddm_ssyrk_upper=dm_ssyrk_upper_avx2 \
	  -Ddm_sgemm_bf16ops=dm_sgemm_bf16ops_avx2 -Ddm_emulate_bf16=dm_emulate_bf16_avx2 \
	  -c kernels/cpu/sgemm.c -o $(B)/tests/sgemm_avx2.o
	$(CC) $(CFLAGS) tests/sgemm_isa_same.c $(B)/tests/sgemm_avx2.o $(B)/kernels/cpu/sgemm.o -o $(B)/tests/sgemm_isa_same $(LDLIBS)
	@echo "== $(DM_REAL) sgemm_isa_same"; $(TESTENV) ./$(B)/tests/sgemm_isa_same
else
	@echo "== test_sgemm (AVX2 tiles): the default build already runs them (no AVX-512 here)"
endif

# The forward pass against an independent pure-Python model written from SPEC.md §1-§3
# (tests/spec_forward): 24 tiny configs and arm settings, losses and activations within 1e-10 in
# double; then deliberate misreadings of the SPEC in the Python side, each of which must be caught.
SPEC_MUTATIONS := eps_outside pad0 hash_newest_first write_then_decay A_not_exp k1_renorm ties_high no_ybar
spec-forward: $(B)/libdm.a
	@mkdir -p $(B)/tests
	$(CC) $(CFLAGS) -I. tests/spec_forward/driver.c -o $(B)/tests/spec_forward_driver $(B)/libdm.a $(LDLIBS)
	$(TESTENV) python3 tests/spec_forward/compare.py --driver $(B)/tests/spec_forward_driver --out $(B)/spec_forward
	@set -e; for mu in $(SPEC_MUTATIONS); do \
	  out=$$($(TESTENV) python3 tests/spec_forward/compare.py --driver $(B)/tests/spec_forward_driver --out $(B)/spec_forward --mutate $$mu) \
	    || { echo "$$out"; exit 1; }; echo "$$out" | tail -1; done

# One optimizer step against an independent pure-Python step written from SPEC.md §4 (and
# decisions.md where it is open; tests/spec_optim): 22 variants (schedule phases, opt=adamw,
# muon_colrow, clip binding or not, arms off, the NaN firewall, the retraction), every update,
# moment, table row count and the logged rates and norm within 1e-10 in double; then deliberate
# misreadings of §4 in the Python side, each of which must be caught.
SPEC_OPTIM_MUTATIONS := no_nesterov ns_cubic scale_ratio wd_on_1d table_global_t clip_norm_no_tables \
  warmup_off_by_one cosine_to_zero adamw_no_bias_correction wd_coupled muon_wd_adamw_lr tables_dense \
  colrow_rows_first firewall_off frob_no_eps retract_bare_frob
spec-optim: $(B)/libdm.a
	@mkdir -p $(B)/tests
	$(CC) $(CFLAGS) -I. tests/spec_optim/driver.c -o $(B)/tests/spec_optim_driver $(B)/libdm.a $(LDLIBS)
	$(TESTENV) python3 tests/spec_optim/compare.py --driver $(B)/tests/spec_optim_driver --out $(B)/spec_optim
	$(TESTENV) python3 tests/spec_optim/compare.py --driver $(B)/tests/spec_optim_driver --out $(B)/spec_optim \
	  --mutate $(shell echo $(SPEC_OPTIM_MUTATIONS) | tr ' ' ',')

bench: deps
	$(MAKE) --no-print-directory $(B)/bench_cpu
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ./$(B)/bench_cpu

# --- CUDA: compiled whenever nvcc exists (CI has nvcc and no GPU: this proves the .cu build) --
# The GPU of this machine (nvidia-smi's compute capability: 9.0 -> sm_90), else sm_90 (the H200
# the project targets; CI has no GPU). Evaluated once.
ifeq ($(origin CUDA_ARCH),undefined)
  CUDA_ARCH := $(or $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' | sed -n 's/^\([0-9][0-9]*\)$$/sm_\1/p'),sm_90)
endif
CUDA_SRC  := $(wildcard kernels/cuda/*.cu) $(wildcard tests/gpu/*.cu)

# Stamps: files whose content is what the build was configured with, rewritten (when the make
# is read, so `make -n` tells the truth) only when that changes. The objects depend on them, so
# a header that appeared since (libstb-dev, libncurses-dev installed: the PNG and panel code go
# in), another OPT= or CC=, nvcc found or gone, or a preset file added or removed rebuilds what
# it changes, a source file added or removed relinks; an unchanged tree rebuilds nothing.
# Goals that build nothing (print-blaslib, clean, deps) leave them as they are (`make
# print-blaslib CUDA_ARCH=sm_80` made the next make recompile every .cu); nvcc by its real path
# (tests/gpu/run.sh names /usr/local/cuda/bin/nvcc, PATH may hold the versioned directory: one
# make test compiled the headless .cu objects twice). A stamp a `make clean` removed while the
# same make goes on (`make clean lib`) is written again by its rule.
STAMP_CFLAGS  := $(CC) $(CFLAGS) | $(REPLLIBS) $(DMSHCUDA) $(DMSHLINK) | $(LDLIBS)
STAMP_PRESETS := $(sort $(wildcard configs/*.dm))
STAMP_OBJS    := $(LIBOBJ) | $(REPLOBJ)
STAMP_CUDA    := $(or $(realpath $(NVCC)),$(NVCC)) $(NVCCFLAGS)
dm_stamp = $(shell mkdir -p $(dir $(1)) && { printf '%s\n' '$(2)' | cmp -s - $(1) || printf '%s\n' '$(2)' > $(1); })
ifneq ($(filter-out print-blaslib clean deps,$(or $(MAKECMDGOALS),all)),)
$(call dm_stamp,$(B)/cflags,$(STAMP_CFLAGS))
$(call dm_stamp,$(B)/presets.list,$(STAMP_PRESETS))
$(call dm_stamp,$(B)/objs,$(STAMP_OBJS))
ifneq ($(NVCC),)
$(call dm_stamp,$(B)/cuda/flags,$(STAMP_CUDA))
endif
endif
$(B)/cflags: ; @mkdir -p $(@D) && printf '%s\n' '$(STAMP_CFLAGS)' > $@
$(B)/presets.list: ; @mkdir -p $(@D) && printf '%s\n' '$(STAMP_PRESETS)' > $@
$(B)/objs: ; @mkdir -p $(@D) && printf '%s\n' '$(STAMP_OBJS)' > $@
$(B)/cuda/flags: ; @mkdir -p $(@D) && printf '%s\n' '$(STAMP_CUDA)' > $@
cuda-check:
ifneq ($(NVCC),)
	@mkdir -p build/cuda
	@set -e; for f in $(CUDA_SRC); do echo "nvcc $$f"; $(NVCC) -arch=$(CUDA_ARCH) -O2 -c $$f -o build/cuda/$$(basename $$f .cu).o; done
	@# the engine-level GPU programs (plain C, linked by tests/gpu/run.sh on a GPU machine)
	@set -e; for f in $(wildcard tests/gpu/*.c); do echo "cc $$f"; $(CC) -std=c11 -D_GNU_SOURCE -Wall -I$(CUDA_HOME)/include -fsyntax-only $$f; done
	@# and the device script itself, up to running: the headless build, every link (a script that
	@# cannot build would cost a whole device lease)
	JOBS=$$(nproc) tests/gpu/run.sh build
else
	@echo "cuda-check: nvcc not found; CUDA sources not compiled"
endif

# --- cuemu: the CUDA backend's OWN sources run on the CPU (tests/cuemu/; no GPU, no nvcc) ----
# kernels/cuda/*.cu and tests/gpu/parity*.cu are rewritten to C++ (tests/cuemu/cu2cpp.py: the
# launch syntax, shared memory) and built against cuemu's stand-ins for the CUDA runtime,
# cuBLAS, cub and wmma; every block's threads run as fibers with real barriers. The GPU test
# programs then run unchanged: parity of every op (threads in forward and in reverse order: a
# race between threads changes the result), :check parity per preset (quick) and the step
# graph's replay against the eager step. This proves the CUDA code's logic, indices, barriers and
# graph semantics; it says nothing about GPU speed or the real hardware's rounding.
EMU      := build/cuemu
# EMUSAN: -fsanitize=address for the cuemu-asan build (cuemu-check sets it, with EMU=build/cuemu-asan)
EMUSAN   :=
EMU_LIB  := build/float/libdm.a
EMU_RT   := $(EMU)/cuemu.o $(EMU)/cuemu_libs.o
EMU_K    := $(patsubst kernels/cuda/%.cu,$(EMU)/k/%.o,$(wildcard kernels/cuda/*.cu)) $(EMU_RT)
EMU_T    := $(patsubst tests/gpu/%.cu,$(EMU)/t/%.o,$(wildcard tests/gpu/parity*.cu))
EMU_HDR  := $(wildcard tests/cuemu/include/*.h tests/cuemu/include/cub/*.cuh kernels/cuda/*.cuh kernels/cuda/*.h \
              kernels/*.h kernels/cpu/*.h tests/gpu/*.cuh)
EMUCXX   := $(CXX) -std=c++17 -O2 -g $(EMUSAN) -Itests/cuemu/include -Ikernels/cuda -Wno-unknown-pragmas
EMUENV   := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 CUEMU_STATS=1
.PHONY: cuemu cuemu-check
$(EMU)/k/%.cpp: kernels/cuda/%.cu tests/cuemu/cu2cpp.py
	@mkdir -p $(dir $@)
	python3 tests/cuemu/cu2cpp.py $< $@
$(EMU)/t/%.cpp: tests/gpu/%.cu tests/cuemu/cu2cpp.py
	@mkdir -p $(dir $@)
	python3 tests/cuemu/cu2cpp.py $< $@
.SECONDARY: $(EMU_K:.o=.cpp) $(EMU_T:.o=.cpp) $(EMU)/t/selftest.cpp
$(EMU)/k/%.o: $(EMU)/k/%.cpp $(EMU_HDR)
	$(EMUCXX) -c $< -o $@
$(EMU)/t/%.o: $(EMU)/t/%.cpp $(EMU_HDR)
	$(EMUCXX) -Itests/gpu -c $< -o $@
$(EMU)/cuemu.o $(EMU)/cuemu_libs.o: $(EMU)/%.o: tests/cuemu/%.cpp tests/cuemu/cuemu_internal.h $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(EMUCXX) -Wall -c $< -o $@
$(EMU)/t/selftest.cpp: tests/cuemu/selftest.cu tests/cuemu/cu2cpp.py
	@mkdir -p $(dir $@)
	python3 tests/cuemu/cu2cpp.py $< $@
$(EMU)/selftest: $(EMU)/t/selftest.o $(EMU_RT)
	$(CXX) $^ -o $@ $(LDLIBS)
$(EMU)/parity: $(EMU_T) $(EMU_K) $(EMU_LIB)
	$(CXX) $(EMUSAN) $(EMU_T) $(EMU_K) -o $@ $(EMU_LIB) $(LDLIBS)
$(EMU)/%: tests/gpu/%.c $(EMU_K) $(EMU_LIB) engine/engine.h tests/cuemu/include/cuda_runtime_api.h $(wildcard tests/gpu/*.h)
	$(CC) $(CFLAGS) -Itests/cuemu/include $< $(EMU_K) -o $@ $(EMU_LIB) $(LDLIBS) -lstdc++
# dmsh itself on the emulated device (:device cuda runs the CUDA backend's code on the CPU)
$(EMU)/dmsh: $(REPLOBJ) $(EMU_K) $(EMU_LIB)
	$(CXX) $(REPLOBJ) $(EMU_K) -o $@ $(EMU_LIB) $(LDLIBS) $(REPLLIBS)
cuemu:
	$(MAKE) --no-print-directory DM_REAL=float $(EMU_LIB) $(EMU)/selftest $(EMU)/parity $(EMU)/parity_model $(EMU)/graph_step $(EMU)/bench_gpu $(EMU)/dmsh
cuemu-check: cuemu
	@echo "== cuemu selftest: what the emulator claims to catch is caught (both thread orders)"
	@$(EMUENV) CUEMU_ORDER=fwd ./$(EMU)/selftest > $(EMU)/selftest-fwd.log 2>&1 || { cat $(EMU)/selftest-fwd.log; exit 1; }
	@$(EMUENV) CUEMU_ORDER=rev ./$(EMU)/selftest > $(EMU)/selftest-rev.log 2>&1 || { cat $(EMU)/selftest-rev.log; exit 1; }
	@grep -v '^cuemu:' $(EMU)/selftest-fwd.log
	@a=$$(grep 'racy sum' $(EMU)/selftest-fwd.log); b=$$(grep 'racy sum' $(EMU)/selftest-rev.log); \
	  if [ "$$a" = "$$b" ]; then echo "  a race between threads of one phase changes the result: FAIL ($$a in both orders)"; exit 1; fi; \
	  echo "  a race between threads of one phase changes the result (fwd:$${a#*:}; rev:$${b#*:})    PASS"
	@if $(EMUENV) ./$(EMU)/selftest divergent > $(EMU)/selftest-div.log 2>&1 || [ $$? -ne 3 ]; then \
	  echo "  a divergent __syncthreads() ends the run: FAIL"; cat $(EMU)/selftest-div.log; exit 1; fi; \
	  grep -q 'divergent __syncthreads() in block (0,0,0): thread 0 waits at tests/cuemu/selftest.cu:' $(EMU)/selftest-div.log || { echo "  divergent barrier message: FAIL"; cat $(EMU)/selftest-div.log; exit 1; }; \
	  echo "  a divergent __syncthreads() ends the run, naming both barriers                 PASS"
	@for m in wmma-align:'not 32-byte (256-bit) aligned' wmma-ldm:'ldm 12 is not a multiple of 16 bytes'; do \
	  if $(EMUENV) ./$(EMU)/selftest $${m%%:*} > $(EMU)/selftest-$${m%%:*}.log 2>&1 || [ $$? -ne 3 ]; then \
	    echo "  $${m%%:*}: a misplaced wmma operand ends the run: FAIL"; cat $(EMU)/selftest-$${m%%:*}.log; exit 1; fi; \
	  grep -q "cuemu: wmma::load_matrix_sync: .*$${m#*:}" $(EMU)/selftest-$${m%%:*}.log || { echo "  $${m%%:*} message: FAIL"; cat $(EMU)/selftest-$${m%%:*}.log; exit 1; }; \
	done; echo "  a wmma operand not 32-byte aligned, or ldm not 16-byte, ends the run            PASS"
	@[ $$(grep -c '^  deferred: .*PASS$$' $(EMU)/selftest-fwd.log) = 3 ] || { echo "  the device behind the host (deferred rows): FAIL"; exit 1; }
	@$(EMUENV) CUEMU_DEFER=0 ./$(EMU)/selftest > $(EMU)/selftest-now.log 2>&1 && ! grep -q '^  deferred: ' $(EMU)/selftest-now.log \
	  || { echo "  CUEMU_DEFER=0 (ops at once): FAIL"; cat $(EMU)/selftest-now.log; exit 1; }
	@echo "  the device runs behind the host (staging read late, downloads land at the wait); CUEMU_DEFER=0 runs ops at once PASS"
	@echo "== cuemu parity: every op, CPU vs the CUDA backend's code on cuemu, threads in forward order"
	@$(EMUENV) CUEMU_ORDER=fwd ./$(EMU)/parity > $(EMU)/parity-fwd.log 2>&1 || { grep -w FAIL $(EMU)/parity-fwd.log; tail -n 5 $(EMU)/parity-fwd.log; exit 1; }
	@tail -n 2 $(EMU)/parity-fwd.log
	@echo "== cuemu parity, threads and blocks in reverse order (a race shows as a difference)"
	@$(EMUENV) CUEMU_ORDER=rev ./$(EMU)/parity > $(EMU)/parity-rev.log 2>&1 || { grep -w FAIL $(EMU)/parity-rev.log; tail -n 5 $(EMU)/parity-rev.log; exit 1; }
	@grep -v '^cuemu:' $(EMU)/parity-fwd.log > $(EMU)/parity-fwd.txt; grep -v '^cuemu:' $(EMU)/parity-rev.log > $(EMU)/parity-rev.txt
	@cmp -s $(EMU)/parity-fwd.txt $(EMU)/parity-rev.txt || { echo "cuemu: the two thread orders give different results:"; diff $(EMU)/parity-fwd.txt $(EMU)/parity-rev.txt | head -n 20; exit 1; }
	@echo "   both orders: the same $$(grep -c -w PASS $(EMU)/parity-fwd.txt) rows, digit for digit"
	@echo "== cuemu parity under AddressSanitizer (a kernel reading or writing outside its buffers stops it)"
	@$(MAKE) --no-print-directory -s EMU=build/cuemu-asan EMUSAN=-fsanitize=address build/cuemu-asan/parity
	@$(EMUENV) ./build/cuemu-asan/parity > build/cuemu-asan/parity.log 2>&1 || { grep -w FAIL build/cuemu-asan/parity.log; grep -A 30 'ERROR: AddressSanitizer' build/cuemu-asan/parity.log | head -n 40; tail -n 3 build/cuemu-asan/parity.log; exit 1; }
	@grep '^parity:' build/cuemu-asan/parity.log
	@echo "== cuemu parity_model quick (:check parity, nano and mini x precision, engram_ram)"
	@$(EMUENV) ./$(EMU)/parity_model quick
	@echo "== cuemu dmsh :check parity (the REPL's path: both precisions, the routing followed and own)"
	@printf ':preset nano\n:set batch=2 seq=64\n:init seed=3\n:arm rezero off\n:check parity precision=bf16\n:check parity precision=fp32 route=own\n' > $(EMU)/parity_repl.dm
	@$(EMUENV) ./$(EMU)/dmsh --norc -b $(EMU)/parity_repl.dm > $(EMU)/parity_repl.log 2>&1 || { cat $(EMU)/parity_repl.log; exit 1; }
	@[ $$(grep -c '^parity: PASS' $(EMU)/parity_repl.log) = 2 ] && grep -q '^routing: the same 256 token-expert assignments on both' $(EMU)/parity_repl.log \
	  || { echo "  :check parity on cuemu: FAIL"; cat $(EMU)/parity_repl.log; exit 1; }
	@grep -E '^(parity|routing)' $(EMU)/parity_repl.log | sed 's/^/  /'
	@echo "== cuemu dmsh device flows (a device short of memory, a move that does not fit, moves and :probe)"
	@bash tests/cuemu/dmsh_device.sh ./$(EMU)/dmsh
	@echo "== cuemu dmsh with every device allocation of a run failed in turn (a refused step leaves nothing behind)"
	@bash tests/cuemu/dmsh_oom.sh ./$(EMU)/dmsh
	@bash tests/cuemu/dmsh_oom.sh ./$(EMU)/dmsh ram
	@echo "== cuemu dmsh: a session with ops run at once (CUEMU_DEFER=0) and behind the host (the default) gives the same bits"
	@bash tests/cuemu/dmsh_defer.sh ./$(EMU)/dmsh
	@echo "== cuemu graph_step quick (the step graph's replay = the eager step; two processes)"
	@$(EMUENV) ./$(EMU)/graph_step quick
	@echo "== cuemu bench_gpu 2 nano:2:64 (the benchmark program runs end to end; its times are the emulator's)"
	@$(EMUENV) ./$(EMU)/bench_gpu 2 nano:2:64

# The CUDA checks on a machine with a GPU (prints a pass/fail table; see tests/gpu/run.sh)
.PHONY: gpu-check gpu-bench
gpu-check:
	tests/gpu/run.sh check
gpu-bench:
	tests/gpu/run.sh bench

# --- packages ----------------------------------------------------------------------------
PKGS := libcmocka-dev libopenblas-dev libreadline-dev libncurses-dev libstb-dev
deps:
	@missing=""; \
	[ -f /usr/include/cmocka.h ] || missing="$$missing libcmocka-dev"; \
	ls /usr/lib/x86_64-linux-gnu/libopenblas.so /usr/lib/*/libopenblas.so >/dev/null 2>&1 || missing="$$missing libopenblas-dev"; \
	[ -f /usr/include/readline/readline.h ] || missing="$$missing libreadline-dev"; \
	[ -f /usr/include/ncurses.h ] || missing="$$missing libncurses-dev"; \
	[ -f /usr/include/stb/stb_image_write.h ] || missing="$$missing libstb-dev"; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	command -v g++ >/dev/null || missing="$$missing g++"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $$missing; \
	  else sudo apt-get -o DPkg::Lock::Timeout=600 update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $$missing; fi; \
	fi

# The main job on an embedded default: nano trained on the C headers under /usr/include.
demo: deps
	$(MAKE) --no-print-directory dmsh
	@# an earlier demo (or a session of the user's named demo) is moved aside, never deleted
	@if [ -e runs/demo ] || [ -L runs/demo ]; then d=runs/demo.prev-$$(date +%Y%m%d-%H%M%S); \
	  while [ -e $$d ] || [ -L $$d ]; do d=$$d.x; done; mv -T runs/demo $$d && \
	  echo "make demo: the earlier runs/demo is kept as $$d"; fi
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ./$(B)/dmsh --norc --no-tui -b configs/runs/demo.dm

# dmsh without readline, ncurses or PNG (machines without those headers, e.g. the GPU box)
headless:
	$(MAKE) --no-print-directory HEADLESS=1 dmsh

docs/commands.md: $(B)/dmsh
	./$(B)/dmsh --commands-md > $@

clean:
	rm -rf build
	@# ./dmsh pointed into build/: gone with it
	@if [ -L dmsh ]; then case "$$(readlink dmsh)" in build/*) rm -f dmsh;; esac; fi
