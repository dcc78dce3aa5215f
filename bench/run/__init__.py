"""`rlbench run`: ablations of cells, each cell in its own process (`cell.run_cell`), seeds, resume,
turn-taking cells, the regime map's grid."""
