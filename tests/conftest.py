"""Shared fixtures. Statistical tests in this suite use fixed trial counts and state their
false-failure probability; none retries."""
