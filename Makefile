# gmblock: nbdkit modules for fast, frugal block serving.
# SPDX-License-Identifier: BSD-3-Clause
#
#   make            build the modules and unit tests
#   make serve      install what is missing, build, serve a demo disk
#   make check      install what is missing, build, run every test
#   make install    install into nbdkit's plugindir and filterdir, the
#                   man pages and the systemd units (contrib/systemd)
#   make deb        build the Debian package into dist/ (DEBDIR=)
#
#   make coverage   line and branch coverage of the host suite
#
# B=DIR builds out of tree; SANITIZE=1 builds with ASan+UBSan, TSAN=1
# with ThreadSanitizer, COVERAGE=1 with gcov counters.

CC       ?= gcc
B        ?= .
CFLAGS   ?= -O2 -g
WARN     := -Wall -Wextra -Werror -Wno-unused-parameter
ALL_CFLAGS = -std=gnu11 -fPIC -fvisibility=hidden $(WARN) $(CFLAGS) $(SAN)
CPPFLAGS += -D_GNU_SOURCE -Icommon
LIBS     := -luring -lpthread
ifeq ($(SANITIZE),1)
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif
ifeq ($(TSAN),1)
SAN      := -fsanitize=thread -fno-omit-frame-pointer
endif
# -O0 (scripts/coverage.sh) makes gcc 12 see truncations it does not
# at -O2, in a test's snprintf of paths it measured.
ifeq ($(COVERAGE),1)
SAN      := --coverage -fprofile-update=atomic -Wno-format-truncation \
            -include tests/coverage-exit.h
endif

PLUGINDIR := $(shell pkg-config --variable=plugindir nbdkit 2>/dev/null)
FILTERDIR := $(shell pkg-config --variable=filterdir nbdkit 2>/dev/null)
GMBLOCK_VERSION := $(shell sed -n 's/^\#define GMBLOCK_VERSION "\(.*\)"/\1/p' common/version.h)
PREFIX    ?= /usr/local
BINDIR    ?= $(PREFIX)/bin
MANDIR    ?= $(PREFIX)/share/man
DOCDIR    ?= $(PREFIX)/share/doc/gmblock
# Searched by systemd after /etc/systemd/system (systemd-analyze unit-paths).
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSTEMD_UNITS  := contrib/systemd/gmblock@.service contrib/systemd/gmblock@.socket
# What the units' README and settings file explain, beside the units.
SYSTEMD_DOCS   := contrib/systemd/README.md contrib/systemd/example.conf

COMMON_SRC := $(wildcard common/*.c)
PLUGIN_SRC := $(wildcard plugins/gmblock/*.c)
UNIT_SRC   := $(wildcard tests/unit/test-*.c)
FILTERS    := $(notdir $(patsubst %/,%,$(dir $(wildcard filters/*/*.c))))
FILTERS    := $(sort $(FILTERS))

COMMON_OBJ := $(COMMON_SRC:%.c=$(B)/%.o)
PLUGIN_OBJ := $(PLUGIN_SRC:%.c=$(B)/%.o)
COMMON_LIB := $(B)/common/libgmcommon.a
PLUGIN_SO  := $(B)/plugins/gmblock/nbdkit-gmblock-plugin.so
TOPOLOGY   := $(B)/gmblock-topology
UNIT_BIN   := $(UNIT_SRC:%.c=$(B)/%)
FUZZ_BIN   := $(patsubst %.c,$(B)/%,$(wildcard tests/fuzz/fuzz-*.c))

FILTER_SO  := $(foreach f,$(FILTERS),$(B)/filters/$(f)/nbdkit-gmblock-$(f)-filter.so)

# The RDMA transport (docs/rdma-design.md): the gmblock-rdma filter
# (server side, filters/rdma) and bridge plugin; only they link verbs.
RDMA_LIBS  := -libverbs -lrdmacm
BRIDGE_OBJ := $(patsubst %.c,$(B)/%.o,$(wildcard plugins/gmblock-rdma/*.c))
BRIDGE_SO  := $(B)/plugins/gmblock-rdma/nbdkit-gmblock-rdma-plugin.so

MODULES    := $(PLUGIN_SO) $(BRIDGE_SO) $(FILTER_SO)

# Man pages: one POD source per module, beside its code, made into
# $(B)/man/man1/NAME.1 so that `man -M $(B)/man NAME` finds them too.
MAN_POD    := $(wildcard plugins/*/*.pod plugins/gmblock/cmd/*.pod filters/*/*.pod)
MAN_PAGES  := $(patsubst %.pod,$(B)/man/man1/%.1,$(notdir $(MAN_POD)))
vpath %.pod $(sort $(dir $(MAN_POD)))

.PHONY: all deps serve check check-unit check-integration check-sanitize build-sanitize build-tsan check-tsan coverage \
        check-tsan-quick \
        install uninstall clean fuzz man modules deb
.DELETE_ON_ERROR:

all: $(MODULES) $(TOPOLOGY) $(UNIT_BIN) $(B)/tests/rdma-badclient $(B)/tests/rdma-badserver $(B)/tests/rdma-mwprobe man

man: $(MAN_PAGES)
$(B)/man/man1/%.1: %.pod
	@mkdir -p $(@D)
	pod2man --errors=die --section=1 --center=gmblock --release="gmblock $(GMBLOCK_VERSION)" \
	        --name=$(basename $(notdir $@)) $< $@

$(B)/%.o: %.c $(wildcard common/*.h plugins/*/*.h filters/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c -o $@ $<

$(COMMON_LIB): $(COMMON_OBJ)
	rm -f $@
	ar rcs $@ $^

$(PLUGIN_SO): $(PLUGIN_OBJ) $(COMMON_LIB)
	$(CC) $(ALL_CFLAGS) -shared $(LDFLAGS) -o $@ $(PLUGIN_OBJ) $(COMMON_LIB) $(LIBS) -lpci

$(BRIDGE_SO): $(BRIDGE_OBJ) $(COMMON_LIB)
	$(CC) $(ALL_CFLAGS) -shared $(LDFLAGS) -o $@ $(BRIDGE_OBJ) $(COMMON_LIB) $(RDMA_LIBS) -lpthread
$(B)/filters/rdma/nbdkit-gmblock-rdma-filter.so: LIBS += $(RDMA_LIBS) -lpci
# A misbehaving RDMA client for the lab (tests/vm/scenarios/rdma-malformed.sh).
$(B)/tests/rdma-badclient: tests/rdma-badclient.c $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(COMMON_LIB) $(RDMA_LIBS)
# ... and a misbehaving RDMA server for the bridge (rdma-badserver.sh).
$(B)/tests/rdma-badserver: tests/rdma-badserver.c $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(COMMON_LIB) $(RDMA_LIBS)
# Does the device do type-2 memory windows as the bridge needs (rdma-mwprobe.sh)?
$(B)/tests/rdma-mwprobe: tests/rdma-mwprobe.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(RDMA_LIBS) -lpthread

# The user command that shows the PCI topology (common/topology.c).
$(TOPOLOGY): plugins/gmblock/cmd/gmblock-topology.c $(COMMON_LIB)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(COMMON_LIB) -lpci

# Each filters/NAME/ folder builds nbdkit-gmblock-NAME-filter.so.
define filter_rule
$(B)/filters/$(1)/nbdkit-gmblock-$(1)-filter.so: $(patsubst %.c,$(B)/%.o,$(wildcard filters/$(1)/*.c)) $(COMMON_LIB)
	$$(CC) $$(ALL_CFLAGS) -shared $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(COMMON_LIB) $$(LIBS)
endef
$(foreach f,$(FILTERS),$(eval $(call filter_rule,$(f))))

$(B)/tests/unit/%: tests/unit/%.c tests/unit/unit.h $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(COMMON_LIB) $(LIBS) -lpci $(UNIT_LDFLAGS)

# Unit tests that compile a module's source in (see the test).
$(B)/tests/unit/test-cache-policy: filters/cache/policy.c filters/cache/cache.h
$(B)/tests/unit/test-uring-faults: plugins/gmblock/engine-shared.c plugins/gmblock/engine-sync.c plugins/gmblock/gmblock.h \
  tests/unit/uring-wrap.h
# ... and that interpose on liburing to inject its failures.
$(B)/tests/unit/test-uring-faults: UNIT_LDFLAGS = -Wl,--wrap=io_uring_submit_and_wait \
  -Wl,--wrap=io_uring_submit -Wl,--wrap=__io_uring_get_cqe
$(B)/tests/unit/test-failstop: plugins/gmblock/failstop.c plugins/gmblock/gmblock.h
$(B)/tests/unit/test-rdma-fence: filters/rdma/fence.c filters/rdma/rdma.h
$(B)/tests/unit/test-rdma-fence-serve: filters/rdma/fence.c filters/rdma/serve.c filters/rdma/disconnect.c filters/rdma/rdma.h
$(B)/tests/unit/test-rdma-fence-serve: UNIT_LDFLAGS = $(RDMA_LIBS) \
  -Wl,--wrap=rdma_disconnect -Wl,--wrap=rdma_notify
$(B)/tests/unit/test-failstop: UNIT_LDFLAGS = -Wl,--wrap=fdatasync
$(B)/tests/unit/test-rdma-disconnect: filters/rdma/disconnect.c filters/rdma/rdma.h
$(B)/tests/unit/test-rdma-disconnect: UNIT_LDFLAGS = $(RDMA_LIBS) \
  -Wl,--wrap=rdma_disconnect -Wl,--wrap=rdma_notify -Wl,--wrap=ibv_modify_qp
# Count the waits of the pool and of the range locks (see the tests).
$(B)/tests/unit/test-pool $(B)/tests/unit/test-rangelock: tests/unit/cond-waits.h
$(B)/tests/unit/test-pool $(B)/tests/unit/test-rangelock: UNIT_LDFLAGS = -Wl,--wrap=pthread_cond_wait
$(B)/tests/unit/test-abandoned: UNIT_LDFLAGS = -Wl,--wrap=fdatasync -Wl,--wrap=pwrite
$(B)/tests/unit/test-bridge-abandon $(B)/tests/unit/test-bridge-ring: plugins/gmblock-rdma/bridge.c plugins/gmblock-rdma/bridge.h tests/unit/fake-bridge.h
$(B)/tests/unit/test-bridge-abandon $(B)/tests/unit/test-bridge-ring: UNIT_LDFLAGS = $(RDMA_LIBS)
# conn.c over a fake queue pair (its teardown's verbs wrapped).
$(B)/tests/unit/test-bridge-conn: plugins/gmblock-rdma/conn.c plugins/gmblock-rdma/bridge.h
$(B)/tests/unit/test-bridge-conn: UNIT_LDFLAGS = $(RDMA_LIBS) -Wl,--wrap=ibv_modify_qp \
  -Wl,--wrap=rdma_disconnect -Wl,--wrap=rdma_create_event_channel \
  -Wl,--wrap=rdma_destroy_qp -Wl,--wrap=ibv_destroy_cq -Wl,--wrap=ibv_destroy_comp_channel \
  -Wl,--wrap=ibv_dereg_mr -Wl,--wrap=rdma_destroy_id -Wl,--wrap=rdma_destroy_event_channel
# Stops the SIGUSR1 handler's write, raises the signal as it goes on (see the test).
$(B)/tests/unit/test-statsout-usr1: UNIT_LDFLAGS = -Wl,--wrap=write -Wl,--wrap=sigaction
$(B)/tests/unit/test-lost-buffer: plugins/gmblock/io.c plugins/gmblock/engine.c \
  plugins/gmblock/engine-shared.c plugins/gmblock/engine-sync.c plugins/gmblock/gmblock.h \
  tests/unit/uring-wrap.h
$(B)/tests/unit/test-lost-buffer: UNIT_LDFLAGS = -Wl,--wrap=io_uring_submit_and_wait \
  -Wl,--wrap=io_uring_submit -Wl,--wrap=__io_uring_get_cqe \
  -Wl,--wrap=preadv2 -Wl,--wrap=pwritev2

# libFuzzer targets: tests/fuzz/fuzz-NAME.c fuzzes common/NAME.c, or the
# files FUZZ_SRC_NAME lists (linked with FUZZ_LIBS_NAME).  Built with
# clang by tests/test-fuzz-*.sh (make fuzz), not by make all.
FUZZ_CC    ?= clang
FUZZ_FLAGS := -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
              -fno-sanitize-recover=all $(WARN)
FUZZ_SRC_options   := common/sizes.c common/rdmaaddr.c common/topology.c common/devmem.c
FUZZ_LIBS_options  := -lpci
FUZZ_SRC_stripegeo := common/stripegeo.c common/registry.c common/sizes.c common/nbdkitargs.c
FUZZ_SRC_abstate   := common/abandoned.c
fuzz: $(FUZZ_BIN)
$(B)/tests/fuzz/fuzz-%: tests/fuzz/fuzz-%.c $(wildcard common/*.c common/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_FLAGS) -o $@ $< $(or $(FUZZ_SRC_$*),common/$*.c) $(FUZZ_LIBS_$*)

# Loaded into nbdkit in the sanitizer run only (see the file).
$(B)/tests/sanitizer-shim.so: tests/sanitizer-shim.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -fPIC -shared $(WARN) -O2 -o $@ $<

deps:
	@scripts/install-deps.sh check

serve:
	@scripts/install-deps.sh serve
	@$(MAKE) --no-print-directory all
	@STACK='$(STACK)' scripts/serve.sh "$(FILE)"

check-unit: $(UNIT_BIN)
check-integration: all

# The host suites and the guest lab side by side: scripts/check.sh says
# how and why.
# The builds before the lanes start use every core: nothing else runs
# yet.  The sanitizer builds too: made by the lab lane (check-vm needs
# them), they held back its first guests by about two minutes while the
# host suite ran, when the lab was make check's longest lane (a clean
# tree: all three builds in 51 s with -j2).
check:
	@scripts/install-deps.sh check
	@$(MAKE) --no-print-directory -j$(shell nproc) all build-sanitize build-tsan
	@MAKE='$(MAKE)' scripts/check.sh

# The whole host suite again, with the modules built with ASan+UBSan
# and the sanitizer runtimes preloaded into nbdkit.
check-sanitize: build-sanitize
	GMBLOCK_BUILDDIR=$(CURDIR)/.build-sanitize GMBLOCK_SANITIZE=1 tests/run

# The ASan+UBSan and the TSan builds of the modules (and the shim that
# keeps the sanitizers out of nbdkit's children), for check-sanitize,
# check-tsan and the lab's scenarios with a "lab-sanitizer:" header.
# make check makes them before its lanes start; check-vm, check-sanitize
# and check-tsan make them too, so two run at once wait for each other
# (flock on the folder).
build-sanitize build-tsan: build-%:
	@mkdir -p .build-$*
	@flock .build-$* $(MAKE) --no-print-directory B=.build-$* \
	    $(if $(filter tsan,$*),TSAN=1,SANITIZE=1) all .build-$*/tests/sanitizer-shim.so

# The same with ThreadSanitizer: libtsan preloaded into nbdkit, the
# unit tests instrumented themselves; tests/tsan.supp says what is no
# finding.  TESTS= picks tests by name as tests/run's patterns do.
check-tsan: build-tsan
	GMBLOCK_BUILDDIR=$(CURDIR)/.build-tsan GMBLOCK_TSAN=1 tests/run $(TESTS)

# What make check runs under TSan (under two minutes here; the whole
# suite takes 11 to 13): every unit test, the run's own control, and
# the integration tests that race the most threads over shared state.
TSAN_QUICK := $(notdir $(UNIT_BIN)) test-tsan-reports test-stats-first-write \
  test-cache-race test-cache-multiconn test-cache-zero-race \
  test-cache-flush-inflight test-rmw-lock test-readahead-calls
check-tsan-quick:
	@$(MAKE) --no-print-directory check-tsan TESTS="$(TSAN_QUICK)"

# Line and branch coverage of the host suite into .build-cov (about
# ten minutes here; TESTS= picks tests by name).
coverage:
	@scripts/install-deps.sh coverage
	@scripts/coverage.sh $(TESTS)

# What make install installs, and only that (debian/rules builds it).
modules: $(MODULES) $(TOPOLOGY) $(MAN_PAGES)

# The .deb, built from a clean copy of the tree (scripts/build-deb.sh).
DEBDIR ?= dist
deb:
	@scripts/install-deps.sh deb
	@scripts/build-deb.sh $(DEBDIR)

install: modules
	@[ -n "$(PLUGINDIR)" ] && [ -n "$(FILTERDIR)" ] || { echo "make install: pkg-config knows no nbdkit plugindir/filterdir: is nbdkit-plugin-dev installed? (scripts/install-deps.sh build; or give PLUGINDIR= and FILTERDIR=)" >&2; exit 1; }
	install -d $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	install -d $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(FILTERDIR)
	install -m 755 $(PLUGIN_SO) $(BRIDGE_SO) $(DESTDIR)$(PLUGINDIR)/
	install -d $(DESTDIR)$(BINDIR)
	install -m 755 $(TOPOLOGY) $(DESTDIR)$(BINDIR)/
	$(if $(FILTER_SO),install -m 755 $(FILTER_SO) $(DESTDIR)$(FILTERDIR)/)
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	install -m 644 $(SYSTEMD_UNITS) $(DESTDIR)$(SYSTEMDUNITDIR)/
	install -d $(DESTDIR)$(DOCDIR)/systemd
	install -m 644 $(SYSTEMD_DOCS) $(DESTDIR)$(DOCDIR)/systemd/

uninstall:
	rm -f $(DESTDIR)$(PLUGINDIR)/nbdkit-gmblock-plugin.so $(DESTDIR)$(PLUGINDIR)/nbdkit-gmblock-rdma-plugin.so
	rm -f $(DESTDIR)$(BINDIR)/gmblock-topology
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN_PAGES)))
	rm -f $(addprefix $(DESTDIR)$(SYSTEMDUNITDIR)/,$(notdir $(SYSTEMD_UNITS)))
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/systemd/,$(notdir $(SYSTEMD_DOCS)))
	-rmdir $(DESTDIR)$(DOCDIR)/systemd $(DESTDIR)$(DOCDIR) 2>/dev/null
	rm -f $(foreach f,$(FILTERS),$(DESTDIR)$(FILTERDIR)/nbdkit-gmblock-$(f)-filter.so)

clean: $(if $(wildcard tests/vm/vm.mk),clean-vm)
	rm -f $(COMMON_OBJ) $(PLUGIN_OBJ) $(BRIDGE_OBJ) $(COMMON_LIB) $(MODULES) $(TOPOLOGY) $(UNIT_BIN) $(FUZZ_BIN) $(B)/tests/rdma-badclient $(B)/tests/rdma-badserver $(B)/tests/rdma-mwprobe
	rm -f $(foreach f,$(FILTERS),$(B)/filters/$(f)/*.o)
	rm -rf $(B)/man
	rm -rf .build-sanitize .build-tsan .build-cov

-include tests/vm/vm.mk
