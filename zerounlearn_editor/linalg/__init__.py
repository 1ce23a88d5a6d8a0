"""Pure tensor mathematics of ZeroUnlearn and ZeroUnlearn-GD (no model access)."""
from __future__ import annotations

from .zerounlearn_gd import (
    nullspace_projector,
    objective,
    objective_gradient_wrt_F,
    objective_wrt_F,
    solve_exact,
    solve_gd,
)

__all__ = [
    "nullspace_projector",
    "objective",
    "objective_gradient_wrt_F",
    "objective_wrt_F",
    "solve_exact",
    "solve_gd",
]
