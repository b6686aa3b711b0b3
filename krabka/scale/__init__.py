"""Many roles in one process: admission of one more role, short collector
pauses, and rebalancing balanced roles by handover."""
