"""How anything is measured, whatever the family: device, precision, timers, statistics, FLOPs and the meters."""
