"""The error every part of fl raises for a configuration that must not run: its own module, so the parts
that check their section of the config (data, models, the plan) never import fl.config."""


class ConfigError(ValueError):
    """A configuration that must not run."""


class RunInProgress(ConfigError):
    """The configuration is being run into the same results folder by another process: running it again would
    rename that run's rows away and put a second run's beside its done.json."""
