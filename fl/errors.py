"""The error every part of fl raises for a configuration that must not run: its own module, so the parts
that refuse input outside fl.config (fl.data, fl.runtime.pool) need not import fl.config, which imports fl.data."""


class ConfigError(ValueError):
    """A configuration that must not run."""


class RunInProgress(ConfigError):
    """The configuration is being run into the same results folder by another process: running it again would
    rename that run's rows away and put a second run's beside its done.json."""


class Diverged(RuntimeError):
    """The global model left float32's range: finite updates summed past it. The run ends here, its rows kept;
    a run that should survive a client's blow-up bounds updates (fl.max_update_norm)."""
