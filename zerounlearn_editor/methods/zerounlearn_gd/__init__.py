"""ZeroUnlearn-GD (many facts, additive): ``W' = W + E P_m``."""
