# Two entry points, each bootstrapping everything it needs:
#   make demo   train TRPO on Swimmer-v5 with plotting on; videos and curves under runs/demo/
#               (the library's defaults: a 3% CPU budget for plotting, and the final policy's video)
#   make test   the whole test suite (real TensorFlow, MuJoCo, processes, Xvfb, Redis, Chromium):
#               about 15 minutes from a fresh clone on 2 idle cores, set-up included
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: demo test test-busy test-quick style venv format bench clean

$(STAMP): setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[cpu,test,redis,tensorboard,view3d]"
	@touch $(STAMP)

venv: $(STAMP)

# Batches of 10000 steps: ~0.5-s iterations on 2 cores, where the default budget shows a video
# per 10 iterations and records every policy (at 5000, ~0.3 s, it showed 4 videos in 60 and said
# why: README, "Known gaps").
demo: $(STAMP)
	@scripts/system_deps.sh demo
	$(PY) examples/trpo_swimmer.py --exp-name demo --n-itr 60 --n-parallel 2 --batch-size 10000

# Most tests wait on processes, servers and browsers more than they compute: they run
# TEST_WORKERS files at a time (pytest-xdist). Those marked `alone` saturate the machine or time
# what a loaded one would skew; they run afterwards, one at a time. Both parts always run.
TEST_WORKERS ?= 3

test: $(STAMP) style
	@scripts/system_deps.sh test
	@$(PY) -m pytest tests -m "not alone" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS); \
		shared=$$?; \
		$(PY) -m pytest tests -m alone $(PYTEST_ARGS); \
		alone=$$?; \
		test $$shared -eq 0 && test $$alone -eq 0

# The parallel part on a machine made busy on purpose: TEST_BURNERS busy processes (one a core by
# default) for the whole run, so that races that need load show up here before they do in CI.
TEST_BURNERS ?= $(shell nproc 2>/dev/null || echo 2)

test-busy: $(STAMP)
	@scripts/system_deps.sh test
	TEST_BURNERS=$(TEST_BURNERS) $(PY) -m pytest tests -m "not alone" -n $(TEST_WORKERS) \
		--dist loadfile $(PYTEST_ARGS)

# YAPF (.style.yapf) must have nothing to change; `make format` applies it.
style: $(STAMP)
	@$(VENV)/bin/yapf --diff -r async_plotter tests benchmarks examples > .yapf.diff \
		|| { cat .yapf.diff; echo "yapf would reformat the files above: run 'make format'" >&2; \
		rm -f .yapf.diff; exit 1; }
	@rm -f .yapf.diff

# The quick subset: everything not marked slow.
test-quick: $(STAMP)
	@scripts/system_deps.sh test
	$(PY) -m pytest tests -m "not slow" $(PYTEST_ARGS)

format: $(STAMP)
	$(VENV)/bin/yapf -i -r async_plotter tests benchmarks examples

bench: $(STAMP)
	@scripts/system_deps.sh demo
	$(PY) benchmarks/update_cost.py

clean:
	rm -rf $(VENV) runs *.egg-info
