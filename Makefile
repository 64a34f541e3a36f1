# The two commands of the README:  make run  (the main job)  and  make test  (everything CI checks).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test

$(STAMP): requirements.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

venv: $(STAMP)

run: venv
	$(BIN)/python -m lengthgen

test: venv
	$(BIN)/python -m pytest -q tests
