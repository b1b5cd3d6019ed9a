"""The machine: hardware facts, reading them from the system, and which build variant it admits."""
