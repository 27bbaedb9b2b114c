"""fedsqueeze's Hydra launcher, here because Hydra loads launchers only from the `hydra_plugins` namespace.
The code is fl/sweep.py; the config, conf/hydra/launcher/ray_cells.yaml."""
