# Two commands do all set-up on a fresh machine (Python >= 3.11 and make):
#   make book   - create .venv if missing, install, build the site into _build/html (strict)
#   make test   - the whole test suite
# The first Python >= 3.11 found on PATH (override: make PYTHON=/path/to/python3.12).
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3; do \
	  $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 \
	  && { command -v $$p; break; }; done)
# Optional extras installed with the course (CI adds torch: EXTRAS=dev,torch).
EXTRAS ?= dev
VENV   := .venv
BIN    := $(VENV)/bin
comma  := ,
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
# The book (and its PDF) is built with the torch extra added: chapters 12 and 18 run their evidence
# on PyTorch 2.13 (the extra pins torch==2.13.0, the CPU build), and the build fails rather than
# publish a placeholder where torch is missing (TPP_REQUIRE_TORCH=1).
BOOK_EXTRAS := $(if $(filter torch,$(subst $(comma), ,$(EXTRAS))),$(EXTRAS),$(EXTRAS)$(comma)torch)
BOOK_STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(BOOK_EXTRAS))

.PHONY: book test lab clean exercises lint bench venv pdf hooks

# Headless runs (book build, tests) execute the chapters' widget cells once at their defaults
# instead of starting live widgets, which can deadlock nbclient (jupyter/nbclient#312).
export TPP_STATIC := 1
# Kernels read the course's IPython profile: figures as SVG, sharp at any zoom.
export IPYTHONDIR := $(CURDIR)/.ipython

# A .venv left broken (its python or pip does not run) or made by another interpreter than
# $(PYTHON) loses its stamp, so that the rule below recreates it (checked at every run).
VENV_STATE := $(shell [ -n "$(PYTHON)" ] && [ -d $(VENV) ] && { \
	  $(BIN)/python -m pip --version >/dev/null 2>&1 || echo broken; } && \
	  [ "$$($(BIN)/python -c 'import sys; print(sys.base_prefix)' 2>/dev/null)" != \
	    "$$($(PYTHON) -c 'import sys; print(sys.base_prefix)' 2>/dev/null)" ] && echo foreign)
ifneq ($(strip $(VENV_STATE)),)
$(shell rm -f $(VENV)/.installed-*)
endif

venv: $(STAMP)

# The interpreter is checked first; a .venv made by another interpreter, or left broken (its
# python or pip does not run), is removed and created again, with a message saying why.
# One stamp per set of extras: .venv/.installed-dev-torch installs ".[dev,torch]".
$(VENV)/.installed-%: pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no Python >= 3.11 on PATH; install one or run" \
	  "'make PYTHON=/path/to/python3.11'"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: $(PYTHON) is not Python >= 3.11 (the course needs 3.11 or newer)"; exit 1; }
	@if [ -d $(VENV) ]; then \
	  if ! $(BIN)/python -m pip --version >/dev/null 2>&1; then \
	    echo "$(VENV) is broken (its python or pip does not run): recreating it"; rm -rf $(VENV); \
	  elif [ "$$($(BIN)/python -c 'import sys; print(sys.base_prefix)')" != \
	         "$$($(PYTHON) -c 'import sys; print(sys.base_prefix)')" ]; then \
	    echo "$(VENV) was made by another interpreter than $(PYTHON): recreating it"; \
	    rm -rf $(VENV); \
	  fi; \
	fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(subst -,$(comma),$*)]"
	touch $@

## The static site, executed and built strictly: any warning, broken reference or raising cell fails.
## The chapters are executed in parallel first (_ext/tpp_execute.py; TPP_BUILD_JOBS=1: one at a
## time); _ext/quick_start.py spares jupyter-book a slow import that it does not use.
## It also packs the course for a reader of the site alone (_build/html/tpp-course.zip: the
## notebooks and the tpp wheel, see _ext/tpp_book.py).
book: $(BOOK_STAMP)
	TPP_REQUIRE_TORCH=1 $(BIN)/python _ext/quick_start.py $(BIN)/jupyter-book build . -W -n --keep-going

## One PDF of the whole book: the single-page HTML build printed by the machine's Chromium.
pdf: $(BOOK_STAMP)
	TPP_REQUIRE_TORCH=1 $(BIN)/python _ext/quick_start.py $(BIN)/jupyter-book build . --builder singlehtml -W -n --keep-going
	$(BIN)/python _ext/print_pdf.py _build/singlehtml/intro.html _build/pdf/book.pdf

## The whole test suite: library, grader, notebooks (solutions run top to bottom; a chapter is
## checked from the book build's execution in _build/.jupyter_cache when that is current, and
## run top to bottom otherwise: tests/nbcache.py), site.
## Each test file runs on one worker (its module fixtures built once), the costliest files first
## (tests/conftest.py). Temporary files go to a folder of this run only: under the shared /tmp/pytest-of-USER, another
## user's pytest session on the same machine deletes older sessions' folders while tests use them.
test: $(STAMP)
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/tpp-pytest-XXXXXX"); \
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --nbmake --nbmake-timeout=600 \
	  --durations=25 --basetemp="$$tmp" tests chapters solutions; rc=$$?; rm -rf "$$tmp"; exit $$rc

## Strip outputs from notebooks when git stages them (a clean filter, see .gitattributes), so that
## running a chapter in JupyterLab never puts outputs into a commit. Cell ids are kept (--keep-id):
## the grader matches answer cells by id, and renumbered ids would conflict in every merge.
## Git runs the filter from the top of each work tree, so the relative path finds its own .venv.
hooks: $(STAMP)
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  git config --local filter.nbstripout.clean "$(BIN)/nbstripout --keep-id" && \
	  git config --local filter.nbstripout.smudge cat && \
	  git config --local diff.ipynb.textconv "$(BIN)/nbstripout --keep-id -t" && \
	  echo "git: notebooks are staged without outputs (nbstripout filter, see .gitattributes)"; \
	fi

## JupyterLab on the course, with a kernel that imports tpp (as root too, e.g. in a container).
## Learners work in work/ (not tracked by git): the exercises are copied there once.
lab: $(STAMP) hooks
	@mkdir -p work && cp -n exercises/*.ipynb work/ 2>/dev/null; \
	  echo "Your exercises are in work/ (your copies; exercises/ is regenerated by 'tpp assign')."
	TPP_STATIC= $(BIN)/jupyter lab --notebook-dir=. \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

## Regenerate exercises/ from solutions/.
exercises: $(STAMP)
	$(BIN)/tpp assign

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	for f in bench/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf _build .pytest_cache .hypothesis
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
