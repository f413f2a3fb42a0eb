class RegionalPrompt:
    """A class of the pack's own: no codec knows it, so it stays in the worker (ADR 0023)."""

    def __init__(self, mask, strength):
        self.mask = mask
        self.strength = strength

    def __repr__(self):
        return f"RegionalPrompt(strength={self.strength})"
