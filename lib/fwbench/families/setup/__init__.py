"""Setup (00_setup): the environment a run starts from, and whether each framework imports,
computes and compiles on its device."""
