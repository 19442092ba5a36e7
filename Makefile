# dmsh — build, test, bench. `make test` and `make demo` install missing Debian packages first.
#   make                 dmsh + the engine library (float)
#   make DM_REAL=double  the double-precision engine (used by the gradient tests)
#   make test            every test, float and double builds (cmocka)
#   make bench           CPU benchmark (not a test)
#   make headless        dmsh without readline/ncurses/PNG (machines without those headers)
#   CUDA_ARCH=sm_90      choose the GPU architecture (default: the build machine's, else sm_90)

CC      ?= gcc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
DM_REAL ?= float
OPT     ?= -O3 -march=native
CFLAGS  := -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter -fopenmp
LDLIBS  := -lopenblas -lm -fopenmp
ifeq ($(DM_REAL),double)
  CFLAGS += -DDM_DOUBLE
else ifneq ($(DM_REAL),float)
  $(error DM_REAL must be float or double, not '$(DM_REAL)')
endif

B        := build/$(DM_REAL)
ENGINE   := $(wildcard engine/*.c)
KERNELS  := $(wildcard kernels/cpu/*.c)
LIBOBJ   := $(ENGINE:%.c=$(B)/%.o) $(KERNELS:%.c=$(B)/%.o) $(B)/presets_gen.o
HEADERS  := $(wildcard engine/*.h kernels/*.h kernels/cpu/*.h repl/*.h)
TESTS    := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))

.PHONY: all lib test test-float test-double bench deps cuda-check clean demo dmsh
all: lib dmsh

REPL    := repl/parse.c repl/commands.c repl/main.c repl/interactive_plain.c
REPLOBJ := $(REPL:%.c=$(B)/%.o)

dmsh: $(B)/dmsh
	@ln -sf $(B)/dmsh dmsh

$(B)/dmsh: $(REPLOBJ) $(B)/libdm.a
	$(CC) $(CFLAGS) $(REPLOBJ) -o $@ $(B)/libdm.a $(LDLIBS)

lib: $(B)/libdm.a

$(B)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/presets_gen.c: $(wildcard configs/*.dm) tools/embed_presets.sh
	@mkdir -p $(B)
	sh tools/embed_presets.sh $(sort $(wildcard configs/*.dm)) > $@

$(B)/presets_gen.o: $(B)/presets_gen.c
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/libdm.a: $(LIBOBJ)
	ar rcs $@ $^

$(B)/tests/%: tests/%.c tests/testutil.h $(B)/libdm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a -lcmocka $(LDLIBS)

$(B)/bench_cpu: tests/bench_cpu.c $(B)/libdm.a
	$(CC) $(CFLAGS) $< -o $@ $(B)/libdm.a $(LDLIBS)

# --- tests -------------------------------------------------------------------------------
# Tests run with one BLAS thread so results and timings do not depend on the machine's cores.
TESTENV := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2
test: deps
	$(MAKE) --no-print-directory test-float DM_REAL=float
	$(MAKE) --no-print-directory test-double DM_REAL=double
	$(MAKE) --no-print-directory cuda-check
	@echo "make test: all test programs passed"

test-float test-double: $(addprefix $(B)/tests/,$(TESTS)) $(B)/dmsh
	@set -e; for t in $(TESTS); do echo "== $(DM_REAL) $$t"; $(TESTENV) ./$(B)/tests/$$t; done

bench: deps
	$(MAKE) --no-print-directory $(B)/bench_cpu
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ./$(B)/bench_cpu

# --- CUDA: compiled whenever nvcc exists (CI has nvcc and no GPU: this proves the .cu build) --
CUDA_ARCH ?= sm_90
CUDA_SRC  := $(wildcard kernels/cuda/*.cu)
cuda-check:
ifneq ($(NVCC),)
	@mkdir -p build/cuda
	@set -e; for f in $(CUDA_SRC); do echo "nvcc $$f"; $(NVCC) -arch=$(CUDA_ARCH) -O2 -c $$f -o build/cuda/$$(basename $$f .cu).o; done
else
	@echo "cuda-check: nvcc not found; CUDA sources not compiled"
endif

# --- packages ----------------------------------------------------------------------------
PKGS := libcmocka-dev libopenblas-dev libreadline-dev libncurses-dev libstb-dev
deps:
	@missing=""; \
	[ -f /usr/include/cmocka.h ] || missing="$$missing libcmocka-dev"; \
	ls /usr/lib/x86_64-linux-gnu/libopenblas.so /usr/lib/*/libopenblas.so >/dev/null 2>&1 || missing="$$missing libopenblas-dev"; \
	[ -f /usr/include/readline/readline.h ] || missing="$$missing libreadline-dev"; \
	[ -f /usr/include/ncurses.h ] || missing="$$missing libncurses-dev"; \
	[ -f /usr/include/stb/stb_image_write.h ] || missing="$$missing libstb-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	fi

clean:
	rm -rf build
