"""One room per notebook family: the logic each notebook drives, tested on its own."""
