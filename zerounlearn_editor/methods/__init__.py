"""The unlearning methods: ZeroUnlearn and ZeroUnlearn-GD (ours), GA and NPO (training baselines).

Each method is a folder: ``config.py`` (its hyperparameters), ``solve.py`` (the pure tensor maths, no model
access) and ``method.py`` (the edit on a model, through the shared :mod:`zerounlearn_editor.engine`).
"""
