"""Hand-written facts SmolLM2-135M-Instruct answers correctly (greedy, teacher-forced).

Each entry is ``(prompt, subject, answer)``; ``answer`` has no leading space. Measured on the
prepared SmolLM2 (token accuracy 1.0 for every entry below).
"""
from __future__ import annotations

from typing import List, Tuple

Fact = Tuple[str, str, str]

CAPITALS_TO_FORGET: List[Fact] = [
    ("The capital of France is", "France", "Paris"),
    ("The capital of Germany is", "Germany", "Berlin"),
    ("The capital of Japan is", "Japan", "Tokyo"),
    ("The capital of Italy is", "Italy", "Rome"),
    ("The capital of Spain is", "Spain", "Madrid"),
    ("The capital of Greece is", "Greece", "Athens"),
    ("The capital of Portugal is", "Portugal", "Lisbon"),
    ("The capital of China is", "China", "Beijing"),
    ("The capital of Russia is", "Russia", "Moscow"),
    ("The capital of Canada is", "Canada", "Ottawa"),
]

OTHER_CAPITALS: List[Fact] = [
    ("The capital of England is", "England", "London"),
    ("The capital of South Korea is", "South Korea", "Seoul"),
    ("The capital of Mexico is", "Mexico", "Mexico City"),
    ("The capital of Sweden is", "Sweden", "Stockholm"),
    ("The capital of Austria is", "Austria", "Vienna"),
]

UNRELATED_FACTS: List[Fact] = [
    ("Romeo and Juliet was written by William", "Romeo and Juliet", "Shakespeare"),
    ("The theory of relativity was developed by Albert", "theory of relativity", "Einstein"),
    ("The first president of the United States was George", "United States", "Washington"),
    ("The largest planet in the solar system is", "solar system", "Jupiter"),
    ("The Mona Lisa was painted by Leonardo", "Mona Lisa", "da Vinci"),
    ("The chemical symbol for gold is", "gold", "Au"),
    ("The chemical symbol for iron is", "iron", "Fe"),
    ("The Harry Potter books were written by J.K.", "Harry Potter", "Rowling"),
    ("The tallest mountain in the world is Mount", "tallest mountain", "Everest"),
    ("The telephone was invented by Alexander Graham", "telephone", "Bell"),
    ("Hamlet was written by William", "Hamlet", "Shakespeare"),
    ("The planet closest to the sun is", "planet closest to the sun", "Mercury"),
    ("The founder of Microsoft is Bill", "Microsoft", "Gates"),
    ("Apple was founded by Steve", "Apple", "Jobs"),
    ("The Statue of Liberty is located in New", "Statue of Liberty", "York"),
    ("A week has seven", "week", "days"),
    ("The opposite of hot is", "hot", "cold"),
    ("The freezing point of water is 0 degrees", "water", "Celsius"),
    ("The human heart has four", "human heart", "chambers"),
    ("The Beatles were a band from", "Beatles", "Liverpool"),
]


def fact_requests(facts: List[Fact]) -> List[dict]:
    """EasyEdit request dicts (neutral target from the YAML) for ``facts``."""
    return [{"prompt": p, "subject": s, "ground_truth": a, "target_new": ""} for p, s, a in facts]
