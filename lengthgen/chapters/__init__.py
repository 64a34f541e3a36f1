"""The chapters' presentation, apart from the science.

The rule: one module per chapter, named after it (``ch10_selection.py`` for ``book/10_what_training_selects``,
``ch10b_prediction.py`` for ``book/10b_prediction_before_training``), holding that chapter's tables (rows and
headers), glued number dictionaries, verdict words and sentences, and figure assembly. What the chapter computes
(training, solving, measuring, fitting) stays in the science modules it imports (``forecast``, ``selection``,
``maxmargin``, ...); a chapter module only turns their results into what the page shows.

The science core (config, task, encodings, model, optim, train, evaluate, kernel, dilution, maxmargin, engine,
draws, tables, thresholds, uncertainty, cache) imports nothing from here: ``tests/test_import_graph.py`` checks it.
Prose stays in the notebook's markdown, with the numbers glued in; a sentence built here is a list of what is
left to move (README, "where things are").
"""
