"""The engine every method shares: requests, keys, statistics ``C0``, neutral targets, the edit pipeline.

It reads no method's own keys: the methods pass what they need (:mod:`zerounlearn_editor.methods`).
"""
