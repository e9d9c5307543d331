"""toolgym inside other trainers: TRL's ``GRPOTrainer`` (:mod:`toolgym.integrations.trl`) and
verifiers (:mod:`toolgym.integrations.verifiers`). Both are optional extras
(``pip install toolgym[trl]``, ``toolgym[verifiers]``); nothing else in toolgym imports this package.
"""
