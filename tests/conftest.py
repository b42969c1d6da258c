"""Shared test fixtures: the no-execution guard runs around every test."""
