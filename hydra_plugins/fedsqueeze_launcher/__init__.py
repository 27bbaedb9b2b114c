"""fedsqueeze's Hydra launcher and sweeper, here because Hydra loads plugins only from the `hydra_plugins` namespace.
The launcher is ray_cells.py, the cell it runs fl/sweep.py, its config conf/hydra/launcher/ray_cells.yaml; the sweeper
(every cell validated before the first runs) is checked_sweeper.py, its config conf/hydra/sweeper/checked.yaml."""
