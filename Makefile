# phi4mm — build, test, demo. `make` builds build/phi4mm and build/libphi4mm.a.
# Every .c under src/ goes into the library; tools/cli and tools/server make the one binary;
# each tests/unit/test_*.c becomes its own cmocka binary. New files need no Makefile edit.

CC      ?= cc
BUILD   ?= build
PKGS    := openblas jansson libpcre2-8 sndfile libavformat libavcodec libavutil libmicrohttpd libcurl libpng libjpeg libwebp libgif cmocka
APT_PKGS := build-essential pkg-config libopenblas-openmp-dev libjansson-dev libpcre2-dev libsndfile1-dev \
            libavformat-dev libavcodec-dev libavutil-dev libmicrohttpd-dev libcurl4-openssl-dev libpng-dev libjpeg-dev libwebp-dev libgif-dev libcmocka-dev
# tests only: python3-numpy python3-scipy python3-pil python3-torch, python3-lark, nodejs npm, curl, ffmpeg, openssl (test-deps installs the missing groups;
# a node that ships its own npm, e.g. nodesource, counts: installing Debian npm over it would conflict)

# libav*, libcurl, libmicrohttpd and libsndfile are compiled against but opened at run time
# (src/audio/av_lib.h, tools/server/curl_lib.h, tools/server/mhd_lib.h, src/audio/sf_lib.h: ~135,
# 20, 10 and 8 libraries otherwise loaded at every start), so not linked; the unit tests that write
# audio with libsndfile themselves link it (TEST_LIBS).
DLOPEN_PKGS := libavformat libavcodec libavutil libcurl libmicrohttpd sndfile
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(filter-out $(DLOPEN_PKGS),$(PKGS)) 2>/dev/null) -ldl

SOAK_SECONDS ?= 180
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wpedantic -Wno-unused-parameter -fopenmp -Iinclude -Isrc $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS  += $(PKG_LIBS) -lm -lpthread
LDFLAGS += -fopenmp $(EXTRA_LDFLAGS)

LIB_SRC  := $(shell find src -name '*.c' | sort)
TOOL_SRC := $(shell find tools -name '*.c' | sort)
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all deps test-deps test demo bench clean asan test-asan fuzz soak soak-tsan install uninstall examples

all: deps $(BUILD)/phi4mm

# Checks the system libraries; installs them with apt-get when run as root, else names the command.
deps:
	@if ! pkg-config --exists $(PKGS) 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "phi4mm: installing build dependencies: $(APT_PKGS)"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PKGS) || exit 1; \
	  else \
	    echo "phi4mm: missing libraries. Run: sudo apt-get install -y $(APT_PKGS)"; exit 1; \
	  fi; \
	fi

test-deps: deps
	@missing=""; \
	/usr/bin/python3 -c 'import numpy, scipy, PIL, torch' 2>/dev/null || missing="python3-numpy python3-scipy python3-pil python3-torch"; \
	/usr/bin/python3 -c 'import lark' 2>/dev/null || missing="$$missing python3-lark"; \
	command -v node >/dev/null && command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v ffmpeg >/dev/null || missing="$$missing ffmpeg"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "phi4mm: installing test dependencies: $$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing || exit 1; \
	  else echo "phi4mm: tests need: sudo apt-get install -y $$missing"; exit 1; fi; \
	fi

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libphi4mm.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/phi4mm: $(TOOL_OBJ) $(BUILD)/libphi4mm.a
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libphi4mm.a $(LDLIBS)

TEST_LIBS := $(shell pkg-config --libs sndfile 2>/dev/null)
$(BUILD)/tests/%: tests/unit/%.c $(wildcard tests/unit/*.h) $(BUILD)/libphi4mm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libphi4mm.a $(LDFLAGS) $(LDLIBS) $(TEST_LIBS)

# test_server_parsers compiles the server's parsers in (they live in the binary, not the library)
$(BUILD)/tests/test_server_parsers: $(wildcard tools/server/*.c tools/server/*.h)

tests: $(TEST_BIN)

# examples/*.c: programs around the public API (phi4mm.h and libphi4mm.a only), built as a user would.
EXAMPLE_BIN := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
$(BUILD)/examples/%: examples/%.c include/phi4mm.h $(BUILD)/libphi4mm.a
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -std=c11 -Wall -Wextra -Wpedantic -fopenmp -Iinclude $(EXTRA_CFLAGS) -o $@ $< $(BUILD)/libphi4mm.a $(LDFLAGS) $(LDLIBS)
examples: $(EXAMPLE_BIN)

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the binary, the static library, the public header and a
# pkg-config file (`cc prog.c $$(pkg-config --cflags --libs phi4mm)`); `make uninstall` removes them.
PREFIX  ?= /usr/local
VERSION := $(shell sed -n 's/^\#define PM_VERSION "\(.*\)"/\1/p' include/phi4mm.h)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/phi4mm $(DESTDIR)$(PREFIX)/bin/phi4mm
	install -m 644 $(BUILD)/libphi4mm.a $(DESTDIR)$(PREFIX)/lib/libphi4mm.a
	install -m 644 include/phi4mm.h $(DESTDIR)$(PREFIX)/include/phi4mm.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' phi4mm.pc.in >$(DESTDIR)$(PREFIX)/lib/pkgconfig/phi4mm.pc
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/phi4mm $(DESTDIR)$(PREFIX)/lib/libphi4mm.a $(DESTDIR)$(PREFIX)/include/phi4mm.h \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/phi4mm.pc

# The test command of the README and of CI. Ends with "N passed, M failed".
test: deps test-deps $(BUILD)/phi4mm $(TEST_BIN)
	@BUILD=$(BUILD) tests/run_all.sh

demo: deps $(BUILD)/phi4mm
	@scripts/demo.sh $(BUILD)/phi4mm

bench: deps $(BUILD)/phi4mm
	@scripts/bench.sh $(BUILD)/phi4mm

# Sanitizer build in its own folder (build-asan); runs the WHOLE suite (unit, e2e, parity) under
# ASan + UBSan + LSan. Any report aborts the process (SIGABRT: its test fails as a crash). ASan's and
# LSan's are also written to build-asan/sanitizer-logs/, and the target fails when that folder holds
# anything, whatever the tests said; UBSan's go to the process's stderr only (GCC's runtime linked
# with ASan's ignores log_path for them: session 42 met one in lark_diff's driver).
# Built at -O2 (the suite ran 1.5 x as long at -O1: the kernels' vector loads each get a shadow check).
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
test-asan:
	@rm -rf build-asan/sanitizer-logs && mkdir -p build-asan/sanitizer-logs
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:log_path=$(CURDIR)/build-asan/sanitizer-logs/asan \
	  UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$(CURDIR)/build-asan/sanitizer-logs/ubsan \
	  $(MAKE) --no-print-directory BUILD=build-asan OPT=-O2 EXTRA_CFLAGS="$(ASAN_FLAGS)" EXTRA_LDFLAGS="$(ASAN_FLAGS)" test; rc=$$?; \
	n=$$(ls build-asan/sanitizer-logs | wc -l); \
	if [ "$$n" -gt 0 ]; then echo "test-asan: $$n sanitizer report(s):"; head -n 40 build-asan/sanitizer-logs/*; exit 1; fi; \
	echo "test-asan: no sanitizer reports"; exit $$rc

# libFuzzer harnesses fuzz/fuzz_<target>.c, built with clang in build-fuzz/ (coverage + ASan + UBSan).
# `make fuzz FUZZ_SECONDS=N [FUZZ_TARGETS="wave image"]` checks clang's libFuzzer runtime (installs it
# with apt-get when run as root, else names the command), builds every harness, seeds fuzz/corpus/
# (fuzz/make_corpus.sh) and runs each target N seconds (fuzz/run.sh); fails if any target finds a crash.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_APT_PKGS := clang libclang-rt-14-dev
FUZZ_SRV_OBJ := $(patsubst %,$(BUILD)/obj/tools/server/%.o,base64 dataurl multipart chat_parse tool_calls call_reader responses_parse response_items json_util local_media media_urls audio_form)

fuzz: deps
	@if ! printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' | \
	     clang -x c - -fsanitize=fuzzer,address -o /dev/null 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "phi4mm: installing the fuzzing toolchain: $(FUZZ_APT_PKGS)"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(FUZZ_APT_PKGS) || exit 1; \
	  else echo "phi4mm: fuzzing needs clang with libFuzzer. Run: sudo apt-get install -y $(FUZZ_APT_PKGS)"; exit 1; fi; \
	fi
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 \
	  EXTRA_CFLAGS="-fsanitize=fuzzer-no-link $(ASAN_FLAGS) -Wno-unknown-pragmas -Wno-pass-failed" $(FUZZ_TARGETS:%=build-fuzz/fuzz/fuzz_%)
	@fuzz/make_corpus.sh build-fuzz
	@fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The DSP inner loops (FFT, resampler, log-mel, image resize, bicubic) keep edge coverage but lose
# compare tracing in the fuzz build: tracing their loop compares took ~2/3 of the audio target's time
# and told the fuzzer nothing about the input.
FUZZ_NOCMP_OBJ := $(patsubst %,build-fuzz/obj/src/%.o,audio/fft audio/resample audio/features vision/resize)
ifeq ($(BUILD),build-fuzz)
$(FUZZ_NOCMP_OBJ): CFLAGS += -fno-sanitize-coverage=trace-cmp
endif

$(BUILD)/fuzz/fuzz_chat $(BUILD)/fuzz/fuzz_multipart $(BUILD)/fuzz/fuzz_base64: $(FUZZ_SRV_OBJ)
$(BUILD)/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_util.h $(BUILD)/libphi4mm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ifuzz -fsanitize=fuzzer -o $@ $< $(filter %.o,$^) $(BUILD)/libphi4mm.a $(LDFLAGS) $(LDLIBS)

# Bounded soak of the server (not in CI): make soak SOAK_SECONDS=N [SOAK_SERVE_ARGS="--kv-cache bf16"]
soak: deps $(BUILD)/phi4mm
	@SOAK_SECONDS=$(SOAK_SECONDS) scripts/soak.sh $(BUILD)/phi4mm

# The server's threads under ThreadSanitizer (not in CI: the soak runs ~10 x slower): `make soak-tsan
# [SOAK_SECONDS=N]` builds build-tsan/ and runs the soak against it; fails on any report (written to
# build-tsan/sanitizer-logs/). OpenMP teams of one thread: libgomp is not instrumented, so its
# barriers would read as races; the HTTP, scheduler, prompt and URL-fetch threads all run.
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
soak-tsan: deps
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT=-O1 EXTRA_CFLAGS="$(TSAN_FLAGS)" EXTRA_LDFLAGS="$(TSAN_FLAGS)" build-tsan/phi4mm
	@rm -rf build-tsan/sanitizer-logs && mkdir -p build-tsan/sanitizer-logs
	@OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=0:log_path=$(CURDIR)/build-tsan/sanitizer-logs/tsan \
	  SOAK_SECONDS=$(SOAK_SECONDS) scripts/soak.sh build-tsan/phi4mm; rc=$$?; \
	n=$$(ls build-tsan/sanitizer-logs | wc -l); \
	if [ "$$n" -gt 0 ]; then echo "soak-tsan: $$n ThreadSanitizer report(s):"; head -n 60 build-tsan/sanitizer-logs/*; exit 1; fi; \
	echo "soak-tsan: no ThreadSanitizer reports"; exit $$rc

clean:
	rm -rf $(BUILD) build-asan build-tsan

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)
