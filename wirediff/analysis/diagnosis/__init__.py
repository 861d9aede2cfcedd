"""Diagnose failing exchanges: chain them, explain them, name the provider and a remedy."""
