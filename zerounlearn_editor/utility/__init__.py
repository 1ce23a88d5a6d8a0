"""Downstream utility evaluation (``zerounlearn utility``): GLUE-style tasks and MMLU, few-shot,
scored by the log-probability of each answer word. See :mod:`.tasks` for the prompts."""
from .runner import UtilityConfig, format_utility_table, plot_utility, run_utility, score_tasks, task_scores
from .scoring import choice_logprobs
from .tasks import TASKS, UtilityItem, load_task_items, parse_tasks

__all__ = [
    "TASKS", "UtilityItem", "UtilityConfig", "load_task_items", "parse_tasks", "choice_logprobs",
    "score_tasks", "task_scores", "run_utility", "plot_utility", "format_utility_table",
]
