# unitlease: see README.md.
export PATH := /usr/local/go/bin:$(PATH)
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOTEST      ?= $(GO) test -race -count=1

.PHONY: all test unit lint check-spec demo bench

all: test

# Everything CI runs.
test: lint unit check-spec

# -short leaves the full sweep to check-spec, which runs it without the race
# detector (the checker is single-goroutine code; the sweep is ~5x slower
# under -race for no gain).
unit:
	$(GOTEST) -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# The spec as configured in spec/Lease.cfg holds; one second less does not;
# then the sweep of ReplyMax 0..20.
check-spec:
	$(GO) run ./spec/cmd/leasecheck -lease-span 36 -reply-max 0
	@$(GO) run ./spec/cmd/leasecheck -lease-span 35 -reply-max 0 -json > /dev/null; \
	  rc=$$?; if [ $$rc -ne 1 ]; then echo "LeaseSpan 35 should violate ProcessExclusion (exit 1), got exit $$rc"; exit 1; fi; \
	  echo "LeaseSpan 35, ReplyMax 0: ProcessExclusion violated, as it must be"
	$(GO) run ./spec/cmd/leasecheck -sweep
	$(GO) test -count=1 -run 'SafeMinimumLaw|Sweep' ./spec

bench:
	$(GO) test -run XXX -bench . ./spec

# The demo: two containers, a local Redis, unitlease and a demo unit on
# both; a power cut of the node that runs it; the other takes over. As root
# on Debian 12; installs what it needs first.
demo:
	@if [ "$$(id -u)" != 0 ]; then echo "make demo needs root: it boots containers"; exit 1; fi
	@command -v redis-server >/dev/null && command -v systemd-nspawn >/dev/null && command -v debootstrap >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    redis-server systemd-container debootstrap >/dev/null; }
	$(GO) run ./vm-tests/demo
