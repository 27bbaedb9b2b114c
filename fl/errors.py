"""The error every part of fl raises for a configuration that must not run: its own module, so the parts
that check their section of the config (data, models, the plan) never import fl.config."""


class ConfigError(ValueError):
    """A configuration that must not run."""
