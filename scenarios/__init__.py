"""Runnable scenarios, one question each. ``podsim list`` shows them; ``podsim run NAME`` runs one."""
