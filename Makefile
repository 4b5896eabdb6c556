# phi4mm — build, test, demo. `make` builds build/phi4mm and build/libphi4mm.a.
# Every .c under src/ goes into the library; tools/cli and tools/server make the one binary;
# each tests/unit/test_*.c becomes its own cmocka binary. New files need no Makefile edit.

CC      ?= cc
BUILD   ?= build
PKGS    := openblas jansson libpcre2-8 sndfile libmicrohttpd libpng libjpeg libwebp cmocka
APT_PKGS := build-essential pkg-config libopenblas-openmp-dev libjansson-dev libpcre2-dev libsndfile1-dev \
            libmicrohttpd-dev libpng-dev libjpeg-dev libwebp-dev libcmocka-dev
TEST_APT_PKGS := python3-numpy python3-scipy python3-pil python3-torch nodejs npm curl

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

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

.PHONY: all deps test-deps test demo bench clean asan test-asan fuzz soak

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
	/usr/bin/python3 -c 'import numpy, scipy, PIL, torch' 2>/dev/null || missing="$(TEST_APT_PKGS)"; \
	command -v node >/dev/null && command -v npm >/dev/null && command -v curl >/dev/null || missing="$(TEST_APT_PKGS)"; \
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

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libphi4mm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libphi4mm.a $(LDFLAGS) $(LDLIBS)

tests: $(TEST_BIN)

# The test command of the README and of CI. Ends with "N passed, M failed".
test: deps test-deps $(BUILD)/phi4mm $(TEST_BIN)
	@BUILD=$(BUILD) tests/run_all.sh

demo: deps $(BUILD)/phi4mm
	@scripts/demo.sh $(BUILD)/phi4mm

bench: deps $(BUILD)/phi4mm
	@scripts/bench.sh $(BUILD)/phi4mm

# Sanitizer build in its own folder; runs the whole suite under ASan+UBSan (+LSan).
test-asan:
	$(MAKE) BUILD=build-asan OPT=-O1 EXTRA_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  EXTRA_LDFLAGS="-fsanitize=address,undefined" test

clean:
	rm -rf $(BUILD) build-asan

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)
