# Two commands do all set-up on a fresh machine (Python 3.11 and make):
#   make book   - create .venv if missing, install, build the site into _build/html (strict)
#   make test   - the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# Optional extras installed with the course (CI adds torch: EXTRAS=dev,torch).
EXTRAS ?= dev
VENV   := .venv
BIN    := $(VENV)/bin
comma  := ,
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: book test lab clean exercises lint bench venv

# Headless runs (book build, tests) execute the chapters' widget cells once at their defaults
# instead of starting live widgets, which can deadlock nbclient (jupyter/nbclient#312).
export TPP_STATIC := 1

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11'"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

## The static site, executed and built strictly: any warning, broken reference or raising cell fails.
book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going

## The whole test suite: library, grader, notebooks (chapters and solutions run top to bottom), site.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup --nbmake --nbmake-timeout=600 tests chapters solutions

## JupyterLab on the course, with a kernel that imports tpp.
lab: $(STAMP)
	TPP_STATIC= $(BIN)/jupyter lab --notebook-dir=.

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
