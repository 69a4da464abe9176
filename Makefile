# ringlet: one Makefile, no other build system.
#   make                      library, ringlet-run, ringlet-perf, tests
#   make test                 build and run the suite (tests/run.sh)
#   make test SANITIZE=address,undefined   (or SANITIZE=thread): same, sanitized, in build-<name>/
#   make run                  dependencies (as root), build, the all-reduce demo on 4 local ranks
#   make install PREFIX=/usr/local   (also the Python package, into PYTHONDIR; PYTHON= picks the interpreter)
CC      ?= cc
PREFIX  ?= /usr/local
SANITIZE ?=
ifeq ($(SANITIZE),)
BUILD   ?= build
OPT     ?= -O2 $(FAST_CALLS)
else
BUILD   ?= build-$(subst $(comma),-,$(SANITIZE))
OPT     ?= -O1
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif
comma := ,
# The library's own calls, made cheaper (an 8-byte all-reduce is a few hundred ns, and
# about 40 calls between its functions): -fno-semantic-interposition lets the compiler
# call and inline a file's exported functions directly, -Bsymbolic-functions (below)
# binds the calls between files inside the library at link time instead of through the
# PLT, and on x86-64 TLS descriptors make a thread-local variable's address a short
# call instead of __tls_get_addr (the library has 8 KiB of TLS, too much for the
# initial-exec model of a library Python dlopens). Each flag only where $(CC) takes it
# (clang 14 has no -mtls-dialect; other CPUs, other dialects). The sanitizer builds keep
# their usual compile flags (they link alike).
cc_takes = $(shell $(CC) $(1) -Werror -x c -c /dev/null -o /dev/null >/dev/null 2>&1 && echo $(1))
FAST_CALLS := $(call cc_takes,-fno-semantic-interposition) $(call cc_takes,-mtls-dialect=gnu2)
SO_LDFLAGS := -Wl,-Bsymbolic-functions

SOVERSION := 0
VERSION   := 0.1.0
# src/ holds one folder per layer (README.md, Architecture); sources include headers by
# name, found through one -I per folder. tests/mp/layers.sh checks that a file includes
# only headers of its own folder or of folders below it.
CORE_DIRS := src/base src/device src/comm src/algo src/engine src/api
CPPFLAGS  += -Iinclude $(CORE_DIRS:%=-I%) -Itransports -Ikernels -D_GNU_SOURCE
CFLAGS    += -std=c11 $(OPT) -g -Wall -Wextra -fPIC -pthread $(SANFLAGS)
LDFLAGS   += -pthread $(SANFLAGS)
LDLIBS    += -ldl -lm

# CUDA: on when nvcc is found (PATH, $CUDA_HOME, /usr/local/cuda); CUDA=0 forces a
# host-only build. The runtime is linked statically, so libringlet.so loads and works on
# host memory on a machine with no GPU and no driver.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard $(CUDA_HOME)/bin/nvcc))
ifeq ($(CUDA),)
CUDA := $(if $(NVCC),1,0)
CUDA_AUTO := 1
endif
# The CUDA backend needs CUDA 12.8 (src/device/rt_cuda.c): an older nvcc found by itself
# builds without it, one asked for (CUDA=1) is an error.
ifeq ($(CUDA),1)
NVCC_OK := $(shell set -- $$($(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1 \2/p'); \
             [ -n "$$2" ] && [ $$(($$1 * 100 + $$2)) -ge 1208 ] && echo 1)
ifneq ($(NVCC_OK),1)
ifeq ($(CUDA_AUTO),1)
$(warning $(NVCC) is older than CUDA 12.8, which the CUDA backend needs: building without it (CUDA=0))
CUDA := 0
else
$(error CUDA=1, but $(NVCC) is older than CUDA 12.8, which the CUDA backend needs)
endif
endif
endif
CU_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
           -gencode arch=compute_90,code=compute_90

LIB_SRC := $(foreach d,$(CORE_DIRS) src/ddp transports kernels,$(wildcard $(d)/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
ifeq ($(CUDA),1)
CU_SRC  := $(wildcard kernels/*.cu) $(wildcard transports/*.cu)
LIB_OBJ += $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
CPPFLAGS += -DRINGLET_CUDA=1 -I$(CUDA_HOME)/include
CUDA_LIBS := $(CUDA_HOME)/lib64/libcudart_static.a -lrt -lstdc++
NVFLAGS ?= -O3 -std=c++17 $(CU_ARCH) -Xcompiler -fPIC -Xcompiler -Wall -Xcompiler -Wextra
endif
UNIT_SRC := $(wildcard tests/unit/*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/unit/%)
MP_SRC  := $(wildcard tests/mp/*.c)
MP_BIN  := $(MP_SRC:tests/mp/%.c=$(BUILD)/tests/mp/%)

SO      := $(BUILD)/lib/libringlet.so.$(VERSION)
SONAME  := libringlet.so.$(SOVERSION)
A       := $(BUILD)/lib/libringlet.a
BINS    := $(BUILD)/bin/ringlet-run $(BUILD)/bin/ringlet-perf

.PHONY: all lib test run deps install clean
all: lib $(BINS) $(UNIT_BIN) $(MP_BIN)
lib: $(SO) $(A)

# Objects rebuild when the flags or the configuration change (CUDA=0 after CUDA=1,
# another CC, the verbs headers installed since the last build, ...).
# (the '#' through a variable: inside $(shell) make 4.3 keeps a backslash before it, and
# "\#include" is no directive, so the test always passed)
HASH       := \#
HAVE_VERBS := $(shell echo '$(HASH)include <infiniband/verbs.h>' | $(CC) -E -x c - >/dev/null 2>&1 && echo 1 || echo 0)
FLAGS_FILE := $(BUILD)/.flags
FLAGS_NOW  := $(CC) $(CPPFLAGS) $(CFLAGS) $(NVFLAGS) $(SO_LDFLAGS) $(CUDA) verbs=$(HAVE_VERBS)
$(shell mkdir -p $(BUILD) && (echo '$(FLAGS_NOW)' | cmp -s - $(FLAGS_FILE) || echo '$(FLAGS_NOW)' > $(FLAGS_FILE)))

$(BUILD)/obj/%.o: %.c $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
-include $(LIB_OBJ:.o=.d)

$(BUILD)/obj/%.o: %.cu $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(NVCC) -Iinclude -Isrc/base -Isrc/device -Ikernels $(NVFLAGS) -c $< -o $@
# (nvcc writes no dependency files here: the kernels' headers, named)
$(CU_SRC:%.cu=$(BUILD)/obj/%.o): kernels/cuda_common.cuh kernels/reduce_cuda.h kernels/reduce.h include/ringlet.h \
    kernels/convert.h kernels/fpenv.h

$(SO): $(LIB_OBJ) src/api/exports.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/api/exports.map $(SO_LDFLAGS) $(LDFLAGS) -o $@ \
	    $(LIB_OBJ) $(CUDA_LIBS) $(LDLIBS)
	ln -sf libringlet.so.$(VERSION) $(BUILD)/lib/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/lib/libringlet.so

$(A): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Programs link the shared library with an rpath to it, as users do.
LINK_SO := -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lringlet

# ringlet-run: tools/run.h lists its files.
RUN_SRC := tools/ringlet-run.c tools/run_options.c tools/run_launch.c tools/run_output.c tools/run_signals.c
$(BUILD)/bin/ringlet-run: $(RUN_SRC) tools/run.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(RUN_SRC) $(LDLIBS)

# ringlet-perf: perf/perf.h lists its files.
PERF_SRC := perf/ringlet_perf.c perf/perf_options.c perf/perf_data.c perf/perf_check.c perf/perf_run.c perf/perf_output.c
$(BUILD)/bin/ringlet-perf: $(PERF_SRC) perf/perf.h $(SO)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(PERF_SRC) $(LINK_SO) $(LDLIBS)

# Unit tests link the static library: they may test internal functions.
$(BUILD)/tests/unit/%: tests/unit/%.c $(A)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(A) $(CUDA_LIBS) $(LDLIBS)

# Multi-process tests go through the shared library (the public API; a few white-box ones
# also reach into internal headers: prep_pair, stream, lifecycle).
$(BUILD)/tests/mp/%: tests/mp/%.c $(SO)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../../lib' -lringlet $(LDLIBS)

# The NCCL layer: build/lib/libnccl.so.2 on libringlet.so, built from src/nccl/ against
# include/ringlet.h alone; it exports nccl* and pnccl* and nothing else.
NCCL_SRC := $(wildcard src/nccl/*.c)
NCCL_OBJ := $(NCCL_SRC:%.c=$(BUILD)/obj/%.o)
NCCL_SO  := $(BUILD)/lib/libnccl.so.2
NCCL_CPPFLAGS := -Iinclude -Isrc/nccl -D_GNU_SOURCE -DRINGLET_NCCL_NO_CUDA_HEADERS
lib: $(NCCL_SO)
$(BUILD)/obj/src/nccl/%.o: src/nccl/%.c $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(NCCL_CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
-include $(NCCL_OBJ:.o=.d)
$(NCCL_SO): $(NCCL_OBJ) src/nccl/exports.map $(SO)
	$(CC) -shared -Wl,-soname,libnccl.so.2 -Wl,--version-script=src/nccl/exports.map $(LDFLAGS) -o $@ $(NCCL_OBJ) \
		-L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN:$$ORIGIN/..' -lringlet $(LDLIBS)
	ln -sf libnccl.so.2 $(BUILD)/lib/libnccl.so
# Tests of the NCCL layer: programs written for NCCL (our nccl.h), linked to our library.
$(BUILD)/tests/mp/nccl_api: tests/mp/nccl_api.c $(NCCL_SO)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc/nccl -DRINGLET_NCCL_NO_CUDA_HEADERS $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD)/lib \
		-Wl,-rpath,'$$ORIGIN/../../lib' -l:libnccl.so.2 -lringlet $(LDLIBS)

deps:
	@scripts/install-deps.sh

# The dependency step first, then a fresh make: what it installed (verbs headers, nvcc)
# changes the configuration, and so what gets rebuilt.
test: deps
	$(MAKE) --no-print-directory all
	BUILD=$(BUILD) SANITIZE=$(SANITIZE) tests/run.sh

run: deps
	$(MAKE) --no-print-directory all
	$(BUILD)/bin/ringlet-run -n 4 $(BUILD)/bin/ringlet-perf allreduce -b 4K -e 64M -f 4 -c 1

# The Python package goes where PYTHON looks for a prefix's packages (Debian's python3:
# $PREFIX/lib/python3.X/dist-packages, on its path for /usr/local), with _install.py
# recording $PREFIX/lib, so that `import ringlet` finds this library without
# RINGLET_LIBRARY. PYTHONDIR= overrides the folder; PYTHON= (none found: skipped).
PYTHON    ?= python3
PYTHONDIR ?= $(shell $(PYTHON) -c 'import sys; d = "dist-packages" if any(p.endswith("dist-packages") for p in sys.path) else "site-packages"; print("$(PREFIX)/lib/python%d.%d/%s" % (sys.version_info[0], sys.version_info[1], d))' 2>/dev/null)

# The loader searches /usr and /usr/local once ldconfig has run (not for a staged install:
# DESTDIR's packager runs it); a program built against any other prefix gets an rpath to
# it from ringlet.pc, so the README's example runs as written.
ifneq ($(filter /usr /usr/local,$(PREFIX)),)
PC_RPATH :=
INSTALL_LDCONFIG := $(if $(DESTDIR),,ldconfig)
else
PC_RPATH := -Wl,-rpath,$${libdir}
INSTALL_LDCONFIG :=
endif
install: lib $(BINS)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/ringlet.h include/ringlet_ddp.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libringlet.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libringlet.so
	install -m 644 $(A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/include/ringlet-nccl $(DESTDIR)$(PREFIX)/lib/ringlet-nccl
	install -m 644 src/nccl/nccl.h $(DESTDIR)$(PREFIX)/include/ringlet-nccl/
	install -m 755 $(NCCL_SO) $(DESTDIR)$(PREFIX)/lib/ringlet-nccl/
	ln -sf libnccl.so.2 $(DESTDIR)$(PREFIX)/lib/ringlet-nccl/libnccl.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@RPATH@|$(PC_RPATH)|' ringlet.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/ringlet.pc
	$(INSTALL_LDCONFIG)
ifneq ($(PYTHONDIR),)
	install -d $(DESTDIR)$(PYTHONDIR)/ringlet
	install -m 644 python/ringlet/*.py python/ringlet/README.md $(DESTDIR)$(PYTHONDIR)/ringlet/
	printf '# Written by make install: where it put libringlet (read by _lib.py).\nPREFIX = "%s"\nLIBDIR = "%s"\n' \
		'$(PREFIX)' '$(PREFIX)/lib' > $(DESTDIR)$(PYTHONDIR)/ringlet/_install.py
else
	@echo "make install: no $(PYTHON) found: the Python package is not installed (set PYTHON= or PYTHONDIR=)"
endif

clean:
	rm -rf build build-*

# Examples: what users copy; built like user programs.
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
all: $(EXAMPLES)
$(BUILD)/examples/%: examples/%.c $(SO)
	@mkdir -p $(dir $@)
	$(CC) -Iinclude $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lringlet
