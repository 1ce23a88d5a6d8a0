"""ZeroUnlearn (few-shot, multiplicative): ``W' = D W``."""
