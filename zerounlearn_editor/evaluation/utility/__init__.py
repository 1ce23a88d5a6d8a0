"""Downstream utility tasks (GLUE-style and MMLU, few-shot; :mod:`.tasks`), scored by the log-probability of
each answer word; ``zerounlearn utility`` runs them over methods (:mod:`zerounlearn_editor.harness.utility`)."""
from zerounlearn_editor.evaluation.utility.scoring import choice_logprobs, score_tasks, task_scores
from zerounlearn_editor.evaluation.utility.tasks import TASKS, UtilityItem, load_task_items, parse_tasks

__all__ = ["TASKS", "UtilityItem", "load_task_items", "parse_tasks", "choice_logprobs", "score_tasks", "task_scores"]
