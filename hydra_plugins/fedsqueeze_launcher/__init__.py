"""fedsqueeze's Hydra launcher, here because Hydra loads launchers only from the `hydra_plugins` namespace.
The launcher is ray_cells.py, the cell it runs fl/sweep.py, its config conf/hydra/launcher/ray_cells.yaml."""
