"""One module per verb: its click command and the work its body orchestrates (``kvdiag analyze`` is
:mod:`kvdiag.commands.analyze`, ...); the options and click types several verbs share are :mod:`.options`. The group,
``kvdiag --help`` and the exit-code mapping are :mod:`kvdiag.cli`. Nothing below this layer imports a command
(``tests/test_layers.py``)."""
