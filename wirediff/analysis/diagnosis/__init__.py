"""Diagnosis: failing exchanges grouped into chains and explained, with the provider and a remedy."""
