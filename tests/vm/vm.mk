# Guest lab make fragment, included by the top-level Makefile.
#   make check-vm                  all scenarios (tests/vm/scenarios/*.sh)
#   make check-vm SCENARIO=raid5   one (or several, space-separated)
#   make check-vm SKIP_VM=1        skip with a reason (never under CI)
#   make clean-vm                  drop the cache (kernel, images, logs)
VM_MK_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))

.PHONY: check-vm clean-vm
# Scenarios with a "lab-sanitizer:" header run a sanitizer build.
check-vm: $(if $(SKIP_VM),,build-sanitize build-tsan)
	@SKIP_VM='$(SKIP_VM)' sh $(VM_MK_DIR)/run.sh $(SCENARIO)

clean-vm:
	rm -rf $(VM_MK_DIR)/.cache
