"""How a campaign runs: the campaign file, notebook parameters, the runner and its manifest, the environment it records."""
