"""toolgym inside other trainers: TRL's ``GRPOTrainer`` (:mod:`toolgym.integrations.trl`) and
verifiers (:mod:`toolgym.integrations.verifiers`). Both are optional extras
(``pip install toolgym[trl]``, ``toolgym[verifiers]``); nothing else in toolgym imports this package.
"""
if __name__ != "toolgym.integrations":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.integrations: import toolgym.integrations (after `pip install -e .` or `make install`), not {__name__!r}")
