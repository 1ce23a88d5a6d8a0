"""Plumbing: atomic output folders, offline mode, progress bars, shipped resources, the model zoo."""
